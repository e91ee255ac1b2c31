"""Checks: pure functions of a case run that say whether a result is right.

Self-consistency (needs no second implementation): teacher forcing, noise
replay, greedy consistency, support, noise accounting. Differential: equality
with the single-pass reference. Every failing check names the rows, steps and
values that show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from harness.pipeline.runner import CaseRun, ImplResult
from reference import exponential_race_torch, teacher_forced_logits
from reference.sampling_params import stage_sampling_params

Status = Literal["pass", "fail", "skip"]
MAX_LISTED = 6  # positions named in a failure message


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one implementation and case."""

    name: str
    status: Status
    detail: str = ""
    positions: tuple[tuple[int, int], ...] = field(default=())  # (row, step) that show it

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def _passed(name: str, detail: str = "") -> CheckResult:
    return CheckResult(name, "pass", detail)


def _skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", why)


def _failed(name: str, detail: str, mask: torch.Tensor | None = None) -> CheckResult:
    positions: tuple[tuple[int, int], ...] = ()
    if mask is not None:
        where = mask.nonzero().tolist()
        positions = tuple((int(b), int(k)) for b, k in where)
        listed = ", ".join(f"(row {b}, step {k})" for b, k in positions[:MAX_LISTED])
        more = f" and {len(positions) - MAX_LISTED} more" if len(positions) > MAX_LISTED else ""
        detail = f"{detail} at {listed}{more}"
    return CheckResult(name, "fail", detail, positions)


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` of ``torch.testing.assert_close`` for the dtype."""
    return {
        torch.float16: (1e-3, 1e-5),
        torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7),
    }[dtype]


def positions_differ(actual: torch.Tensor, expected: torch.Tensor, *, exact: bool) -> torch.Tensor:
    """``[bs, gamma]`` mask of positions whose trailing values differ (``[bs, gamma, ...]``).

    Exact: bitwise. Otherwise: outside the dtype's ``assert_close`` tolerance.
    """
    if exact:
        differ = actual != expected
    else:
        rtol, atol = tolerances(expected.dtype)
        a, e = actual.double(), expected.double()
        differ = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    return differ.reshape(*differ.shape[:2], -1).any(dim=-1)


def staged_parameters(run: CaseRun) -> tuple[torch.Tensor, torch.Tensor]:
    """The temperatures and greedy mask a correct sampler stages for the case."""
    case = run.case
    temperatures = torch.ones(case.bs, dtype=torch.float32, device=run.block.base_logits.device)
    greedy_mask = torch.ones(case.bs, dtype=torch.bool, device=temperatures.device)
    stage_sampling_params(
        bs=case.bs,
        sampling_info=run.inputs.sampling_info,
        temperatures=temperatures,
        greedy_mask=greedy_mask,
    )
    return temperatures, greedy_mask


def exact_comparison(run: CaseRun) -> bool:
    """Bit-exact where the math is exact: float32 on the case's one device."""
    return run.case.dtype == "float32"


# -- self-consistency ----------------------------------------------------------------------
def check_ran(result: ImplResult) -> CheckResult:
    if result.error is not None:
        return CheckResult("ran", "fail", f"raised {result.error.summary()}")
    return _passed("ran")


def _token_ids_valid(run: CaseRun, tokens: torch.Tensor) -> bool:
    return bool(((tokens >= 0) & (tokens < run.case.vocab_size)).all())


def check_outputs_written(run: CaseRun, result: ImplResult) -> CheckResult:
    """Every output entry was written with a valid value: token ids in ``[0, V)``,
    finite corrected logits (the inputs are finite), confidence in ``[0, 1]``."""
    name = "outputs_written"
    if result.tokens is None:
        return _skipped(name, "no output")
    problems = []
    if not _token_ids_valid(run, result.tokens):
        bad_tokens = (result.tokens < 0) | (result.tokens >= run.case.vocab_size)
        problems.append((f"token ids outside [0, {run.case.vocab_size}) or unwritten", bad_tokens))
    if result.corrected is not None:
        not_finite = ~torch.isfinite(result.corrected).all(dim=-1)
        if not_finite.any():
            problems.append(("corrected_out unwritten or not finite", not_finite))
    if result.confidence is not None:
        bad_confidence = ~((result.confidence >= 0) & (result.confidence <= 1))
        if bad_confidence.any():
            problems.append(("confidence_out unwritten or outside [0, 1]", bad_confidence))
    if problems:
        detail, mask = problems[0]
        others = "; ".join(d for d, _ in problems[1:])
        return _failed(name, detail + (f" (also: {others})" if others else ""), mask)
    return _passed(name)


def check_teacher_forcing(run: CaseRun, result: ImplResult) -> CheckResult:
    """``corrected_out`` must equal the logits rebuilt from the emitted tokens."""
    name = "teacher_forcing"
    if not run.case.folded_sampling:
        return _skipped(name, "no corrected logits without folded sampling")
    if result.tokens is None:
        return _skipped(name, "no output")
    if result.corrected is None:
        return _failed(name, "folded sampling but corrected_out was not written")
    with torch.inference_mode():
        rebuilt = teacher_forced_logits(
            model=run.inputs.model, block=run.block, tokens=result.tokens
        )
    differ = positions_differ(result.corrected, rebuilt, exact=exact_comparison(run))
    if differ.any():
        max_diff = (result.corrected.double() - rebuilt.double()).abs().max().item()
        return _failed(
            name,
            f"corrected_out differs from the logits rebuilt from the emitted tokens "
            f"(max |diff| {max_diff:.4g})",
            differ,
        )
    return _passed(name)


def check_noise_replay(run: CaseRun, result: ImplResult) -> CheckResult:
    """Exactly ``gamma`` noise draws per folded call; draw ``k`` with ``corrected_out[:, k]``
    and the row temperature reproduces ``out[:, k]`` (greedy rows: the argmax)."""
    name = "noise_replay"
    case = run.case
    draws = result.work.noise_calls
    if not case.folded_sampling:
        if draws:
            return _failed(name, f"drew {draws} noise tensors in a greedy fold, expected 0")
        return _skipped(name, "greedy fold draws no noise")
    if result.tokens is None or result.corrected is None:
        return _skipped(name, "no output")
    notes = []
    if draws != case.gamma:
        notes.append(f"drew {draws} noise tensors, expected gamma={case.gamma}")
    if len(result.noise_draws) < case.gamma:
        return _failed(name, "; ".join([*notes, "too few noise draws recorded to replay"]))
    temperatures, greedy_mask = staged_parameters(run)
    replayed = torch.stack(
        [
            exponential_race_torch(
                result.corrected[:, k],
                temperatures=temperatures,
                greedy_mask=greedy_mask,
                noise=result.noise_draws[k][: case.bs],
            )
            for k in range(case.gamma)
        ],
        dim=1,
    )  # [bs, gamma]
    differ = replayed != result.tokens
    if differ.any():
        notes.append("noise draw k with corrected_out[:, k] does not give out[:, k]")
        return _failed(name, "; ".join(notes), differ)
    if notes:
        return _failed(name, "; ".join(notes))
    return _passed(name)


def near_tie_mask(step_logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """``[bs, gamma]``: whether the chosen token's logit is within the dtype's
    ``assert_close`` tolerance of the maximum (a near-tie)."""
    rtol, atol = tolerances(step_logits.dtype)
    top = step_logits.double().amax(dim=-1)
    picked = step_logits.double().gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
    return (top - picked) <= atol + rtol * top.abs()


def check_greedy_consistency(run: CaseRun, result: ImplResult) -> CheckResult:
    """Greedy folds: token ``k`` is the argmax of its own teacher-forced step logits.

    In float32 through the step loop this is exact. The fused path (fp32 accumulate)
    and reduced precision may pick another token only at a near-tie.
    """
    name = "greedy_consistency"
    case = run.case
    if case.folded_sampling:
        return _skipped(name, "folded sampling: covered by noise_replay")
    if result.tokens is None:
        return _skipped(name, "no output")
    with torch.inference_mode():
        rebuilt = teacher_forced_logits(
            model=run.inputs.model, block=run.block, tokens=result.tokens
        )
    differ = rebuilt.argmax(dim=-1) != result.tokens
    if exact_comparison(run) and not case.fused_path_available:
        allowed = torch.zeros_like(differ)
    else:
        allowed = near_tie_mask(rebuilt, result.tokens)
    bad = differ & ~allowed
    if bad.any():
        return _failed(name, "emitted token is not the argmax of its step logits", bad)
    ties = int((differ & allowed).sum())
    return _passed(name, f"{ties} near-tie(s) resolved differently" if ties else "")


def check_support(run: CaseRun, result: ImplResult) -> CheckResult:
    """Every emitted token has non-zero probability under its own ``q``."""
    name = "support"
    if not run.case.folded_sampling:
        return _skipped(name, "no q without folded sampling")
    if result.tokens is None or result.corrected is None:
        return _skipped(name, "no output")
    temperatures, _ = staged_parameters(run)
    q = torch.softmax(result.corrected.float() / temperatures.view(-1, 1, 1), dim=-1)
    q_token = q.gather(-1, result.tokens.unsqueeze(-1)).squeeze(-1)  # [bs, gamma]
    outside = ~(q_token > 0)
    if outside.any():
        return _failed(name, "emitted token has zero probability under its q", outside)
    return _passed(name)


def check_single_walk(run: CaseRun, result: ImplResult) -> CheckResult:
    """One proposal, one walk: at most one ``sample_block`` or fused call, and at most
    ``gamma`` Markov head steps (an implementation with its own loop counts by steps)."""
    name = "single_walk"
    work, gamma = result.work, run.case.gamma
    if work.walks + work.fused_calls > 1 or work.head_steps > gamma:
        return _failed(
            name,
            f"{work.walks} walk(s), {work.fused_calls} fused call(s) and {work.head_steps} "
            f"head steps for one proposal of gamma={gamma}",
        )
    return _passed(name)


def check_inputs_unchanged(result: ImplResult) -> CheckResult:
    """The shared inputs (hidden states, ids, model, sampling parameters) are as given."""
    if result.mutated_inputs:
        return _failed(
            "inputs_unchanged", "mutated its inputs: " + ", ".join(result.mutated_inputs)
        )
    return _passed("inputs_unchanged")


def check_state_restored(result: ImplResult) -> CheckResult:
    """Global state (default dtype and device, environment, threads, flags) is as found."""
    if result.leaked_state:
        return _failed("state_restored", "changed global state: " + "; ".join(result.leaked_state))
    return _passed("state_restored")


def self_checks(run: CaseRun, result: ImplResult) -> list[CheckResult]:
    """Every self-consistency check of one implementation on one case."""
    guarded = [check_inputs_unchanged(result), check_state_restored(result)]
    ran = check_ran(result)
    if ran.failed:
        return [ran, *guarded]
    written = check_outputs_written(run, result)
    if written.failed and result.tokens is not None and not _token_ids_valid(run, result.tokens):
        return [ran, written, *guarded]  # the remaining checks index by token id
    return [
        ran,
        written,
        check_teacher_forcing(run, result),
        check_noise_replay(run, result),
        check_greedy_consistency(run, result),
        check_support(run, result),
        check_single_walk(run, result),
        *guarded,
    ]


# -- differential --------------------------------------------------------------------------
def check_matches_reference(run: CaseRun, result: ImplResult, reference: ImplResult) -> CheckResult:
    """Same tokens, corrected logits and confidence as the single-pass reference."""
    name = "matches_reference"
    if reference.error is not None:
        return _failed(name, f"the reference itself raised {reference.error.summary()}")
    if result.tokens is None or reference.tokens is None:
        return _skipped(name, "no output")
    exact = exact_comparison(run)
    token_diff = result.tokens != reference.tokens
    if token_diff.any():
        return _failed(name, "tokens differ from the reference", token_diff)
    pairs = [
        ("corrected_out", result.corrected, reference.corrected),
        ("confidence_out", result.confidence, reference.confidence),
    ]
    for label, mine, theirs in pairs:
        if (mine is None) != (theirs is None):
            return _failed(name, f"{label} written by one side only")
        if mine is not None and theirs is not None:
            differ = positions_differ(mine.unsqueeze(-1), theirs.unsqueeze(-1), exact=exact)
            if differ.any():
                return _failed(name, f"{label} differs from the reference", differ)
    return _passed(name, "bit-exact" if exact else "within dtype tolerance")
