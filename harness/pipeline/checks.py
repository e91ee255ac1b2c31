"""Checks: pure functions of a case run that say whether a result is right.

Self-consistency (needs no second implementation), lossless tier: the call ran,
its outputs are written and valid, nothing past the live batch was written, its
inputs are unchanged, teacher forcing, the recorded draws explain the tokens
wherever they are replayable, greedy rows are the argmax, support, fresh noise on
every call. Drop-in tier: the reference's noise budget, one walk, and (the
differential check) equality with the single-pass reference. Every failing check
names the rows, steps and values that show it.

Each check is declared once, in ``CHECKS`` at the end: its function, its tier, what
it needs before it judges, its code in the checks table and the planted defect that
makes exactly it fail. The order of ``CHECKS`` is the order checks run and are
listed in; ``CHECK_TIERS`` and ``judge`` are built from it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

import torch

from harness.case import case_block
from harness.defaults import REFERENCE
from harness.pipeline.check_result import CheckResult, Skip, Status, Tier, failed, passed, skipped
from harness.pipeline.diffs import max_abs_diff_text
from harness.pipeline.life import LifeReplay, replay_inputs
from harness.pipeline.observe import NOISE_OP, RandomDraw
from harness.pipeline.runner import CaseRun, ImplResult
from harness.plugins.conventions import TOKEN_SENTINEL, NoiseCounter
from reference import exponential_race_torch, teacher_forced_logits
from reference.sampling_params import stage_sampling_params
from reference.verifier import draft_distribution

__all__ = [
    "CHECKS",
    "CHECK_CODES",
    "CHECK_TIERS",
    "Check",
    "CheckResult",
    "Needs",
    "PlantedDefect",
    "Status",
    "Subject",
    "Tier",
    "judge",
    "tier_of",
]


@dataclass(frozen=True)
class Subject:
    """What a check judges: one implementation's result on a case run (the run holds
    the other implementations' results, the reference's among them)."""

    run: CaseRun
    result: ImplResult

    @cached_property
    def replay_failures(self) -> dict[Tier, list[str]]:
        """Per tier, the first failing per-call check of each replay of the life that has
        one, named: judged once for both life verdicts, each replay being a full run."""
        return replay_failures(self.run, self.result)


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


def contract_logits(result: ImplResult, logits: torch.Tensor) -> torch.Tensor:
    """The reference's step logits as the implementation's contract defines its draft
    law: ``-inf`` off the convention's candidates (vLLM's top-K variant), else as is."""
    if result.candidates is None:
        return logits
    return logits.masked_fill(~result.candidates.to(logits.device), -math.inf)


def exact_comparison(run: CaseRun) -> bool:
    """Bit-exact where the math is exact: float32 on the case's one device."""
    return run.case.dtype == "float32"


# -- self-consistency ----------------------------------------------------------------------
def check_ran(subject: Subject) -> CheckResult:
    result = subject.result
    if result.error is not None:
        return CheckResult("ran", "fail", f"raised {result.error.summary()}")
    return passed("ran")


def _token_ids_valid(run: CaseRun, tokens: torch.Tensor) -> bool:
    return bool(((tokens >= 0) & (tokens < run.case.vocab_size)).all())


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
    if not _token_ids_valid(run, result.tokens):
        bad_tokens = (result.tokens < 0) | (result.tokens >= run.case.vocab_size)
        problems.append((f"token ids outside [0, {run.case.vocab_size}) or unwritten", bad_tokens))
    if result.corrected is not None:
        not_finite = ~torch.isfinite(result.corrected)
        device = result.corrected.device
        off_law = run.block.base_logits.to(device) == -math.inf  # outside the support
        if result.candidates is not None:  # the contract's candidates (vLLM's top-K)
            off_law |= ~result.candidates.to(device)
        not_finite &= ~off_law | (result.corrected != -math.inf)  # -inf there is written
        not_finite = not_finite.any(dim=-1)
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


