"""The registry: each check declared once (its function, its tier, what it needs before it
judges, its code in the checks table), in the order checks run and are listed in.
``CHECK_TIERS``, ``CHECK_CODES`` and ``run_checks`` are built from ``CHECKS``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from harness.defaults import REFERENCE
from harness.pipeline.check_result import CheckResult, Skip, Tier, skipped
from harness.pipeline.checks.buffers import (
    check_inputs_unchanged,
    check_no_writes_outside_batch,
    check_outputs_written,
    check_ran,
    check_state_restored,
)
from harness.pipeline.checks.life import (
    check_life_drop_in,
    check_life_fresh_noise,
    check_life_replays,
    check_life_server_buffer,
    replay_run,
)
from harness.pipeline.checks.noise import check_fresh_noise, check_noise_budget, check_noise_replay
from harness.pipeline.checks.plumbing import (
    check_noise_shared_with_verifier,
    check_torch_stream_shared_with_verifier,
)
from harness.pipeline.checks.subject import Subject, token_ids_valid
from harness.pipeline.checks.walk import (
    check_greedy_consistency,
    check_greedy_rows_argmax,
    check_matches_reference,
    check_single_walk,
    check_support,
    check_teacher_forcing,
)
from harness.pipeline.runner import CaseRun, ImplResult

__all__ = [
    "CHECKS",
    "CHECK_CODES",
    "CHECK_TIERS",
    "Check",
    "Needs",
    "run_checks",
    "tier_of",
]


class Needs(Enum):
    """What a check needs of its subject before it judges; a subject without it does not
    list the check (``ran`` and ``life_replays`` say why there is nothing to judge)."""

    NOTHING = "nothing"  # every call: whether it ran, and what the harness guards
    A_RETURN = "a return"  # the call returned
    TOKEN_IDS = "token ids"  # the call returned token ids in range: the checks index by them
    A_LIFE = "a life"  # token ids in range, and the case has a life
    A_LIVED_LIFE = "a lived life"  # ... and the life was run, its construction did not raise
    THE_REFERENCE = "the reference"  # the call returned and the reference ran beside it

    def met_by(self, subject: Subject) -> bool:
        run, result = subject.run, subject.result
        if self is Needs.NOTHING:
            return True
        if not result.ok:
            return False
        if self is Needs.A_RETURN:
            return True
        if self is Needs.THE_REFERENCE:
            return REFERENCE in run.results and result.name != REFERENCE
        if result.tokens is not None and not token_ids_valid(run, result.tokens):
            return False  # what follows indexes by token id
        if self is Needs.TOKEN_IDS:
            return True
        life = result.life
        lived = life is not None and life.error is None
        return bool(run.case.replays) and (self is Needs.A_LIFE or lived)


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check, declared once."""

    name: str
    function: Callable[[Subject], CheckResult]
    tier: Tier
    needs: Needs
    code: str | None = None  # its code in the checks table; None: its name


