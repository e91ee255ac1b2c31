"""Every check fails on the defect aimed at it, and on nothing else.

One row per check of ``harness.pipeline.checks``: a planted-defect sampler
(``tests/plugins/planted_defects.py``, ``life_defects.py`` for the checks of a
server's life), the case that exposes it, and the exact set of checks that must fail.
Add a check by appending a row.

Self-checks need no second implementation, so a row runs the defect alone unless
``against_reference``: a defect that changes the emitted tokens, logits or confidence
also differs from the reference by construction, and ``matches_reference`` has its own
row (a self-consistent sampler that is not drop-in). Support has no defect of its own:
no token wins the race at zero probability, so a recorded draw cannot explain a
zero-probability token and noise replay fails with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from harness.pipeline.case import Case, make_case
from harness.pipeline.checks import CheckResult
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins import (
    broken_samplers,
    life_defects,
    planted_defects,
    planted_defects_verdicts,
    untrusted_samplers,
)

SHAPE = {"bs": 4, "gamma": 4, "vocab_size": 64, "hidden_size": 16, "markov_rank": 8}
MIXED = (False, True, False, False)  # one greedy row among sampled ones
FOLDED = make_case(**SHAPE, greedy_rows=MIXED, seed=11, name="folded, mixed rows")
FOLDED_CONFIDENCE = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, seed=12)
GREEDY_FOLD = make_case(**SHAPE, greedy_rows=(True,) * 4, folded_sampling=False, seed=13)
COLD = make_case(**SHAPE, temperature=1e-3, seed=14, name="folded, T=0.001")
BUCKETED = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, max_bs=6, seed=15)
LIFE = make_case(**SHAPE, greedy_rows=MIXED, max_bs=6, replays=8, seed=16, name="a life")
DEFECT = "defect"


@dataclass(frozen=True)
class DefectRow:
    """A planted defect, the case that exposes it and the checks that must fail."""

    check: str  # the check the defect is aimed at
    sampler: type
    case: Case
    fails: frozenset[str]
    against_reference: bool = False


ROWS = (
    DefectRow("ran", broken_samplers.RaisingSampler, FOLDED, frozenset({"ran"}), True),
    DefectRow(
        "outputs_written",
        planted_defects.ConfidenceLogitSampler,
        FOLDED_CONFIDENCE,
        frozenset({"outputs_written"}),
    ),
    DefectRow(
        "teacher_forcing",
        planted_defects.LogSoftmaxCorrectedSampler,
        FOLDED,
        frozenset({"teacher_forcing"}),
    ),
    DefectRow(
        "noise_replay",
        planted_defects_verdicts.WrongTemperatureSampler,
        FOLDED,
        frozenset({"noise_replay"}),
    ),
    DefectRow(
        "noise_budget",
        planted_defects.NoiseRefreshSampler,
        FOLDED,
        frozenset({"noise_budget"}),
        True,
    ),
    DefectRow(
        "no_writes_outside_batch",
        planted_defects_verdicts.OutPastBatchSampler,
        BUCKETED,
        frozenset({"no_writes_outside_batch"}),
        True,
    ),
    DefectRow(
        "inputs_unchanged",
        planted_defects_verdicts.InputMutatingSampler,
        FOLDED,
        frozenset({"inputs_unchanged"}),
        True,
    ),
    DefectRow(
        "fresh_noise",
        planted_defects_verdicts.FrozenNoiseSampler,
        FOLDED,
        frozenset({"fresh_noise"}),
    ),
    DefectRow(
        "greedy_rows_argmax",
        planted_defects.GreedyRowsRacedSampler,
        FOLDED,
        frozenset({"greedy_rows_argmax", "noise_replay"}),
    ),
    DefectRow(
        "greedy_consistency",
        planted_defects.NegatedGreedySampler,
        GREEDY_FOLD,
        frozenset({"greedy_consistency"}),
    ),
    DefectRow(
        "support",
        planted_defects.UntemperedSampler,
        COLD,
        frozenset({"support", "noise_replay"}),
    ),
    DefectRow(
        "single_walk",
        planted_defects.WarmupWalkSampler,
        FOLDED,
        frozenset({"single_walk"}),
        True,
    ),
    DefectRow(
        "state_restored",
        untrusted_samplers.DtypeLeakingSampler,
        FOLDED,
        frozenset({"state_restored"}),
    ),
    DefectRow(
        "life_replays",
        life_defects.WrongFromThirdCallSampler,
        LIFE,
        frozenset({"life_replays"}),
    ),
    DefectRow(
        "life_server_buffer",
        life_defects.OwnOutBufferSampler,
        LIFE,
        frozenset({"life_server_buffer", "life_replays"}),  # the replays read that buffer
    ),
    DefectRow(
        "life_fresh_noise",
        life_defects.AlternatingNoiseSampler,
        LIFE,
        frozenset({"life_fresh_noise"}),
    ),
    DefectRow(
        "life_drop_in",
        life_defects.ExtraWalkFromThirdCallSampler,
        LIFE,
        frozenset({"life_drop_in"}),
    ),
    DefectRow(
        "matches_reference",
        planted_defects.PrivateGeneratorSampler,
        LIFE,
        frozenset({"matches_reference"}),
        True,
    ),
)


def _checks_of_defect(row: DefectRow) -> list[CheckResult]:
    defect = Implementation(DEFECT, row.sampler, f"tests.plugins:{row.sampler.__name__}")
    others = builtin_implementations(("reference",)) if row.against_reference else []
    run = run_case(row.case, [*others, defect])
    return evaluate_run(run, require_observable=False).checks[DEFECT]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.check)
def test_each_planted_defect_fails_exactly_its_checks(row: DefectRow) -> None:
    checks = _checks_of_defect(row)
    failed = {c.name for c in checks if c.failed}
    assert failed == row.fails, [(c.name, c.status, c.detail) for c in checks]
    assert row.check in failed


def test_every_check_has_a_row() -> None:
    # the matches_reference row's sampler is self-consistent, so every check runs on it
    names = {c.name for c in _checks_of_defect(ROWS[-1])}
    assert names == {row.check for row in ROWS}


@pytest.mark.parametrize(
    "case", [FOLDED, FOLDED_CONFIDENCE, GREEDY_FOLD, COLD, BUCKETED, LIFE], ids=Case.label
)
def test_fixed_passes_every_check_on_the_defect_cases(case: Case) -> None:
    run = run_case(case, builtin_implementations(("reference", "fixed")))
    checks = evaluate_run(run, require_observable=False).checks["fixed"]
    assert not [c for c in checks if c.failed], [(c.name, c.detail) for c in checks]
