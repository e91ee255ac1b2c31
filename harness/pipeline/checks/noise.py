"""What the recorded draws say (lossless tier, but the budget): the draws replay the
tokens with the kept step logits wherever they are replayable, a second call draws
fresh noise, a declared noise counter's stream replays its tokens at the call's fresh
counters; drop-in: the reference's noise budget. Draws the harness cannot see are a
skip that leaves the verdict to the statistical oracle."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from harness.pipeline.check_result import CheckResult, Skip, failed, passed, skipped
from harness.pipeline.checks.subject import (
    Subject,
    call_draws,
    counter_noise,
    requested_parameters,
    staging_disagrees,
)
from harness.pipeline.checks.walk import check_teacher_forcing
from harness.pipeline.observe import NOISE_OP, RandomDraw
from harness.pipeline.runner import CaseRun, ImplResult
from reference import exponential_race_torch


def describe_draws(draws: list[RandomDraw]) -> str:
    """``"5 x exponential_ [4, 257] (call)"``, grouped in order of first appearance."""
    if not draws:
        return "no random draws"
    groups = Counter(d.describe() for d in draws)
    return ", ".join(f"{count} x {what}" for what, count in groups.items())


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
    temperatures, greedy_mask = requested_parameters(run, result)
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
        return counter_stream_replay(subject)  # declared counter noise: no torch draw
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


@dataclass(frozen=True)
class CounterReplay:
    """What the declared counter stream says about one call's tokens."""

    explained: torch.Tensor  # [bs, gamma] bool: given by the stream's own race at a fresh counter
    counters: tuple[int, ...]  # the fresh counters those positions were drawn at, in order
    outside: tuple[int, ...]  # counters the call was seen to read outside its fresh range
    other: tuple[int, ...]  # fresh counters read through another transform of the words


def proven_fresh(subject: Subject) -> frozenset[int]:
    """The counters past the call's fresh range that it was seen to read and that the key
    check proves fresh: read by none of the instance's other observed draft calls (each
    call's reads observed) and by no verifier draw of the decode (docs/upstream.md,
    "Fresh counters"). Empty where anything needed is not observed."""
    result = subject.result
    counter, reads = result.noise_counter, result.counter_reads
    others = subject.draft_calls_beside()
    if counter is None or reads is None or not others:
        return frozenset()
    read_elsewhere: set[int] = set()
    for other in others:
        if other.counter_reads is None or other.noise_counter is None:
            return frozenset()  # a call whose reads were not seen proves nothing
        if other.noise_counter.key == counter.key:
            read_elsewhere |= set(other.counter_reads.counters)
    verifier = result.verifier_counter
    if verifier is not None and verifier.key == counter.key:
        read_elsewhere |= set(range(verifier.start, verifier.end))
    past = {c for c in reads.counters if c >= counter.fresh.stop}
    return frozenset(past - read_elsewhere)


def replay_counters(result: ImplResult, proven: frozenset[int] = frozenset()) -> CounterReplay:
    """Search, for each position, the call's fresh counters (those the stream had not
    handed out before it, up to where it left the counter, and those ``proven`` fresh
    past it) for one whose replay with the kept step logits gives its token; and say
    which counters the call was seen to read."""
    counter, tokens = result.noise_counter, result.tokens
    assert counter is not None and tokens is not None and result.counter_replay is not None
    replays = result.stream_replays or {counter.start: result.counter_replay}
    explained = torch.zeros_like(tokens, dtype=torch.bool)
    counters = []
    for at in sorted(replays):
        if at not in counter.fresh and at not in proven:
            continue
        hit = torch.eq(replays[at].to(tokens.device), tokens) & ~explained
        if hit.any():
            counters.append(at)
            explained |= hit
    reads = result.counter_reads
    fresh = set(counter.fresh) | proven
    outside = () if reads is None else tuple(c for c in reads.counters if c not in fresh)
    other = () if reads is None else tuple(c for c in reads.other if c in fresh)
    return CounterReplay(explained, tuple(counters), outside, other)