def check_teacher_forcing(subject: Subject) -> CheckResult:
    """The kept step logits (``corrected_out``; sglang 0.5.23's ``step_logits``) must equal
    the logits rebuilt from the emitted tokens, rounded to the sampler's own step dtype."""
    run, result = subject.run, subject.result
    name = "teacher_forcing"
    if not run.case.folded_sampling:
        return skipped(
            name, "no corrected logits without folded sampling", code=Skip.NOT_APPLICABLE
        )
    if result.tokens is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    if result.corrected is None:
        return failed(name, "folded sampling but corrected_out was not written")
    with torch.inference_mode():
        rebuilt = contract_logits(
            result,
            teacher_forced_logits(model=run.inputs.model, block=run.block, tokens=result.tokens),
        ).to(result.corrected.dtype)  # [bs, gamma, V] in the step dtype
    differ = positions_differ(result.corrected, rebuilt, exact=exact_comparison(run))
    if differ.any():
        return failed(
            name,
            f"corrected_out differs from the logits rebuilt from the emitted tokens "
            f"({max_abs_diff_text(result.corrected, rebuilt)})",
            differ,
        )
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


NOT_VISIBLE = "the statistical oracle carries the lossless verdict"


def not_visible(name: str, described: str) -> CheckResult:
    """How a check that needs visible draws skips when it cannot see them."""
    why = f"draws not visible / not replayable ({described}): {NOT_VISIBLE}"
    return skipped(name, why, code=Skip.NOT_VISIBLE)


@dataclass(frozen=True)
class Unreplayable:
    """Why recorded draws cannot be replayed."""

    code: Skip  # NOT_VISIBLE, or NOT_RECORDED: the draws were seen, their values not kept
    draws: str  # the draws, described


def replay_noise(run: CaseRun, draws: list[RandomDraw]) -> list[torch.Tensor] | Unreplayable:
    """Per-step noise ``[bs, V]`` the draws would race with, or why they cannot:
    replayable are ``gamma`` ``exponential_`` draws of ``[bs or max_bs, V]`` (draw ``k``
    races step ``k``), or ONE ``exponential_`` draw of ``[bs or max_bs, gamma, V]``
    (slice ``k`` races step ``k``), in whichever phase they were drawn."""
    case = run.case
    vocab = run.block.base_logits.shape[-1]
    rows = (case.bs, case.max_bs)
    if any(d.op != NOISE_OP for d in draws) or not draws:
        return Unreplayable(Skip.NOT_VISIBLE, describe_draws(draws))
    if any(d.values is None for d in draws):
        return Unreplayable(Skip.NOT_RECORDED, describe_draws(draws))
    values = [d.values for d in draws if d.values is not None]
    if len(draws) == case.gamma and all(d.shape in {(r, vocab) for r in rows} for d in draws):
        return [v[: case.bs] for v in values]
    if len(draws) == 1 and draws[0].shape in {(r, case.gamma, vocab) for r in rows}:
        return [values[0][: case.bs, k] for k in range(case.gamma)]
    return Unreplayable(Skip.NOT_VISIBLE, describe_draws(draws))


def race_tokens(run: CaseRun, result: ImplResult, noise: list[torch.Tensor]) -> torch.Tensor:
    """``[bs, gamma]``: the tokens the race gives on ``noise`` with the staged parameters."""
    assert result.corrected is not None
    temperatures, greedy_mask = staged_parameters(run, result)
    return torch.stack(
        [
            exponential_race_torch(
                result.corrected[:, k],
                temperatures=temperatures,
                greedy_mask=greedy_mask,
                noise=noise[k],
            )
            for k in range(run.case.gamma)
        ],
        dim=1,
    )


@dataclass(frozen=True)
class Replay:
    """What the recorded draws say about one call's tokens."""

    noise: list[torch.Tensor] | None  # the per-step noise that explains the tokens
    contradicted: torch.Tensor | None  # [bs, gamma]: observed draws that do not explain them
    carried: bool  # explained by draws made before the call (double-buffered noise)
    why_not: Unreplayable | None  # why no draws could be replayed


