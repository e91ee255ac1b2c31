"""A server's life (docs/design.md, "A server's life"): every replay of the instance
held to the per-call checks for its own inputs (lossless and drop-in), its tokens in
the buffer the server passed, and fresh noise on every replay."""

from __future__ import annotations

import torch

from harness.case import case_block
from harness.pipeline.check_result import CheckResult, Skip, Tier, failed, passed, skipped
from harness.pipeline.checks.noise import not_visible, same_noise, used_noise
from harness.pipeline.checks.subject import Subject, counter_noise
from harness.pipeline.life import LifeReplay, replay_inputs
from harness.pipeline.runner import CaseRun, ImplResult
from harness.plugins.conventions import TOKEN_SENTINEL, NoiseCounter


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
    assert subject.replay_failures is not None  # run_checks judges the replays of a lived life
    return _replay_verdict(name, subject.result, subject.replay_failures[Tier.LOSSLESS])


def check_life_drop_in(subject: Subject) -> CheckResult:
    """Every replay keeps the noise budget and the single walk."""
    assert subject.replay_failures is not None  # Needs.A_LIVED_LIFE: run_checks judged them
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