def counter_layout(
    result: ImplResult, replayed: CounterReplay, proven: frozenset[int] = frozenset()
) -> str:
    """How the call's draws differ from the package's layout (every step at the block's
    counter, through its race), named; ``""`` where they do not."""
    assert result.noise_counter is not None
    start = result.noise_counter.start
    notes = []
    if replayed.counters and replayed.counters != (start,):
        at = ", ".join(str(c) for c in replayed.counters)
        notes.append(
            f"draws at counters {at}: not the package's layout (every step at the block's "
            f"counter {start})"
        )
    past = sorted(c for c in replayed.counters if c in proven)
    if past:
        notes.append(
            f"counter(s) {', '.join(map(str, past))} past where the call left the counter, "
            "proven fresh: read by no other draft call and no verifier draw"
        )
    if replayed.other:
        at = ", ".join(str(c) for c in replayed.other)
        notes.append(f"another transform of the stream's words at fresh counter(s) {at}")
    return "; ".join(notes)


def _outside_fresh(result: ImplResult, outside: tuple[int, ...]) -> str:
    assert result.noise_counter is not None
    fresh = result.noise_counter.fresh
    before = [c for c in outside if c < fresh.start]
    after = [c for c in outside if c >= fresh.stop]
    said = []
    if before:
        said.append(f"{before} handed out before this call (reused noise)")
    if after:
        said.append(f"{after} past where the call left the counter (the next call's)")
    return (
        f"draws at counter(s) {' and '.join(said)}; the call's fresh counters are "
        f"{fresh.start}..{fresh.stop - 1}"
    )


def counter_stream_replay(subject: Subject) -> CheckResult:
    """Counter-based noise declared by the convention (sglang 0.5.23's ``DraftNoise``):
    every draw at a fresh counter of the stream, and the tokens what the stream's race
    gives there for the kept step logits at the server's step temperatures; draws at
    other fresh counters (past the call's range too, where the key check proves them
    fresh: ``proven_fresh``), or through another transform of fresh counters' words, are
    a drop-in difference, named; a read of reused counters fails where a row is sampled
    (docs/upstream.md, "Replaying counter-based noise", "Fresh counters")."""
    run, result = subject.run, subject.result
    name = "noise_replay"
    proven = proven_fresh(subject)
    replayed = replay_counters(result, proven)
    unexplained = ~replayed.explained
    layout = counter_layout(result, replayed, proven)
    if replayed.outside and run.case.has_sampled_rows:
        mask = unexplained if unexplained.any() else None
        return failed(name, _outside_fresh(result, replayed.outside), mask)
    if not unexplained.any():
        return passed(
            name,
            f"replayed from the declared counter stream: {layout}"
            if layout
            else (f"replayed from the declared counter stream ({replayed.counters[0]})"),
        )
    if replayed.other:  # seen reading fresh words through a transform the harness lacks
        return skipped(
            name,
            f"tokens drawn by {layout}, not the package's race: {NOT_VISIBLE}",
            code=Skip.NOT_VISIBLE,
        )
    assert result.noise_counter is not None
    fresh = result.noise_counter.fresh
    staging = staging_disagrees(run, result, unexplained.any(dim=1))
    return failed(
        name,
        f"no fresh counter of the declared noise stream ({fresh.start}..{fresh.stop - 1}) "
        f"with the kept step logits gives out{staging}",
        unexplained,
    )


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
        outcome = check(Subject(run, second, other_calls=(result,)))
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
        layout = ""
        if result.tokens is not None and result.counter_replay is not None:
            proven = proven_fresh(subject)
            layout = counter_layout(result, replay_counters(result, proven), proven)
        return failed(
            name,
            f"noise source differs: counter-based noise (key, counter advanced "
            f"{counter.advances} per call), no torch random draw"
            f"{f'; {layout}' if layout else ''}; the reference draws {expected}",
        )
    if not budget:
        return failed(name, f"drew {describe_draws(draws)}; the reference draws {expected}")
    return passed(name)
