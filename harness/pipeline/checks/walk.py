"""Whether the tokens follow one walk: teacher forcing (the kept step logits are
those rebuilt from the emitted tokens, the direct check of the double walk), greedy
tokens are the argmax of their own step logits, every sampled token is in the support
of its ``q`` (lossless tier); one walk per proposal and equality with the single-pass
reference (drop-in tier)."""

from __future__ import annotations

import dataclasses

import torch

from harness.defaults import REFERENCE
from harness.pipeline.check_result import CheckResult, Skip, failed, passed, skipped
from harness.pipeline.checks.subject import (
    Subject,
    contract_logits,
    counter_noise,
    exact_comparison,
    near_tie_mask,
    on_candidates,
    positions_differ,
    requested_parameters,
    staging_disagrees,
)
from harness.pipeline.diffs import max_abs_diff_text
from harness.pipeline.runner import CaseRun, ImplResult
from reference import BlockInputs, ToyDraftModel, teacher_forced_logits, top_k_mask
from reference.verifier import draft_distribution


# -- the exact per-call math, on tensors: the checks below and the oracle's calls share it --
def rebuilt_step_logits(
    *,
    model: ToyDraftModel,
    block: BlockInputs,
    tokens: torch.Tensor,
    kept_dtype: torch.dtype,
    candidates: torch.Tensor | None,
    draft_top_k: int | None = None,
) -> torch.Tensor:
    """``[bs, gamma, V]``: the step logits rebuilt from the emitted ``tokens`` ``[bs,
    gamma]`` in the dtype the sampler kept them in, ``-inf`` off the contract's
    ``candidates`` and off the drafter's own ``draft_top_k`` of the rebuilt logits (what
    it declares it truncated, compared with what it wrote). Kept no wider than the base:
    rebuilt in the base dtype and rounded to it; kept wider (float32 over a bfloat16
    base): each step's base logits plus its bias summed in that dtype, as a sampler
    keeping it does (the bias: the teacher-forced walk on zero base logits of the kept
    dtype, exact)."""
    kept, base = kept_dtype, block.base_logits.dtype
    if kept == base or torch.promote_types(kept, base) != kept:
        rebuilt = teacher_forced_logits(model=model, block=block, tokens=tokens)
    else:
        zero = dataclasses.replace(
            block, base_logits=torch.zeros_like(block.base_logits, dtype=kept)
        )
        bias = teacher_forced_logits(model=model, block=zero, tokens=tokens)
        rebuilt = block.base_logits.to(kept) + bias.to(kept)
    rebuilt = on_candidates(rebuilt, candidates)
    if draft_top_k is not None:
        rebuilt = on_candidates(rebuilt, top_k_mask(rebuilt, k=draft_top_k))
    return rebuilt.to(kept)


