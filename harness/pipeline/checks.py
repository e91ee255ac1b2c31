"""Checks: pure functions of a case run that say whether a result is right.

Self-consistency (needs no second implementation), lossless tier: the call ran,
its outputs are written and valid, nothing past the live batch was written, its
inputs are unchanged, teacher forcing, the recorded draws explain the tokens
wherever they are replayable, greedy rows are the argmax, support, fresh noise on
every call. Drop-in tier: the reference's noise budget, one walk, and (the
differential check) equality with the single-pass reference. Every failing check
names the rows, steps and values that show it.
"""

from __future__ import annotations

from collections import Counter

import torch

from harness.pipeline.check_result import (
    CHECK_TIERS,
    CheckResult,
    Status,
    Tier,
    failed,
    passed,
    skipped,
    tier_of,
)
from harness.pipeline.observe import NOISE_OP, RandomDraw
from harness.pipeline.runner import CaseRun, ImplResult
from harness.plugins.conventions import NoiseCounter
from reference import exponential_race_torch, teacher_forced_logits
from reference.sampling_params import stage_sampling_params
from reference.verifier import draft_distribution

__all__ = ["CHECK_TIERS", "CheckResult", "Status", "Tier", "tier_of"]


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


def staged_parameters(run: CaseRun, result: ImplResult) -> tuple[torch.Tensor, torch.Tensor]:
    """The temperatures and greedy mask the tokens were drawn under: the sampler's own
    staging where its convention exposes it (sglang 0.5.23's ``params``), else what a
    correct sampler stages for the case (the reference's rule)."""
    if result.staged is not None:
        return result.staged.temperatures, result.staged.greedy_mask
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
    return passed("ran")


def _token_ids_valid(run: CaseRun, tokens: torch.Tensor) -> bool:
    return bool(((tokens >= 0) & (tokens < run.case.vocab_size)).all())


def check_outputs_written(run: CaseRun, result: ImplResult) -> CheckResult:
    """Every output entry was written with a valid value: token ids in ``[0, V)``,
    finite corrected logits (the inputs are finite), confidence in ``[0, 1]``, and
    ``verify_ids`` (where the convention has it) the anchor followed by the drafts."""
    name = "outputs_written"
    if result.tokens is None:
        return skipped(name, "no output")
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


def check_teacher_forcing(run: CaseRun, result: ImplResult) -> CheckResult:
    """The kept step logits (``corrected_out``; sglang 0.5.23's ``step_logits``) must equal
    the logits rebuilt from the emitted tokens, rounded to the sampler's own step dtype."""
    name = "teacher_forcing"
    if not run.case.folded_sampling:
        return skipped(name, "no corrected logits without folded sampling")
    if result.tokens is None:
        return skipped(name, "no output")
    if result.corrected is None:
        return failed(name, "folded sampling but corrected_out was not written")
    with torch.inference_mode():
        rebuilt = teacher_forced_logits(
            model=run.inputs.model, block=run.block, tokens=result.tokens
        ).to(result.corrected.dtype)  # [bs, gamma, V] in the step dtype
    differ = positions_differ(result.corrected, rebuilt, exact=exact_comparison(run))
    if differ.any():
        max_diff = (result.corrected.double() - rebuilt.double()).abs().max().item()
        return failed(
            name,
            f"corrected_out differs from the logits rebuilt from the emitted tokens "
            f"(max |diff| {max_diff:.4g})",
            differ,
        )
    return passed(name)


def check_no_writes_outside_batch(run: CaseRun, result: ImplResult) -> CheckResult:
    """Rows past the live batch of every output buffer belong to other graph buckets:
    ``out[bs*gamma:]``, ``corrected_out[bs*gamma:]`` (sglang 0.5.23: ``step_logits[bs:]``),
    ``confidence_out[bs:]`` and ``verify_ids[bs:]``; their sentinels must survive the call."""
    name = "no_writes_outside_batch"
    if result.tokens is None:
        return skipped(name, "no output")
    if run.case.max_bs == run.case.bs:
        return skipped(name, "max_bs == bs: no rows past the live batch")
    if result.outside_writes:
        listed = ", ".join(f"{n}: {count} entries" for n, count in result.outside_writes.items())
        return failed(name, f"wrote past the live batch (bs={run.case.bs}): {listed}")
    return passed(name)