def replay(run: CaseRun, result: ImplResult) -> Replay:
    """Replay the call's own draws; failing that, the draws carried into it (drawn at
    construction or at the end of the previous call)."""
    own = call_draws(result)
    candidates = [(own, False), (result.carried_draws, True)]
    contradicted: torch.Tensor | None = None
    why_not: Unreplayable | None = None
    for draws, carried in candidates:
        if carried and not draws:
            continue
        noise = replay_noise(run, draws)
        if isinstance(noise, Unreplayable):
            why_not = why_not or noise
            continue
        assert result.tokens is not None
        differ = torch.ne(race_tokens(run, result, noise), result.tokens)
        if not differ.any():
            return Replay(noise, None, carried, None)
        contradicted = differ if contradicted is None else contradicted
    return Replay(None, contradicted, False, why_not)


def check_noise_replay(subject: Subject) -> CheckResult:
    """Where the draws are replayable, draw ``k`` with ``corrected_out[:, k]`` and the row
    temperature reproduces ``out[:, k]`` (greedy rows: the argmax); draws made before the
    call (double-buffered noise) may explain it too; a convention's declared noise
    counter is replayed from its stream. Draws that cannot be replayed are a skip: the
    statistical oracle carries the lossless verdict."""
    run, result = subject.run, subject.result
    name = "noise_replay"
    case = run.case
    if not case.folded_sampling:
        return skipped(name, "greedy fold: no noise to replay", code=Skip.NOT_APPLICABLE)
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    if result.counter_replay is not None and counter_noise(result) is not None:
        return counter_stream_replay(result)  # declared counter noise: no torch draw to replay
    replayed = replay(run, result)
    if replayed.contradicted is not None:
        return failed(
            name,
            "noise draw k with corrected_out[:, k] does not give out[:, k]",
            replayed.contradicted,
        )
    if replayed.noise is None:
        assert replayed.why_not is not None  # nothing replayed and nothing contradicted
        if replayed.why_not.code is Skip.NOT_RECORDED:
            return skipped(name, "draws were not recorded", code=Skip.NOT_RECORDED)
        return not_visible(name, replayed.why_not.draws)
    return passed(name, "noise drawn before the call (double-buffered)" if replayed.carried else "")


def same_noise(first: list[torch.Tensor], second: list[torch.Tensor]) -> bool:
    """Whether two calls' noise is the same, step by step, on the rows both drew."""
    if len(first) != len(second):
        return False
    for a, b in zip(first, second, strict=True):
        rows = min(a.shape[0], b.shape[0])
        if a.shape[1:] != b.shape[1:] or not torch.equal(a[:rows], b[:rows]):
            return False
    return True


def used_noise(run: CaseRun, result: ImplResult) -> list[torch.Tensor] | None:
    """The noise a call used, as far as it is visible: the draws that explain its tokens,
    else every value it drew; ``None`` when nothing is visible."""
    if result.tokens is not None and result.corrected is not None:
        explained = replay(run, result).noise
        if explained is not None:
            return explained
    values = [d.values for d in call_draws(result) if d.values is not None]
    return values if values and len(values) == len(call_draws(result)) else None


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


