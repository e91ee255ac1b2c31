"""The ledger: how ``legacy`` must diverge from ``fixed``, per case kind, held strictly.

Each divergence class names the defect that causes it. For a case the ledger
predicts which classes must appear; the observation says which did. An
unexpected divergence, or an expected one that no longer appears, is a failure.

Two effects of the double walk depend on chance: sampled tokens only differ, and
teacher forcing only breaks, where the two walks happened to draw different
tokens. The ledger reads the tokens of each legacy walk (recorded by the head
observer) to know where that is, so the prediction stays exact. Cases built to
expose the bug (the standard matrix) pass ``require_observable=True``: there a
double walk that happened to draw the same tokens twice is itself a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.case import Case
from harness.defaults import FIXED, LEGACY
from harness.pipeline.check_result import MAX_LISTED
from harness.pipeline.checks.subject import (
    Subject,
    exact_comparison,
    near_tie_mask,
    positions_differ,
)
from harness.pipeline.checks.walk import check_teacher_forcing
from harness.pipeline.control_flow import control_flow, legacy_pass1_cause, legacy_pass1_error
from harness.pipeline.runner import CaseRun, ImplResult, RaisedError
from reference import teacher_forced_logits

LEDGER_CLASSES: dict[str, str] = {
    "legacy_raises": (
        "pass 1 gets hidden_states.view(bs, gamma, -1): wrong rows in the no-anchor layout, "
        "so legacy raises (gated/rnn width mismatch, or gamma does not divide H); fixed works"
    ),
    "double_walk": (
        "the second sample_block call runs unconditionally: two walks where fixed runs one"
    ),
    "noise_doubled": "folded sampling draws 2*gamma noise tensors instead of gamma",
    "sampled_tokens_diverge": (
        "out comes from walk 2, corrected_out from walk 1: tokens differ on sampled rows only, "
        "corrected_out equals fixed's"
    ),
    "teacher_forcing_fails": (
        "corrected_out[:, k] was conditioned on walk 1's token k-1, not on the emitted one"
    ),
    "fused_result_discarded": (
        "the fused greedy result is computed, then discarded: the unconditional loop walk "
        "runs after it and its tokens are emitted (one extra walk where fixed runs none)"
    ),
}


def expected_classes(case: Case) -> set[str]:
    """The divergence classes the bug predicts for the case kind, read off the modelled
    control flow of legacy and fixed (``harness.pipeline.control_flow``)."""
    legacy, fixed = control_flow(case, LEGACY), control_flow(case, FIXED)
    if legacy.raises is not None:
        return {"legacy_raises"}
    expected = set()
    if legacy.fused_calls and legacy.walks:
        expected.add("fused_result_discarded")  # one walk after the fused call, not two
    elif legacy.walks > fixed.walks:
        expected.add("double_walk")
    if legacy.noise_calls > fixed.noise_calls:
        expected.add("noise_doubled")
    if case.has_sampled_rows and legacy.corrected_from not in (None, legacy.tokens_from):
        # out and corrected_out come from walks with independent noise
        expected |= {"sampled_tokens_diverge", "teacher_forcing_fails"}
    return expected


@dataclass(frozen=True)
class LedgerEntry:
    """Expected and observed classes for one case, and what does not match."""

    expected: frozenset[str]
    observed: frozenset[str]
    latent: frozenset[str]  # expected, but the two walks happened to draw the same tokens
    problems: tuple[str, ...]
    evidence: dict[str, str]

    @property
    def holds(self) -> bool:
        return not self.problems


def _raise_evidence(case: Case, error: RaisedError) -> str:
    """The exception, and where it is the raise the bug predicts, why it is the bug."""
    cause = legacy_pass1_cause(case)
    if cause is None or error.type != legacy_pass1_error(case):
        return error.summary()  # not the documented raise: the ledger reports it as is
    return f"{error.summary()} — {cause}"


def _walks(count: int, kind: str = "") -> str:
    """``"1 walk"``, ``"2 walks"``; ``kind`` before the noun (``"1 extra walk"``)."""
    return f"{count} {kind}walk" + ("" if count == 1 else "s")


def _positions(mask: torch.Tensor) -> str:
    where = [f"(row {b}, step {k})" for b, k in mask.nonzero().tolist()]
    more = f" and {len(where) - MAX_LISTED} more" if len(where) > MAX_LISTED else ""
    return ", ".join(where[:MAX_LISTED]) + more


def _walk_one_conditioning_shows(run: CaseRun, legacy: ImplResult) -> bool:
    """Whether the logits rebuilt from walk 1's tokens differ, in the step dtype and as
    ``teacher_forcing`` compares them, from those rebuilt from the emitted tokens: where
    they do not (a head whose outputs for the differing tokens round alike), logits kept
    from walk 1 cannot be told from the emitted walk's."""
    if len(legacy.walk_tokens) < 2 or legacy.corrected is None or legacy.tokens is None:
        return True  # not a double walk, or nothing kept: the prediction stays strict
    with torch.inference_mode():
        walk_one, emitted = (
            teacher_forced_logits(model=run.inputs.model, block=run.block, tokens=tokens).to(
                legacy.corrected.dtype
            )
            for tokens in (legacy.walk_tokens[0], legacy.tokens)
        )
    return bool(positions_differ(walk_one, emitted, exact=exact_comparison(run)).any())