def check_inputs_unchanged(result: ImplResult) -> CheckResult:
    """The shared inputs (hidden states, ids, model, sampling parameters) are as given."""
    name = "inputs_unchanged"
    if result.mutated_inputs:
        return failed(name, "mutated its inputs: " + ", ".join(result.mutated_inputs))
    return passed(name)


def check_state_restored(result: ImplResult) -> CheckResult:
    """Global state (default dtype and device, environment, threads, flags) is as found."""
    name = "state_restored"
    if result.leaked_state:
        return failed(name, "changed global state: " + "; ".join(result.leaked_state))
    return passed(name)


# -- what the recorded draws say -------------------------------------------------------------
def describe_draws(draws: list[RandomDraw]) -> str:
    """``"5 x exponential_ [4, 257] (call)"``, grouped in order of first appearance."""
    if not draws:
        return "no random draws"
    groups = Counter(d.describe() for d in draws)
    return ", ".join(f"{count} x {what}" for what, count in groups.items())


def call_draws(result: ImplResult) -> list[RandomDraw]:
    """The draws of the proposal itself: its staging and its call (not construction)."""
    if result.random_draws:
        return [d for d in result.random_draws if d.phase != "construction"]
    # Results replayed from a CUDA graph carry only the call's exponential_ values.
    return [RandomDraw(NOISE_OP, "call", tuple(v.shape), v) for v in result.noise_draws]


def replay_noise(run: CaseRun, result: ImplResult) -> list[torch.Tensor] | str:
    """Per-step noise ``[bs, V]`` that explains the tokens, or why the draws cannot:
    replayable are ``gamma`` ``exponential_`` draws of ``[bs or max_bs, V]`` in the call,
    or ONE staged ``exponential_`` draw of ``[bs or max_bs, gamma, V]``."""
    case = run.case
    draws = call_draws(result)
    vocab = run.block.base_logits.shape[-1]
    rows = (case.bs, case.max_bs)
    described = describe_draws(draws)
    if any(d.op != NOISE_OP for d in draws) or not draws:
        return f"draws not replayable: {described}"
    staged = [d for d in draws if d.phase == "staging"]
    in_call = [d for d in draws if d.phase == "call"]
    if any(d.values is None for d in draws):
        return "draws were not recorded"
    if (
        not staged
        and len(in_call) == case.gamma
        and all(d.shape[0] in rows and d.shape[1:] == (vocab,) for d in in_call)
    ):
        return [d.values[: case.bs] for d in in_call if d.values is not None]
    if (
        not in_call
        and len(staged) == 1
        and staged[0].shape in {(r, case.gamma, vocab) for r in rows}
    ):
        values = staged[0].values
        assert values is not None
        return [values[: case.bs, k] for k in range(case.gamma)]
    return f"draws not replayable: {described}"


def check_noise_replay(run: CaseRun, result: ImplResult) -> CheckResult:
    """Where the draws are replayable, draw ``k`` with ``corrected_out[:, k]`` and the row
    temperature reproduces ``out[:, k]`` (greedy rows: the argmax). Otherwise a skip:
    the statistical oracle carries the lossless verdict."""
    name = "noise_replay"
    case = run.case
    if not case.folded_sampling:
        return skipped(name, "greedy fold: no noise to replay")
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output")
    noise = replay_noise(run, result)
    if isinstance(noise, str) and result.counter_replay is not None and counter_noise(result):
        return counter_stream_replay(result)
    if isinstance(noise, str):
        return skipped(name, f"{noise} — the statistical oracle carries the lossless verdict")
    temperatures, greedy_mask = staged_parameters(run, result)
    replayed = torch.stack(
        [
            exponential_race_torch(
                result.corrected[:, k],
                temperatures=temperatures,
                greedy_mask=greedy_mask,
                noise=noise[k],
            )
            for k in range(case.gamma)
        ],
        dim=1,
    )  # [bs, gamma]
    differ = replayed != result.tokens
    if differ.any():
        return failed(name, "noise draw k with corrected_out[:, k] does not give out[:, k]", differ)
    return passed(name)