def check_fresh_noise(subject: Subject) -> CheckResult:
    """A second staged call on the same inputs draws different noise (torch draws that
    differ, or a noise counter the first call advanced), and its outputs are
    self-consistent too (teacher forcing, and replay where replayable)."""
    run, result = subject.run, subject.result
    name = "fresh_noise"
    if not run.case.has_sampled_rows:
        return skipped(name, "no sampled rows", code=Skip.NOT_APPLICABLE)
    second = result.second_call
    if second is None:
        return skipped(name, "no second call was made", code=Skip.NOT_RUN)
    if second.error is not None:
        return failed(name, f"the second call raised {second.error.summary()}")
    stale_counter = _fresh_counter(result, second)
    if stale_counter is not None:
        return failed(name, stale_counter)
    if counter_noise(second) is None:  # torch's RNG (a counter's freshness is said above)
        first_noise, second_noise = used_noise(run, result), used_noise(run, second)
        if first_noise is not None and second_noise is not None:
            if same_noise(first_noise, second_noise):
                return failed(
                    name,
                    "the second call drew the same noise as the first "
                    f"({describe_draws(call_draws(second) or second.carried_draws)})",
                )
        elif first_noise is not None and not call_draws(second):
            return failed(name, "the second call drew no noise in staging or the call")
        else:
            return not_visible(name, describe_draws(call_draws(second)))
    if result.mutated_inputs:  # the second call ran on changed inputs: inputs_unchanged says so
        return passed(name, "noise differs; outputs not judged (the first call changed the inputs)")
    for check in (check_teacher_forcing, check_noise_replay):
        outcome = check(Subject(run, second))
        if outcome.failed and not check(subject).failed:  # else the first call's check says it
            return failed(name, f"second call: {outcome.name}: {outcome.detail}")
    return passed(name)


def check_noise_budget(subject: Subject) -> CheckResult:
    """Drop-in: exactly ``gamma`` ``exponential_`` draws of ``[bs, V]`` per folded call
    and nothing else (a greedy fold draws nothing), as the reference does."""
    run, result = subject.run, subject.result
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
            f"noise source differs: counter-based noise (key, counter advanced "
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
    _, greedy_mask = staged_parameters(run, result)
    top = result.corrected.amax(dim=-1)  # [bs, gamma]
    picked = result.corrected.gather(-1, result.tokens.unsqueeze(-1)).squeeze(-1)
    bad = (picked != top) & greedy_mask.unsqueeze(1)
    if bad.any():
        return failed(name, "greedy row's token is not the argmax of its corrected logits", bad)
    return passed(name)


def check_support(subject: Subject) -> CheckResult:
    """Every token of a sampled row has non-zero probability under its own ``q``."""
    run, result = subject.run, subject.result
    name = "support"
    if not run.case.folded_sampling:
        return skipped(name, "no q without folded sampling", code=Skip.NOT_APPLICABLE)
    if result.tokens is None or result.corrected is None:
        return skipped(name, "no output", code=Skip.NO_OUTPUT)
    temperatures, greedy_mask = staged_parameters(run, result)
    q = draft_distribution(
        result.corrected, temperatures=temperatures, greedy_mask=greedy_mask
    )  # [bs, gamma, V], the verifier's q
    q_token = q.gather(-1, result.tokens.unsqueeze(-1)).squeeze(-1)  # [bs, gamma]
    outside = ~(q_token > 0) & ~greedy_mask.unsqueeze(1)
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


# -- a server's life -----------------------------------------------------------------------
def replay_run(run: CaseRun, replay: LifeReplay) -> CaseRun:
    """One replay of the life as a run of its own: its case, inputs and result."""
    case = replay.step.case_of(run.case)
    inputs = replay_inputs(run.case, replay.step, run.inputs)  # pristine, from the seed
    return CaseRun(
        case=case,
        inputs=inputs,
        block=case_block(case, inputs),
        results={replay.result.name: replay.result},
    )


def _without_life(name: str, result: ImplResult) -> CheckResult | None:
    """A life check's outcome when there is no life to judge: a skip when none was run
    (a result replayed from a CUDA graph), a failure when its construction raised."""
    life = result.life
    if life is None:
        return skipped(name, "no life was run for this result", code=Skip.NOT_RUN)
    if life.error is not None:
        return failed(name, f"construction for the life raised {life.error.summary()}")
    return None


