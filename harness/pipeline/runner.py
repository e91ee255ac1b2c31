"""Run implementations side by side on one case, from the same RNG state.

For each implementation the runner forks the device RNG and seeds it with the
case seed, builds a sampler over the case's shared inputs in its own calling
convention (``harness.plugins.conventions``), poisons its output buffers with
sentinels, stages the sampling parameters and runs one call — the
server's protocol: staging before every call — all under the observers, then
copies the live batch out and notes any write past it. Cases with sampled rows
get a second staged call on the same inputs (each call must draw fresh noise).
The caller's RNG state is restored afterwards. An implementation that raises
(``SystemExit`` and its own ``KeyboardInterrupt`` included) is a recorded result,
never a crash of the harness; the time limit covers construction, staging and the
calls. Around each implementation the guards of ``harness.pipeline.guard`` record
changed inputs and leaked global state, and the next implementation gets both
pristine.
"""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.pipeline.case import Case, CaseInputs, build_inputs, case_block
from harness.pipeline.guard import GlobalState, changed_inputs, input_digests
from harness.pipeline.interrupts import reraise_stop_request
from harness.pipeline.observe import (
    DispatchObserver,
    HeadCounts,
    RandomDraw,
    rng_consumption,
)
from harness.plugins.conventions import (
    BuiltSampler,
    CallOutputs,
    NoiseCounter,
    StagedParams,
    build_for_case,
)
from harness.plugins.implementations import Implementation
from reference import BlockInputs


@dataclass(frozen=True)
class RaisedError:
    """An exception an implementation raised: class, message and where."""

    type: str
    message: str
    where: str

    def summary(self) -> str:
        return f"{self.type}: {self.message}"


@dataclass
class WorkCounts:
    """Work of one call, counted exactly."""

    walks: int = 0
    fused_calls: int = 0  # fused greedy calls that produced tokens
    head_steps: int = 0
    sampler_calls: int = 0
    noise_calls: int = 0
    noise_elements: int = 0
    op_counts: dict[str, int] = field(default_factory=dict)
    rng: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # phase: op: [calls, n]

    @property
    def total_ops(self) -> int:
        return sum(self.op_counts.values())


@dataclass
class ImplResult:
    """What one implementation produced on one case."""

    name: str
    tokens: torch.Tensor | None = None  # [bs, gamma] int64
    corrected: torch.Tensor | None = None  # [bs, gamma, V] kept step logits, folded sampling only
    confidence: torch.Tensor | None = None  # [bs, gamma]
    staged: StagedParams | None = None  # the sampler's own staging, where it exposes it
    noise_counter: NoiseCounter | None = None  # counter-based noise the harness owns
    counter_replay: torch.Tensor | None = None  # [bs, gamma]: tokens of the declared stream
    verify_ids: torch.Tensor | None = None  # [bs, gamma + 1]: anchor then drafts
    error: RaisedError | None = None
    noise_draws: list[torch.Tensor] = field(default_factory=list)  # each [bs, V]
    walk_tokens: list[torch.Tensor] = field(default_factory=list)  # tokens of each walk
    work: WorkCounts = field(default_factory=WorkCounts)
    random_draws: list[RandomDraw] = field(default_factory=list)  # every phase, in order
    outside_writes: dict[str, int] = field(default_factory=dict)  # buffer: entries written
    mutated_inputs: list[str] = field(default_factory=list)  # shared inputs it changed
    leaked_state: list[str] = field(default_factory=list)  # global settings it changed
    second_call: ImplResult | None = None  # the next staged call on the same inputs

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class CaseRun:
    """All implementations' results on one case, plus the shared inputs as generated
    (pristine: rebuilt after any implementation that changed them)."""

    case: Case
    inputs: CaseInputs
    block: BlockInputs
    results: dict[str, ImplResult]


@contextmanager
def same_rng_start(device: torch.device, seed: int) -> Iterator[None]:
    """Seed the RNG of ``device`` (and the CPU) with ``seed``; restore both on exit."""
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices, device_type="cuda"):
        torch.manual_seed(seed)
        yield


class CallTimeout(Exception):
    """An implementation's call ran past the per-call time limit."""


DEFAULT_TIME_LIMIT_S = 120.0