def counter_noise(result: ImplResult) -> NoiseCounter | None:
    """The call's counter-based noise stream, when that is where its noise came from: the
    convention declares a counter (sglang 0.5.23's ``DraftNoise``) and the call drew
    nothing from torch's RNG."""
    return None if call_draws(result) else result.noise_counter


def counter_stream_replay(result: ImplResult) -> CheckResult:
    """Counter-based noise declared by the convention (sglang 0.5.23's ``DraftNoise``):
    the tokens must be what the declared stream gives for the kept step logits at the
    counter the call began with (docs/upstream.md, "Replaying counter-based noise")."""
    name = "noise_replay"
    assert result.counter_replay is not None and result.noise_counter is not None
    assert result.tokens is not None
    differ = result.counter_replay != result.tokens
    if differ.any():
        return failed(
            name,
            f"the declared noise stream (counter {result.noise_counter.start}) with the kept "
            "step logits does not give out",
            differ,
        )
    return passed(name, f"replayed from the declared counter stream ({result.noise_counter.start})")


def _fresh_counter(result: ImplResult, second: ImplResult) -> str | None:
    """Why counter-based noise was not fresh on the second call, or ``None``."""
    first_counter, second_counter = counter_noise(result), counter_noise(second)
    if first_counter is None or second_counter is None:
        return None
    if first_counter.advances < 1:
        return (
            f"the first call did not advance the noise counter (it stayed at {first_counter.end})"
        )
    if second_counter.start == first_counter.start:
        return (
            f"the second call drew at the same noise counter ({second_counter.start}) as the "
            "first: the same noise"
        )
    return None


def check_fresh_noise(run: CaseRun, result: ImplResult) -> CheckResult:
    """A second staged call on the same inputs draws different noise (torch draws that
    differ, or a noise counter the first call advanced), and its outputs are
    self-consistent too (teacher forcing, and replay where replayable)."""
    name = "fresh_noise"
    if not run.case.has_sampled_rows:
        return skipped(name, "no sampled rows")
    second = result.second_call
    if second is None:
        return skipped(name, "no second call was made")
    if second.error is not None:
        return failed(name, f"the second call raised {second.error.summary()}")
    stale_counter = _fresh_counter(result, second)
    if stale_counter is not None:
        return failed(name, stale_counter)
    first_draws, second_draws = call_draws(result), call_draws(second)
    if not second_draws and second.noise_counter is None:
        return failed(name, "the second call drew no noise in staging or the call")
    first_values = [d.values for d in first_draws if d.values is not None]
    second_values = [d.values for d in second_draws if d.values is not None]
    comparable = len(first_values) == len(first_draws) == len(second_draws) == len(second_values)
    from_torch = counter_noise(second) is None  # else the counter said it, above
    if from_torch and comparable and all(map(torch.equal, first_values, second_values)):
        return failed(
            name,
            f"the second call drew the same noise as the first ({describe_draws(second_draws)})",
        )
    if result.mutated_inputs:  # the second call ran on changed inputs: inputs_unchanged says so
        return passed(name, "noise differs; outputs not judged (the first call changed the inputs)")
    for check in (check_teacher_forcing, check_noise_replay):
        outcome = check(run, second)
        if outcome.failed and not check(run, result).failed:  # else the first call's check says it
            return failed(name, f"second call: {outcome.name}: {outcome.detail}")
    return passed(name)