def replay_failures(run: CaseRun, result: ImplResult) -> dict[Tier, list[str]]:
    """Per tier, the first failing per-call check of each replay that has one, named."""
    assert result.life is not None
    failures: dict[Tier, list[str]] = {tier: [] for tier in Tier}
    for replay in result.life.replays:
        first: dict[Tier, str] = {}
        for check in judge(Subject(replay_run(run, replay), replay.result)):
            tier = tier_of(check.name)
            if check.failed and tier not in first:
                first[tier] = f"{replay.step.describe()}: {check.name}: {check.detail}"
        for tier, failure in first.items():
            failures[tier].append(failure)
    return failures


def _replay_verdict(name: str, result: ImplResult, failures: list[str]) -> CheckResult:
    """Every replay held to every per-call check of a tier for its own inputs and
    restaged parameters, its outputs read from the buffers the server reads."""
    assert result.life is not None
    ran = f"{len(result.life.replays)} of {result.life.planned} replays"
    if failures:
        more = f" (and {len(failures) - 1} more replays)" if len(failures) > 1 else ""
        return failed(name, f"{failures[0]}{more}; {ran}")
    return passed(name, ran)


def check_life_replays(subject: Subject) -> CheckResult:
    """Every replay passes every lossless per-call check (or says why there is no life)."""
    name = "life_replays"
    without = _without_life(name, subject.result)
    if without is not None:
        return without
    return _replay_verdict(name, subject.result, subject.replay_failures[Tier.LOSSLESS])


def check_life_drop_in(subject: Subject) -> CheckResult:
    """Every replay keeps the noise budget and the single walk."""
    return _replay_verdict("life_drop_in", subject.result, subject.replay_failures[Tier.DROP_IN])


def check_life_fresh_noise(subject: Subject) -> CheckResult:
    """No replay with sampled rows uses the noise of any earlier one of the instance (on
    the rows both drew), wherever the noise is visible; with a declared noise counter
    (sglang 0.5.23), each replay advances it and draws at counters no earlier one used."""
    run, result = subject.run, subject.result
    name = "life_fresh_noise"
    assert result.life is not None  # Needs.A_LIVED_LIFE
    if not run.case.folded_sampling:
        return skipped(name, "greedy fold: no noise", code=Skip.NOT_APPLICABLE)
    seen: list[tuple[str, list[torch.Tensor]]] = []
    counters: list[tuple[str, NoiseCounter]] = []
    hidden = 0
    for replay in result.life.replays:
        if replay.result.error is not None:
            break
        step_run = replay_run(run, replay)
        if not step_run.case.has_sampled_rows:  # any noise explains greedy rows
            continue
        counter = counter_noise(replay.result)
        if counter is not None:
            stale = _stale_counter(replay.step.describe(), counter, counters)
            if stale is not None:
                return failed(name, stale)
            counters.append((replay.step.describe(), counter))
            continue
        noise = used_noise(step_run, replay.result)
        if noise is None:
            hidden += 1
            continue
        for earlier, earlier_noise in seen:
            if same_noise(earlier_noise, noise):
                return failed(name, f"{replay.step.describe()} used the same noise as {earlier}")
        seen.append((replay.step.describe(), noise))
    visible = len(seen) + len(counters)
    if visible < 2:
        return not_visible(name, f"visible on {visible} replay(s)")
    compared = f"{len(seen)} replays compared" if seen else ""
    by_counter = f"{len(counters)} replays on fresh noise counters" if counters else ""
    parts = [part for part in (compared, by_counter) if part]
    return passed(name, ", ".join(parts) + (f", {hidden} not visible" if hidden else ""))


def _stale_counter(
    label: str, counter: NoiseCounter, earlier: list[tuple[str, NoiseCounter]]
) -> str | None:
    """Why a replay's counter-based noise is not fresh, or ``None``."""
    if counter.advances < 1:
        return f"{label} did not advance the noise counter (it stayed at {counter.end})"
    for other, before in earlier:
        if counter.start < before.end and before.start < counter.end:
            return (
                f"{label} drew at noise counters [{counter.start}, {counter.end}) that {other} "
                f"used ([{before.start}, {before.end})): the same noise"
            )
    return None