CHECKS: tuple[Check, ...] = (  # the order checks run in, and are listed in
    Check(
        name="ran",
        function=check_ran,
        tier=Tier.LOSSLESS,
        needs=Needs.NOTHING,
        code="RAN",
    ),
    Check(
        name="outputs_written",
        function=check_outputs_written,
        tier=Tier.LOSSLESS,
        needs=Needs.A_RETURN,
        code="OUT",
    ),
    Check(
        name="no_writes_outside_batch",
        function=check_no_writes_outside_batch,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="OOB",
    ),
    Check(
        name="teacher_forcing",
        function=check_teacher_forcing,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="TF",
    ),
    Check(
        name="noise_replay",
        function=check_noise_replay,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="NR",
    ),
    Check(
        name="greedy_consistency",
        function=check_greedy_consistency,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="GC",
    ),
    Check(
        name="greedy_rows_argmax",
        function=check_greedy_rows_argmax,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="GA",
    ),
    Check(
        name="support",
        function=check_support,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="SUP",
    ),
    Check(
        name="fresh_noise",
        function=check_fresh_noise,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="FN",
    ),
    Check(
        name="noise_shared_with_verifier",
        function=check_noise_shared_with_verifier,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="NSV",
    ),
    Check(
        name="torch_stream_shared_with_verifier",
        function=check_torch_stream_shared_with_verifier,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        code="TSV",
    ),
    Check(
        name="noise_budget",
        function=check_noise_budget,
        tier=Tier.DROP_IN,
        needs=Needs.TOKEN_IDS,
        code="NB",
    ),
    Check(
        name="single_walk",
        function=check_single_walk,
        tier=Tier.DROP_IN,
        needs=Needs.TOKEN_IDS,
        code="SW",
    ),
    Check(
        name="inputs_unchanged",
        function=check_inputs_unchanged,
        tier=Tier.LOSSLESS,
        needs=Needs.NOTHING,
        code="IN",
    ),
    Check(
        name="state_restored",
        function=check_state_restored,
        tier=Tier.LOSSLESS,
        needs=Needs.NOTHING,
    ),
    Check(
        name="life_replays",
        function=check_life_replays,
        tier=Tier.LOSSLESS,
        needs=Needs.A_LIFE,
    ),
    Check(
        name="life_server_buffer",
        function=check_life_server_buffer,
        tier=Tier.LOSSLESS,
        needs=Needs.A_LIVED_LIFE,
    ),
    Check(
        name="life_fresh_noise",
        function=check_life_fresh_noise,
        tier=Tier.LOSSLESS,
        needs=Needs.A_LIVED_LIFE,
    ),
    Check(
        name="life_drop_in",
        function=check_life_drop_in,
        tier=Tier.DROP_IN,
        needs=Needs.A_LIVED_LIFE,
    ),
    Check(
        name="matches_reference",
        function=check_matches_reference,
        tier=Tier.DROP_IN,
        needs=Needs.THE_REFERENCE,
        code="REF",
    ),
)
CHECK_TIERS: dict[str, Tier] = {check.name: check.tier for check in CHECKS}
CHECK_CODES: dict[str, str] = {check.name: check.code for check in CHECKS if check.code}


def tier_of(check_name: str) -> Tier:
    """The tier of a registered check (``KeyError`` for a name ``CHECKS`` does not know)."""
    return CHECK_TIERS[check_name]


def run_checks(subject: Subject) -> list[CheckResult]:
    """Every check whose needs the subject meets, in the order of ``CHECKS``; one skip,
    ``ran``, when the case is outside the implementation's calling convention (nothing
    ran). The replays of a lived life are judged once, here, for both life verdicts."""
    outside = subject.result.outside_contract
    if outside is not None:
        return [skipped("ran", f"outside this contract: {outside}", code=Skip.OUTSIDE_CONTRACT)]
    if Needs.A_LIVED_LIFE.met_by(subject):
        subject = replace(subject, replay_failures=replay_failures(subject.run, subject.result))
    return [check.function(subject) for check in CHECKS if check.needs.met_by(subject)]


def replay_failures(run: CaseRun, result: ImplResult) -> dict[Tier, list[str]]:
    """Per tier, the first failing per-call check of each replay that has one, named."""
    assert result.life is not None
    failures: dict[Tier, list[str]] = {tier: [] for tier in Tier}
    replays = result.life.replays
    for replay in replays:
        first: dict[Tier, str] = {}
        others = tuple(r.result for r in replays if r is not replay)
        subject = Subject(replay_run(run, replay), replay.result, other_calls=others)
        for check in run_checks(subject):
            tier = tier_of(check.name)
            if check.failed and tier not in first:
                first[tier] = f"{replay.step.describe()}: {check.name}: {check.detail}"
        for tier, failure in first.items():
            failures[tier].append(failure)
    return failures