def teacher_forcing_mismatches(
    kept: torch.Tensor,
    *,
    model: ToyDraftModel,
    block: BlockInputs,
    tokens: torch.Tensor,
    candidates: torch.Tensor | None,
    exact: bool,
    draft_top_k: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[bs, gamma]`` mask of the positions whose kept step logits ``kept`` ``[bs, gamma,
    V]`` differ from those rebuilt from the emitted ``tokens`` (``rebuilt_step_logits``),
    and the rebuilt logits: bitwise where ``exact``, else outside the dtype's
    ``assert_close`` tolerance."""
    with torch.inference_mode():
        rebuilt = rebuilt_step_logits(
            model=model,
            block=block,
            tokens=tokens,
            kept_dtype=kept.dtype,
            candidates=candidates,
            draft_top_k=draft_top_k,
        )  # [bs, gamma, V] in the kept dtype
    return positions_differ(kept, rebuilt, exact=exact), rebuilt


def greedy_rows_not_argmax(
    kept: torch.Tensor, *, tokens: torch.Tensor, greedy_mask: torch.Tensor
) -> torch.Tensor:
    """``[bs, gamma]``: a greedy row's token that is not a maximum of its kept logits."""
    top = kept.amax(dim=-1)  # [bs, gamma]
    picked = kept.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return (picked != top) & greedy_mask.unsqueeze(1)


def tokens_outside_support(
    kept: torch.Tensor,
    *,
    tokens: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
) -> torch.Tensor:
    """``[bs, gamma]``: a sampled row's token with zero probability under its ``q``."""
    q = draft_distribution(
        kept, temperatures=temperatures, greedy_mask=torch.zeros_like(greedy_mask)
    )  # [bs, gamma, V], the verifier's q on sampled rows (greedy rows are not judged here)
    q_token = q.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [bs, gamma]
    return ~(q_token > 0) & ~greedy_mask.unsqueeze(1)


def check_teacher_forcing(subject: Subject) -> CheckResult:
    """The kept step logits (``corrected_out``; sglang 0.5.23's ``step_logits``) must equal
    the logits rebuilt from the emitted tokens in the dtype the sampler kept them in
    (``rebuilt_step_logits``); a kept dtype other than the convention's is named, not failed."""
    run, result = subject.run, subject.result
    name = "teacher_forcing"
    if not run.case.folded_sampling:
        return skipped(
            name, "no corrected logits without folded sampling", code=Skip.NOT_APPLICABLE
        )
    if result.tokens is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    if result.corrected is None and not result.keeps_step_logits:
        return skipped(
            name, "its convention keeps no step logits on this call", code=Skip.NOT_APPLICABLE
        )
    if result.corrected is None:
        return failed(name, "folded sampling but corrected_out was not written")
    differ, rebuilt = teacher_forcing_mismatches(
        result.corrected,
        model=run.inputs.model,
        block=run.block,
        tokens=result.tokens,
        candidates=result.candidates,
        exact=exact_comparison(run),
        draft_top_k=result.draft_top_k,
    )
    if differ.any():
        return failed(
            name,
            f"corrected_out differs from the logits rebuilt from the emitted tokens "
            f"({max_abs_diff_text(result.corrected, rebuilt)})",
            differ,
        )
    return passed(name, kept_dtype_note(run, result))


def kept_dtype_note(run: CaseRun, result: ImplResult) -> str:
    """The kept dtype, named where it is not the base's (a step-dtype policy of its own:
    a drop-in difference, never a lossless one)."""
    assert result.corrected is not None
    kept, base = result.corrected.dtype, run.block.base_logits.dtype
    if kept == base:
        return ""
    return f"rebuilt in the kept dtype {kept} over a {base} base (a step-dtype policy)"


def check_greedy_consistency(subject: Subject) -> CheckResult:
    """Greedy folds: token ``k`` is the argmax of its own teacher-forced step logits.

    In float32 through the step loop this is exact. The fused path (fp32 accumulate)
    and reduced precision may pick another token only at a near-tie.
    """
    run, result = subject.run, subject.result
    name = "greedy_consistency"
    case = run.case
    if case.folded_sampling:
        return skipped(name, "folded sampling: covered by noise_replay", code=Skip.NOT_APPLICABLE)
    if result.tokens is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    with torch.inference_mode():
        rebuilt = contract_logits(
            result,
            teacher_forced_logits(model=run.inputs.model, block=run.block, tokens=result.tokens),
        )
    differ = rebuilt.argmax(dim=-1) != result.tokens
    if exact_comparison(run) and not case.fused_path_available:
        allowed = torch.zeros_like(differ)
    else:
        allowed = near_tie_mask(rebuilt, result.tokens)
    bad = differ & ~allowed
    if bad.any():
        return failed(name, "emitted token is not the argmax of its step logits", bad)
    ties = int((differ & allowed).sum())
    return passed(name, f"{ties} near-tie(s) resolved differently" if ties else "")


def check_greedy_rows_argmax(subject: Subject) -> CheckResult:
    """Folded sampling: a greedy row's token is a maximum of its own corrected logits."""
    run, result = subject.run, subject.result
    name = "greedy_rows_argmax"
    case = run.case
    if not case.folded_sampling:
        return skipped(name, "greedy fold: covered by greedy_consistency", code=Skip.NOT_APPLICABLE)
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    _, greedy_mask = requested_parameters(run, result)
    bad = greedy_rows_not_argmax(result.corrected, tokens=result.tokens, greedy_mask=greedy_mask)
    if bad.any():
        staging = staging_disagrees(run, result, bad.any(dim=1))
        drafted = f"{staging}: greedy requests drafted as samples" if staging else ""
        return failed(
            name, f"greedy row's token is not the argmax of its corrected logits{drafted}", bad
        )
    return passed(name)


def check_support(subject: Subject) -> CheckResult:
    """Every token of a sampled row has non-zero probability under its own ``q``."""
    run, result = subject.run, subject.result
    name = "support"
    if not run.case.folded_sampling:
        return skipped(name, "no q without folded sampling", code=Skip.NOT_APPLICABLE)
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    temperatures, greedy_mask = requested_parameters(run, result)
    outside = tokens_outside_support(
        result.corrected, tokens=result.tokens, temperatures=temperatures, greedy_mask=greedy_mask
    )
    if outside.any():
        return failed(name, "emitted token has zero probability under its q", outside)
    return passed(name)


def check_single_walk(subject: Subject) -> CheckResult:
    """One proposal, one walk: at most one ``sample_block`` or fused call, and at most
    ``gamma`` Markov head steps (an implementation with its own loop counts by steps)."""
    run, result = subject.run, subject.result
    name = "single_walk"
    work, gamma = result.work, run.case.gamma
    if work.walks + work.fused_calls > 1 or work.head_steps > gamma:
        return failed(
            name,
            f"{work.walks} walk(s), {work.fused_calls} fused call(s) and {work.head_steps} "
            f"head steps for one proposal of gamma={gamma}",
        )
    return passed(name)


# -- differential --------------------------------------------------------------------------
def contract_differences(result: ImplResult, reference: ImplResult) -> list[str]:
    """The differences of contract a drop-in mismatch comes from, each named: the noise
    source, the step-dtype policy, and the rule for NaN (docs/numerics.md)."""
    differences = []
    if counter_noise(result) is not None and counter_noise(reference) is None:
        differences.append(
            "noise source: counter-based noise (key, counter) where the reference "
            "draws torch exponential_ noise"
        )
    mine, theirs = result.corrected, reference.corrected
    if mine is not None and theirs is not None and mine.dtype != theirs.dtype:
        differences.append(
            f"step-dtype policy: step logits in {mine.dtype} where the reference keeps "
            f"{theirs.dtype} (the base dtype)"
        )
    if mine is not None and theirs is not None and bool(theirs.isnan().any()):
        nan_rows = mine.isnan().any(dim=-1) != theirs.isnan().any(dim=-1)
        if bool(nan_rows.any()):
            differences.append("NaN rule: NaN step logits in other positions than the reference's")
    return differences


def check_matches_reference(subject: Subject) -> CheckResult:
    """Same tokens, corrected logits and confidence as the single-pass reference."""
    run, result = subject.run, subject.result
    reference = run.results[REFERENCE]
    name = "matches_reference"
    if reference.error is not None:
        return failed(name, f"the reference itself raised {reference.error.summary()}")
    if result.tokens is None or reference.tokens is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    exact = exact_comparison(run)
    differences = contract_differences(result, reference)
    named = f" ({'; '.join(differences)})" if differences else ""
    token_diff = result.tokens != reference.tokens
    if token_diff.any():
        return failed(name, f"tokens differ from the reference{named}", token_diff)
    pairs = [
        ("corrected_out", result.corrected, reference.corrected),
        ("confidence_out", result.confidence, reference.confidence),
    ]
    for label, mine, theirs in pairs:
        if (mine is None) != (theirs is None):
            return failed(name, f"{label} written by one side only")
        if mine is not None and theirs is not None:
            if mine.dtype != theirs.dtype:
                return failed(name, f"{label} differs from the reference{named}")
            differ = positions_differ(mine.unsqueeze(-1), theirs.unsqueeze(-1), exact=exact)
            if differ.any():
                return failed(name, f"{label} differs from the reference{named}", differ)
    return passed(name, "bit-exact" if exact else "within dtype tolerance")
