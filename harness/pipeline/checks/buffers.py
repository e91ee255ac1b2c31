"""The call and the buffers it leaves (lossless tier): it ran, every live output entry
was written with a valid value, nothing past the live batch was written, its inputs
are unchanged and the process state it found is restored."""

from __future__ import annotations

import math

import torch

from harness.pipeline.check_result import CheckResult, Skip, failed, passed, skipped
from harness.pipeline.checks.subject import Subject, token_ids_valid
from reference import top_k_mask


def logits_not_written(
    kept: torch.Tensor,
    *,
    base_logits: torch.Tensor,
    candidates: torch.Tensor | None,
    draft_top_k: int | None = None,
) -> torch.Tensor:
    """``[bs, gamma]``: positions whose kept step logits ``[bs, gamma, V]`` are unwritten
    or not finite where the drafter's law has the entry (``-inf`` is what is written
    outside its support, the base logits' ``-inf``, off a contract's candidates, and off
    the drafter's own ``draft_top_k``: teacher forcing judges that set)."""
    not_finite = ~torch.isfinite(kept)
    off_law = base_logits.to(kept.device) == -math.inf  # outside the support
    if candidates is not None:  # the contract's candidates (vLLM's top-K)
        off_law |= ~candidates.to(kept.device)
    if draft_top_k is not None:
        off_law |= ~top_k_mask(kept, k=draft_top_k)
    not_finite &= ~off_law | (kept != -math.inf)  # -inf there is written
    return not_finite.any(dim=-1)


def check_ran(subject: Subject) -> CheckResult:
    result = subject.result
    if result.error is not None:
        return CheckResult("ran", "fail", f"raised {result.error.summary()}")
    return passed("ran")


def check_outputs_written(subject: Subject) -> CheckResult:
    """Every output entry was written with a valid value: token ids in ``[0, V)``,
    finite corrected logits wherever the drafter's law has the entry (the inputs are
    finite; ``-inf`` is what is written outside its support, a reduced draft vocabulary,
    and off a contract's candidates), confidence in ``[0, 1]``, and ``verify_ids`` (where
    the convention has it) the anchor followed by the drafts."""
    run, result = subject.run, subject.result
    name = "outputs_written"
    if result.tokens is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    problems = []
    if not token_ids_valid(run, result.tokens):
        bad_tokens = (result.tokens < 0) | (result.tokens >= run.case.vocab_size)
        problems.append((f"token ids outside [0, {run.case.vocab_size}) or unwritten", bad_tokens))
    if result.corrected is not None:
        not_finite = logits_not_written(
            result.corrected,
            base_logits=run.block.base_logits,
            candidates=result.candidates,
            draft_top_k=result.draft_top_k,
        )
        if not_finite.any():
            problems.append(("corrected_out unwritten or not finite", not_finite))
    if result.confidence is not None:
        bad_confidence = ~((result.confidence >= 0) & (result.confidence <= 1))
        if bad_confidence.any():
            problems.append(("confidence_out unwritten or outside [0, 1]", bad_confidence))
    if result.verify_ids is not None:  # [bs, gamma + 1]: the anchor, then the drafts
        expected = torch.cat([run.block.anchor_tokens.unsqueeze(1), result.tokens], dim=1)
        wrong = result.verify_ids != expected.to(result.verify_ids.device)
        if wrong.any():  # a wrong anchor shows at step 0 with the drafts
            at_step = wrong[:, 1:] | wrong[:, :1]
            problems.append(("verify_ids is not [anchor | out]", at_step))
    if problems:
        detail, mask = problems[0]
        others = "; ".join(d for d, _ in problems[1:])
        return failed(name, detail + (f" (also: {others})" if others else ""), mask)
    return passed(name)


def check_no_writes_outside_batch(subject: Subject) -> CheckResult:
    """Rows past the live batch of every output buffer belong to other graph buckets:
    ``out[bs*gamma:]``, ``corrected_out[bs*gamma:]`` (sglang 0.5.23: ``step_logits[bs:]``),
    ``confidence_out[bs:]`` and ``verify_ids[bs:]``; their sentinels must survive the call."""
    run, result = subject.run, subject.result
    name = "no_writes_outside_batch"
    if result.tokens is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    if run.case.max_bs == run.case.bs:
        return skipped(name, "max_bs == bs: no rows past the live batch", code=Skip.NOT_APPLICABLE)
    if result.outside_writes:
        listed = ", ".join(f"{n}: {count} entries" for n, count in result.outside_writes.items())
        return failed(name, f"wrote past the live batch (bs={run.case.bs}): {listed}")
    return passed(name)


def check_inputs_unchanged(subject: Subject) -> CheckResult:
    """The shared inputs (hidden states, ids, model, sampling parameters) are as given."""
    result = subject.result
    name = "inputs_unchanged"
    if result.mutated_inputs:
        return failed(name, "mutated its inputs: " + ", ".join(result.mutated_inputs))
    return passed(name)


def check_state_restored(subject: Subject) -> CheckResult:
    """Global state (default dtype and device, environment, threads, flags) is as found."""
    result = subject.result
    name = "state_restored"
    if result.leaked_state:
        return failed(name, "changed global state: " + "; ".join(result.leaked_state))
    return passed(name)