def _walks_differ(legacy: ImplResult, sampled: torch.Tensor) -> tuple[bool, bool]:
    """Whether legacy's two walks drew different tokens on sampled rows: anywhere,
    and at a step ``k <= gamma - 2`` (which later steps are conditioned on)."""
    if len(legacy.walk_tokens) < 2:
        return True, True  # not a double walk: the prediction stays strict
    first, second = legacy.walk_tokens[0], legacy.walk_tokens[-1]
    differ = (first != second) & sampled.unsqueeze(1)
    return bool(differ.any()), bool(differ[:, :-1].any())


def observe_divergence(
    run: CaseRun,
    legacy: ImplResult,
    fixed: ImplResult,
    *,
    require_observable: bool,
) -> LedgerEntry:
    """Compare legacy with fixed on one case and hold the result against the ledger."""
    case = run.case
    expected = expected_classes(case)
    observed: set[str] = set()
    evidence: dict[str, str] = {}
    problems: list[str] = []
    latent: set[str] = set()

    if fixed.error is not None:
        problems.append(f"fixed raised {fixed.error.summary()}; nothing to compare against")
        return LedgerEntry(frozenset(expected), frozenset(), frozenset(), tuple(problems), {})
    if legacy.error is not None:
        observed.add("legacy_raises")
        evidence["legacy_raises"] = _raise_evidence(case, legacy.error)
    else:
        _observe_work(case, legacy, fixed, observed, evidence)
        _observe_outputs(run, legacy, fixed, observed, evidence, problems)

    if legacy.ok and case.has_sampled_rows:
        sampled = ~torch.tensor(case.greedy_rows, device=run.block.base_logits.device)
        anywhere, before_last = _walks_differ(legacy, sampled)
        if not anywhere:
            latent.add("sampled_tokens_diverge")
        if not before_last or (
            "teacher_forcing_fails" not in observed  # seen: the conditioning shows
            and not _walk_one_conditioning_shows(run, legacy)
        ):
            latent.add("teacher_forcing_fails")
    if require_observable:
        for name in sorted(latent & expected):
            problems.append(
                f"{name}: the two legacy walks drew the same tokens (or tokens whose logits "
                "round alike), "
                "so this case no longer exposes the bug"
            )
        latent = set()
    for name in sorted(expected - observed - latent):
        problems.append(f"expected divergence {name!r} did not appear ({LEDGER_CLASSES[name]})")
    for name in sorted(observed - expected):
        problems.append(f"unexpected divergence {name!r}: {evidence.get(name, '')}")
    return LedgerEntry(
        frozenset(expected), frozenset(observed), frozenset(latent), tuple(problems), evidence
    )