def check_life_server_buffer(subject: Subject) -> CheckResult:
    """The token buffer the server passed at construction (``out=``) holds every replay's
    tokens: that is the buffer the verifier reads."""
    result = subject.result
    name = "life_server_buffer"
    assert result.life is not None  # Needs.A_LIVED_LIFE
    if not result.life.out_passed:
        return skipped(name, "the constructor takes no out= buffer", code=Skip.NOT_APPLICABLE)
    for replay in result.life.replays:
        tokens = replay.result.tokens
        if tokens is not None and bool((tokens == TOKEN_SENTINEL).any()):
            return failed(
                name,
                f"{replay.step.describe()}: the out= buffer passed at construction was not "
                "written; the tokens went elsewhere",
                tokens == TOKEN_SENTINEL,
            )
    return passed(name)


# -- the registry ---------------------------------------------------------------------------
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
        if result.tokens is not None and not _token_ids_valid(run, result.tokens):
            return False  # what follows indexes by token id
        if self is Needs.TOKEN_IDS:
            return True
        life = result.life
        lived = life is not None and life.error is None
        return bool(run.case.replays) and (self is Needs.A_LIFE or lived)


@dataclass(frozen=True, kw_only=True)
class PlantedDefect:
    """The sampler of ``tests/plugins`` (``module:Class``) that makes a check fail, the
    defect table's case that exposes it, the checks it fails with (in the same run), and
    whether it runs beside the reference (a defect that changes the outputs also differs
    from the reference, so it runs alone unless the table says so)."""

    sampler: str
    case: str
    also_fails: tuple[str, ...] = ()
    against_reference: bool = False


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check, declared once."""

    name: str
    function: Callable[[Subject], CheckResult]
    tier: Tier
    needs: Needs
    defect: PlantedDefect
    code: str | None = None  # its code in the checks table; None: its name


CHECKS: tuple[Check, ...] = (  # the order checks run in, and are listed in
    Check(
        name="ran",
        function=check_ran,
        tier=Tier.LOSSLESS,
        needs=Needs.NOTHING,
        defect=PlantedDefect(
            sampler="broken_samplers:RaisingSampler", case="folded", against_reference=True
        ),
        code="RAN",
    ),
    Check(
        name="outputs_written",
        function=check_outputs_written,
        tier=Tier.LOSSLESS,
        needs=Needs.A_RETURN,
        defect=PlantedDefect(
            sampler="planted_defects:ConfidenceLogitSampler", case="folded, confidence"
        ),
        code="OUT",
    ),
    Check(
        name="no_writes_outside_batch",
        function=check_no_writes_outside_batch,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(
            sampler="planted_defects_verdicts:OutPastBatchSampler",
            case="bucketed",
            against_reference=True,
        ),
        code="OOB",
    ),
    Check(
        name="teacher_forcing",
        function=check_teacher_forcing,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(sampler="planted_defects:LogSoftmaxCorrectedSampler", case="folded"),
        code="TF",
    ),
    Check(
        name="noise_replay",
        function=check_noise_replay,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(
            sampler="planted_defects_verdicts:WrongTemperatureSampler", case="folded"
        ),
        code="NR",
    ),
    Check(
        name="greedy_consistency",
        function=check_greedy_consistency,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(sampler="planted_defects:NegatedGreedySampler", case="greedy fold"),
        code="GC",
    ),
    Check(
        name="greedy_rows_argmax",
        function=check_greedy_rows_argmax,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(
            sampler="planted_defects:GreedyRowsRacedSampler",
            case="folded",
            also_fails=("noise_replay",),
        ),
        code="GA",
    ),
    Check(
        name="support",
        function=check_support,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        # no token wins the race at zero probability: noise replay fails with it
        defect=PlantedDefect(
            sampler="planted_defects:UntemperedSampler", case="cold", also_fails=("noise_replay",)
        ),
        code="SUP",
    ),
    Check(
        name="fresh_noise",
        function=check_fresh_noise,
        tier=Tier.LOSSLESS,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(sampler="planted_defects_verdicts:FrozenNoiseSampler", case="folded"),
        code="FN",
    ),
    Check(
        name="noise_budget",
        function=check_noise_budget,
        tier=Tier.DROP_IN,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(
            sampler="planted_defects:NoiseRefreshSampler", case="folded", against_reference=True
        ),
        code="NB",
    ),
    Check(
        name="single_walk",
        function=check_single_walk,
        tier=Tier.DROP_IN,
        needs=Needs.TOKEN_IDS,
        defect=PlantedDefect(
            sampler="planted_defects:WarmupWalkSampler", case="folded", against_reference=True
        ),
        code="SW",
    ),
    Check(
        name="inputs_unchanged",
        function=check_inputs_unchanged,
        tier=Tier.LOSSLESS,
        needs=Needs.NOTHING,
        defect=PlantedDefect(
            sampler="planted_defects_verdicts:InputMutatingSampler",
            case="folded",
            against_reference=True,
        ),
        code="IN",
    ),
    Check(
        name="state_restored",
        function=check_state_restored,
        tier=Tier.LOSSLESS,
        needs=Needs.NOTHING,
        defect=PlantedDefect(sampler="untrusted_samplers:DtypeLeakingSampler", case="folded"),
    ),
    Check(
        name="life_replays",
        function=check_life_replays,
        tier=Tier.LOSSLESS,
        needs=Needs.A_LIFE,
        defect=PlantedDefect(sampler="life_defects:WrongFromThirdCallSampler", case="life"),
    ),
    Check(
        name="life_server_buffer",
        function=check_life_server_buffer,
        tier=Tier.LOSSLESS,
        needs=Needs.A_LIVED_LIFE,
        # the replays read that buffer
        defect=PlantedDefect(
            sampler="life_defects:OwnOutBufferSampler", case="life", also_fails=("life_replays",)
        ),
    ),
    Check(
        name="life_fresh_noise",
        function=check_life_fresh_noise,
        tier=Tier.LOSSLESS,
        needs=Needs.A_LIVED_LIFE,
        defect=PlantedDefect(sampler="life_defects:AlternatingNoiseSampler", case="life"),
    ),
    Check(
        name="life_drop_in",
        function=check_life_drop_in,
        tier=Tier.DROP_IN,
        needs=Needs.A_LIVED_LIFE,
        defect=PlantedDefect(sampler="life_defects:ExtraWalkFromThirdCallSampler", case="life"),
    ),
    Check(
        name="matches_reference",
        function=check_matches_reference,
        tier=Tier.DROP_IN,
        needs=Needs.THE_REFERENCE,
        defect=PlantedDefect(
            sampler="planted_defects:PrivateGeneratorSampler", case="life", against_reference=True
        ),
        code="REF",
    ),
)
CHECK_TIERS: dict[str, Tier] = {check.name: check.tier for check in CHECKS}
CHECK_CODES: dict[str, str] = {check.name: check.code for check in CHECKS if check.code}


def tier_of(check_name: str) -> Tier:
    """The tier of a registered check (``KeyError`` for a name ``CHECKS`` does not know)."""
    return CHECK_TIERS[check_name]


def judge(subject: Subject) -> list[CheckResult]:
    """Every check whose needs the subject meets, in the order of ``CHECKS``; one skip,
    ``ran``, when the case is outside the implementation's calling convention (nothing
    ran)."""
    outside = subject.result.outside_contract
    if outside is not None:
        return [skipped("ran", f"outside this contract: {outside}", code=Skip.OUTSIDE_CONTRACT)]
    return [check.function(subject) for check in CHECKS if check.needs.met_by(subject)]