def check_noise_budget(run: CaseRun, result: ImplResult) -> CheckResult:
    """Drop-in: exactly ``gamma`` ``exponential_`` draws of ``[bs, V]`` per folded call
    and nothing else (a greedy fold draws nothing), as the reference does."""
    name = "noise_budget"
    case = run.case
    draws = result.random_draws or call_draws(result)
    vocab = run.block.base_logits.shape[-1]
    if case.folded_sampling:
        expected = f"gamma={case.gamma} x exponential_ [{case.bs}, {vocab}] in the call"
        budget = len(draws) == case.gamma and all(
            d.op == NOISE_OP and d.phase == "call" and d.shape == (case.bs, vocab) for d in draws
        )
    else:
        expected, budget = "no random draws in a greedy fold", not draws
    counter = counter_noise(result)
    if counter is not None and case.folded_sampling:
        return failed(
            name,
            f"noise source differs: counter-based Philox noise (key, counter advanced "
            f"{counter.advances} per call), no torch random draw; the reference draws {expected}",
        )
    if not budget:
        return failed(name, f"drew {describe_draws(draws)}; the reference draws {expected}")
    return passed(name)


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
        return skipped(name, "folded sampling: covered by noise_replay")
    if result.tokens is None:
        return skipped(name, "no output")
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
        return failed(name, "emitted token is not the argmax of its step logits", bad)
    ties = int((differ & allowed).sum())
    return passed(name, f"{ties} near-tie(s) resolved differently" if ties else "")


def check_greedy_rows_argmax(run: CaseRun, result: ImplResult) -> CheckResult:
    """Folded sampling: a greedy row's token is a maximum of its own corrected logits."""
    name = "greedy_rows_argmax"
    case = run.case
    if not case.folded_sampling:
        return skipped(name, "greedy fold: covered by greedy_consistency")
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output")
    _, greedy_mask = staged_parameters(run, result)
    top = result.corrected.amax(dim=-1)  # [bs, gamma]
    picked = result.corrected.gather(-1, result.tokens.unsqueeze(-1)).squeeze(-1)
    bad = (picked != top) & greedy_mask.unsqueeze(1)
    if bad.any():
        return failed(name, "greedy row's token is not the argmax of its corrected logits", bad)
    return passed(name)


def check_support(run: CaseRun, result: ImplResult) -> CheckResult:
    """Every token of a sampled row has non-zero probability under its own ``q``."""
    name = "support"
    if not run.case.folded_sampling:
        return skipped(name, "no q without folded sampling")
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output")
    temperatures, greedy_mask = staged_parameters(run, result)
    q = draft_distribution(
        result.corrected, temperatures=temperatures, greedy_mask=greedy_mask
    )  # [bs, gamma, V], the verifier's q
    q_token = q.gather(-1, result.tokens.unsqueeze(-1)).squeeze(-1)  # [bs, gamma]
    outside = ~(q_token > 0) & ~greedy_mask.unsqueeze(1)
    if outside.any():
        return failed(name, "emitted token has zero probability under its q", outside)
    return passed(name)


def check_single_walk(run: CaseRun, result: ImplResult) -> CheckResult:
    """One proposal, one walk: at most one ``sample_block`` or fused call, and at most
    ``gamma`` Markov head steps (an implementation with its own loop counts by steps)."""
    name = "single_walk"
    work, gamma = result.work, run.case.gamma
    if work.walks + work.fused_calls > 1 or work.head_steps > gamma:
        return failed(
            name,
            f"{work.walks} walk(s), {work.fused_calls} fused call(s) and {work.head_steps} "
            f"head steps for one proposal of gamma={gamma}",
        )
    return passed(name)


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
        check_no_writes_outside_batch(run, result),
        check_teacher_forcing(run, result),
        check_noise_replay(run, result),
        check_greedy_consistency(run, result),
        check_greedy_rows_argmax(run, result),
        check_support(run, result),
        check_fresh_noise(run, result),
        check_noise_budget(run, result),
        check_single_walk(run, result),
        *guarded,
    ]


# -- differential --------------------------------------------------------------------------
def contract_differences(result: ImplResult, reference: ImplResult) -> list[str]:
    """The differences of contract a drop-in mismatch comes from, each named: the noise
    source, the step-dtype policy, and the rule for NaN (docs/numerics.md)."""
    differences = []
    if counter_noise(result) is not None and counter_noise(reference) is None:
        differences.append(
            "noise source: counter-based Philox noise (key, counter) where the reference "
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


def check_matches_reference(run: CaseRun, result: ImplResult, reference: ImplResult) -> CheckResult:
    """Same tokens, corrected logits and confidence as the single-pass reference."""
    name = "matches_reference"
    if reference.error is not None:
        return failed(name, f"the reference itself raised {reference.error.summary()}")
    if result.tokens is None or reference.tokens is None:
        return skipped(name, "no output")
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