def _observe_work(
    case: Case,
    legacy: ImplResult,
    fixed: ImplResult,
    observed: set[str],
    evidence: dict[str, str],
) -> None:
    lw, fw = legacy.work, fixed.work
    if lw.walks == fw.walks + 1 and fw.walks >= 1:
        observed.add("double_walk")
        evidence["double_walk"] = f"{lw.walks} walks vs {fw.walks}"
    if case.folded_sampling and lw.noise_calls == 2 * fw.noise_calls == 2 * case.gamma:
        observed.add("noise_doubled")
        evidence["noise_doubled"] = (
            f"{lw.noise_calls} draws ({lw.noise_elements} elements) vs "
            f"{fw.noise_calls} ({fw.noise_elements})"
        )
    if lw.fused_calls == 1 and lw.walks >= 1 and fw.fused_calls == 1 and fw.walks == 0:
        observed.add("fused_result_discarded")
        evidence["fused_result_discarded"] = (
            f"legacy computes the fused result and discards it, emitting the tokens of "
            f"{_walks(lw.walks)} run after it; fixed emits the fused result "
            f"({_walks(lw.walks, 'extra ')} vs none)"
        )


def _observe_outputs(
    run: CaseRun,
    legacy: ImplResult,
    fixed: ImplResult,
    observed: set[str],
    evidence: dict[str, str],
    problems: list[str],
) -> None:
    case = run.case
    assert legacy.tokens is not None and fixed.tokens is not None
    greedy = torch.tensor(case.greedy_rows, device=fixed.tokens.device).unsqueeze(1)
    token_diff = legacy.tokens != fixed.tokens  # [bs, gamma]
    if case.fused_path_available:
        _check_fused_differences(run, legacy, fixed, token_diff, problems)
    elif (token_diff & greedy).any():
        problems.append(f"tokens differ on greedy rows at {_positions(token_diff & greedy)}")
    if (token_diff & ~greedy).any() and case.folded_sampling:
        observed.add("sampled_tokens_diverge")
        evidence["sampled_tokens_diverge"] = f"tokens differ at {_positions(token_diff & ~greedy)}"
    elif token_diff.any() and not case.fused_path_available:
        problems.append(f"tokens differ outside sampled rows at {_positions(token_diff)}")
    if case.folded_sampling:
        if legacy.corrected is None or fixed.corrected is None:
            problems.append("corrected_out missing for legacy or fixed")
        elif not torch.equal(legacy.corrected, fixed.corrected):
            problems.append(
                "corrected_out differs between legacy and fixed (the ledger says equal)"
            )
        teacher_forcing = check_teacher_forcing(Subject(run, legacy))
        if teacher_forcing.failed:
            observed.add("teacher_forcing_fails")
            evidence["teacher_forcing_fails"] = teacher_forcing.detail
    _check_confidence(legacy, fixed, token_diff, problems)


def _check_fused_differences(
    run: CaseRun,
    legacy: ImplResult,
    fixed: ImplResult,
    token_diff: torch.Tensor,
    problems: list[str],
) -> None:
    """Fused vs loop tokens may differ, but each row's first difference must be a
    near-tie of the shared step logits (fp32 accumulate vs model-dtype rounding)."""
    if not token_diff.any():
        return
    assert legacy.tokens is not None and fixed.tokens is not None
    with torch.inference_mode():
        logits = teacher_forced_logits(
            model=run.inputs.model, block=run.block, tokens=legacy.tokens
        )
    first = token_diff & (token_diff.cumsum(dim=1) == 1)
    not_a_tie = first & ~near_tie_mask(logits, fixed.tokens)
    if not_a_tie.any():
        problems.append(
            f"fused and loop tokens differ without a near-tie at {_positions(not_a_tie)}"
        )


def _check_confidence(
    legacy: ImplResult, fixed: ImplResult, token_diff: torch.Tensor, problems: list[str]
) -> None:
    if legacy.confidence is None or fixed.confidence is None:
        if (legacy.confidence is None) != (fixed.confidence is None):
            problems.append("confidence_out written by one of legacy/fixed only")
        return
    # Confidence of step k depends on tokens up to k-1 and k: equal wherever both agree.
    same_prefix = ~(token_diff.cumsum(dim=1) > 0)
    differ = (legacy.confidence != fixed.confidence) & same_prefix
    if differ.any():
        problems.append(f"confidence differs where tokens agree at {_positions(differ)}")