TIMEOUT_REFIRE_S = 0.5  # a swallowed timeout fires again this often


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``CallTimeout`` in the main thread after ``seconds`` (POSIX timers).

    The timer fires again every ``TIMEOUT_REFIRE_S`` until the block ends, and a block
    that swallowed the timeout and returned still raises it on exit. Off the main
    thread, or with ``None``, no limit is applied.
    """
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return
    assert seconds is not None
    message = f"call exceeded the time limit of {seconds:g} s"
    fired = False

    def on_alarm(signum: int, frame: object) -> None:
        nonlocal fired
        fired = True
        raise CallTimeout(message)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, TIMEOUT_REFIRE_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fired:  # the block caught the timeout and carried on: still a timeout
        raise CallTimeout(message + " (the implementation caught the timeout)")


def raised_error(error: BaseException) -> RaisedError:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return RaisedError(type=type(error).__name__, message=str(error), where=where)


def record_outputs(outputs: CallOutputs, result: ImplResult) -> None:
    """Put what a call wrote (read through its convention) into the result."""
    result.tokens = outputs.tokens
    result.corrected = outputs.step_logits
    result.confidence = outputs.confidence
    result.staged = outputs.staged
    result.noise_counter = outputs.noise_counter
    result.counter_replay = outputs.counter_replay
    result.verify_ids = outputs.verify_ids


def build_sampler(
    sampler_class: type[Any],
    *,
    case: Case,
    inputs: CaseInputs,
    model: torch.nn.Module | None = None,
) -> BuiltSampler:
    """A sampler for the case in its own convention (``harness.plugins.conventions``),
    with the case's sampling parameters staged once. ``model`` replaces the case's
    drafter (timing swaps in precomputed base logits)."""
    built = build_for_case(sampler_class, case=case, inputs=inputs, model=model)
    built.stage_sampling_params(bs=case.bs, sampling_info=inputs.sampling_info)
    return built


def _observed_call(
    sampler: BuiltSampler,
    *,
    case: Case,
    inputs: CaseInputs,
    dispatch: DispatchObserver,
    result: ImplResult,
    time_limit_s: float | None,
) -> None:
    """Stage, then call, under the observers (the server stages before every replay)."""
    head_counts = HeadCounts()
    try:
        with time_limit(time_limit_s):
            with dispatch.in_phase("staging"):
                sampler.stage_sampling_params(bs=case.bs, sampling_info=inputs.sampling_info)
            with sampler.observe_walks() as head_counts, dispatch.in_phase("call"):
                sampler(inputs.hidden_states, inputs.input_ids)
    finally:
        result.work = work_counts(head_counts, dispatch)
        result.noise_draws = dispatch.noise_draws
        result.random_draws = list(dispatch.draws)
        result.walk_tokens = head_counts.walk_tokens
    record_outputs(sampler.read(case), result)
    result.outside_writes = sampler.outside_writes(case)


def run_implementation(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    record_noise: bool = True,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> ImplResult:
    """Construction, staging and one call of one implementation on the case, observed
    and time-limited; with sampled rows, a second staged call in ``second_call``."""
    result = ImplResult(name=implementation.name)
    device = torch.device(case.device)
    try:
        with same_rng_start(device, case.seed), torch.inference_mode():
            state = GlobalState.capture()  # inside the run's own modes
            dispatch = DispatchObserver(record_noise=record_noise)
            with time_limit(time_limit_s), dispatch.in_phase("construction"):
                sampler = build_for_case(implementation.sampler_class, case=case, inputs=inputs)
            sampler.poison()
            _observed_call(
                sampler,
                case=case,
                inputs=inputs,
                dispatch=dispatch,
                result=result,
                time_limit_s=time_limit_s,
            )
            # A leak undone by the next call (a toggled flag) is still a leak: check each call.
            result.leaked_state = state.differences(GlobalState.capture())
            state.restore()
            if case.has_sampled_rows:
                second = ImplResult(name=implementation.name)
                sampler.poison()
                _observed_call(
                    sampler,
                    case=case,
                    inputs=inputs,
                    dispatch=DispatchObserver(record_noise=record_noise),
                    result=second,
                    time_limit_s=time_limit_s,
                )
                result.second_call = second
    except BaseException as error:  # SystemExit too: the implementation failed, go on
        reraise_stop_request(error)
        result.error = raised_error(error)
    reraise_stop_request(None)  # a stop the implementation swallowed still stops the run
    return result


def work_counts(head_counts: HeadCounts, dispatch: DispatchObserver) -> WorkCounts:
    return WorkCounts(
        walks=head_counts.walks,
        fused_calls=head_counts.fused_calls,
        head_steps=head_counts.head_steps,
        sampler_calls=head_counts.sampler_calls,
        noise_calls=dispatch.noise_calls,
        noise_elements=dispatch.noise_elements,
        op_counts=dict(sorted(dispatch.op_counts.items())),
        rng=rng_consumption(dispatch.draws),
    )


def run_guarded(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    record_noise: bool = True,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> ImplResult:
    """``run_implementation`` between two guards: the shared inputs are digested before
    and after (changes land in ``mutated_inputs``), and the global state is restored
    afterwards (changes land in ``leaked_state``)."""
    before_inputs = input_digests(inputs)
    before_state = GlobalState.capture()
    try:
        result = run_implementation(
            implementation,
            case=case,
            inputs=inputs,
            record_noise=record_noise,
            time_limit_s=time_limit_s,
        )
    finally:
        after_state = GlobalState.capture()
        before_state.restore()
    leaks = [*result.leaked_state, *before_state.differences(after_state)]
    result.leaked_state = list(dict.fromkeys(leaks))  # once each, in order
    result.mutated_inputs = changed_inputs(before_inputs, input_digests(inputs))
    return result


def run_case(
    case: Case,
    implementations: list[Implementation],
    *,
    record_noise: bool = True,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    isolate: bool = False,
) -> CaseRun:
    """Run every implementation on the case from the same RNG start, each on pristine
    inputs and global state; the run holds pristine inputs for the checks.

    With ``isolate`` each implementation runs in a worker process
    (``harness.pipeline.isolation``), so even a crash of the process is its result.
    """
    inputs = build_inputs(case)
    results = {}
    for impl in implementations:
        if isolate:
            from harness.pipeline.isolation import worker_pool

            results[impl.name] = worker_pool().run(
                impl, case=case, record_noise=record_noise, time_limit_s=time_limit_s
            )
            continue
        result = run_guarded(
            impl, case=case, inputs=inputs, record_noise=record_noise, time_limit_s=time_limit_s
        )
        if result.mutated_inputs:  # generated from the seed on the CPU: rebuilding is exact
            inputs = build_inputs(case)
        results[impl.name] = result
    block = case_block(case, inputs)
    return CaseRun(case=case, inputs=inputs, block=block, results=results)
