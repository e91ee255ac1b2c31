"""Run implementations side by side on one case, from the same RNG state.

For each implementation the runner forks the device RNG and seeds it with the
case seed, builds a sampler over the case's shared inputs in its own calling
convention (``harness.plugins.conventions``), poisons its output buffers with
sentinels, stages the sampling parameters and runs one call — the
server's protocol: staging before every call — all under the observers, then
copies the live batch out and notes any write past it. Cases with sampled rows
get a second staged call on the same inputs (each call must draw fresh noise).
A case with ``replays`` then lives a server's life on a new instance
(``harness.pipeline.life``).
The caller's RNG state is restored afterwards. An implementation that raises
(``SystemExit`` and its own ``KeyboardInterrupt`` included) is a recorded result,
never a crash of the harness; the time limit covers construction, staging and the
calls. Around each implementation the guards of ``harness.pipeline.guard`` (the
inputs) and ``harness.world`` (the process) record changed inputs and leaked global
state, and the next implementation gets both pristine.

``guarded_call`` is the one failure boundary: every stage runs implementation code
(construction, staging, calls) through it, so whatever that code raises is its
recorded failure and only the harness's own stop requests pass. Outputs are read as
plain tensors only (``harness.plugins.conventions.plain_tensor``): a ``torch.Tensor``
subclass, whose operators the sampler controls, is refused.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import torch

from harness.case import Case, CaseInputs, build_inputs, case_block
from harness.interrupts import reraise_stop_request
from harness.options import DEFAULT_OPTIONS, RunOptions
from harness.pipeline.guard import changed_inputs, input_digests
from harness.pipeline.observe import DispatchObserver, RandomDraw, rng_consumption
from harness.plugins.conventions import (
    BuiltSampler,
    CallOutputs,
    NoiseCounter,
    StagedParams,
)
from harness.plugins.implementations import Implementation
from harness.plugins.protocol import DraftSampler
from harness.plugins.walks import HeadCounts
from harness.upstream.dispatch import build_for_case, convention_of
from harness.world import WorldChanges, implementation_world, take_thread_blame
from reference import BlockInputs

if TYPE_CHECKING:
    from harness.pipeline.life import Life


@dataclass(frozen=True)
class RaisedError:
    """An exception an implementation raised: class, message and where."""

    type: str
    message: str
    where: str

    def summary(self) -> str:
        return f"{self.type}: {self.message}"

    @property
    def timed_out(self) -> bool:
        """The time limit stopped it: not judged, never a defect."""
        return self.type == CallTimeout.__name__


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
    candidates: torch.Tensor | None = None  # [bs, gamma, V] bool: the contract's draft support
    error: RaisedError | None = None
    noise_draws: list[torch.Tensor] = field(default_factory=list)  # each [bs, V]
    walk_tokens: list[torch.Tensor] = field(default_factory=list)  # tokens of each walk
    work: WorkCounts = field(default_factory=WorkCounts)
    random_draws: list[RandomDraw] = field(default_factory=list)  # every phase, in order
    outside_writes: dict[str, int] = field(default_factory=dict)  # buffer: entries written
    mutated_inputs: list[str] = field(default_factory=list)  # shared inputs it changed
    leaked_state: list[str] = field(default_factory=list)  # global settings it changed
    second_call: ImplResult | None = None  # the next staged call on the same inputs
    # Draws made before this call that it may consume (noise drawn at construction or
    # at the end of the previous call: double-buffered designs).
    carried_draws: list[RandomDraw] = field(default_factory=list)
    life: Life | None = None  # the case's server life on a new instance, if it has one
    # Why the case cannot be expressed in the implementation's calling convention (it
    # was not run; every check skips saying so), or None.
    outside_contract: str | None = None

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


TIMEOUT_REFIRE_S = 0.5  # a swallowed timeout fires again this often


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``CallTimeout`` in the main thread after ``seconds`` (POSIX timers).

    The timer fires again every ``TIMEOUT_REFIRE_S`` until the block ends, and a block
    that swallowed the timeout and returned still raises it on exit. Off the main
    thread, or with ``None``, no limit is applied. Once the block has ended the limit's
    handler raises nothing, and a timeout that lands in the clean-up is absorbed there
    instead of cutting it short (which would leave the repeating timer armed). An error
    the block raises after the timeout fired (its own wrapping of the timeout) is the
    timeout.
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
    live = True  # the block runs; a SIGALRM that comes after it raises nothing

    def on_alarm(signum: int, frame: object) -> None:
        nonlocal fired
        if not live:
            return
        fired = True
        raise CallTimeout(message)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, TIMEOUT_REFIRE_S)
    try:
        yield
    except Exception as error:
        if not fired or isinstance(error, CallTimeout):
            raise
        # the code caught the timeout and raised its own error on it (Triton's
        # interpreter wraps every exception of a kernel): still the time limit
        raise CallTimeout(
            f"{message} (the implementation raised {type(error).__name__} on it)"
        ) from error
    finally:
        while True:  # a timeout may land at any bytecode here: start the clean-up over
            try:
                live = False  # first: a SIGALRM from here on raises nothing
                signal.setitimer(signal.ITIMER_REAL, 0)  # the code's own timer too
                signal.signal(signal.SIGALRM, previous)
                break
            except CallTimeout:  # landed before ``live`` was cleared: the call's own
                fired = True
    if fired:  # the block caught the timeout and carried on: still a timeout
        raise CallTimeout(message + " (the implementation caught the timeout)")


def raised_error(error: BaseException) -> RaisedError:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    try:
        message = str(error)
    except BaseException as unprintable:  # its __str__ is implementation code too
        reraise_stop_request(unprintable)
        message = f"<unprintable {type(error).__name__}>"
    return RaisedError(type=type(error).__name__, message=message, where=where)


T = TypeVar("T")


@dataclass(frozen=True)
class Guarded(Generic[T]):
    """What a guarded call of implementation code gave: its value, or its failure (and
    the exception itself, for callers that read its traceback or text)."""

    value: T | None = None
    error: RaisedError | None = None
    exception: BaseException | None = field(default=None, compare=False)
    world: list[str] = field(default_factory=list)  # global changes it made (with an owner)

    def returned(self) -> T:
        """The value of a call that did not fail (check ``error`` first)."""
        if self.error is not None:
            raise ValueError(f"the call failed: {self.error.summary()}")
        return self.value  # type: ignore[return-value]  # T itself may include None


def guarded_call(
    call: Callable[[], T], *, time_limit_s: float | None = None, owner: str | None = None
) -> Guarded[T]:
    """Run implementation code under the time limit; anything it raises (``SystemExit``,
    its own ``KeyboardInterrupt``, a timeout) is its failure. Only the harness's own stop
    requests (``harness.interrupts``) pass, including one it swallowed. With
    ``owner``, the code runs in ``implementation_world`` (``harness.world``):
    global state restored, children killed, stdout to stderr; the changes it made are
    in ``world``."""
    changes = WorldChanges()
    try:
        with contextlib.ExitStack() as stack:
            if owner is not None:
                changes = stack.enter_context(implementation_world(owner=owner))
            stack.enter_context(time_limit(time_limit_s))
            value = call()
    except BaseException as error:  # SystemExit too: the implementation failed, go on
        reraise_stop_request(error)
        outcome = Guarded[T](error=raised_error(error), exception=error, world=changes.lines)
    else:
        outcome = Guarded(value=value, world=changes.lines)
    reraise_stop_request(None)  # a stop the implementation swallowed still stops the run
    return outcome


def record_outputs(outputs: CallOutputs, result: ImplResult) -> None:
    """Put what a call wrote (read through its convention) into the result."""
    result.tokens = outputs.tokens
    result.corrected = outputs.step_logits
    result.confidence = outputs.confidence
    result.staged = outputs.staged
    result.noise_counter = outputs.noise_counter
    result.counter_replay = outputs.counter_replay
    result.verify_ids = outputs.verify_ids
    result.candidates = outputs.candidates


def build_sampler(
    sampler_class: type[DraftSampler],
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
    options: RunOptions = DEFAULT_OPTIONS,
) -> ImplResult:
    """Construction, staging and one call of one implementation on the case, observed
    and under ``options.time_limit_s``; with sampled rows, a second staged call in
    ``second_call``."""
    result = ImplResult(name=implementation.name)
    record_noise, time_limit_s = options.record_noise, options.time_limit_s
    device = torch.device(case.device)

    def construct_and_call() -> None:
        with same_rng_start(device, case.seed), torch.inference_mode():
            # A leak undone by the next call (a toggled flag) is still a leak: check each call.
            with implementation_world(owner=implementation.name) as first_call:
                dispatch = DispatchObserver(record_noise=record_noise)
                with time_limit(time_limit_s), dispatch.in_phase("construction"):
                    sampler = build_for_case(implementation.sampler_class, case=case, inputs=inputs)
                result.carried_draws = list(dispatch.draws)  # construction's draws
                sampler.poison()
                _observed_call(
                    sampler,
                    case=case,
                    inputs=inputs,
                    dispatch=dispatch,
                    result=result,
                    time_limit_s=time_limit_s,
                )
            result.leaked_state = first_call.lines
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
                second.carried_draws = latest_draws(result)
                result.second_call = second
            if case.replays:
                from harness.pipeline.life import run_life  # the life builds on these helpers

                result.life = run_life(implementation, case=case, inputs=inputs, options=options)

    result.error = guarded_call(construct_and_call).error
    return result


def latest_draws(result: ImplResult) -> list[RandomDraw]:
    """The draws a call made (its staging and its call), or, when it made none, the
    draws it was carried: what the next call of the instance may consume."""
    own = [d for d in result.random_draws if d.phase != "construction"]
    return own or result.carried_draws


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
    options: RunOptions = DEFAULT_OPTIONS,
) -> ImplResult:
    """``run_implementation`` between two guards: the shared inputs are digested before
    and after (changes land in ``mutated_inputs``), and the global state is restored
    afterwards (changes land in ``leaked_state``). A case outside the implementation's
    convention (``Convention.outside_contract``) is not run."""
    sampler_class = implementation.sampler_class
    outside = convention_of(sampler_class).outside_contract(case, sampler_class=sampler_class)
    if outside is not None:
        return ImplResult(name=implementation.name, outside_contract=outside)
    before_inputs = input_digests(inputs)
    with implementation_world(owner=implementation.name) as world:
        result = run_implementation(implementation, case=case, inputs=inputs, options=options)
    leaks = [*result.leaked_state, *world.lines]
    result.leaked_state = list(dict.fromkeys(leaks))  # once each, in order
    result.mutated_inputs = changed_inputs(before_inputs, input_digests(inputs))
    return result


def run_case(
    case: Case,
    implementations: list[Implementation],
    *,
    options: RunOptions = DEFAULT_OPTIONS,
) -> CaseRun:
    """Run every implementation on the case from the same RNG start, each on pristine
    inputs and global state, under ``options`` (the time limit, noise recording,
    isolation); the run holds pristine inputs for the checks.

    With ``options.isolate`` each implementation runs in its trust domain's worker process
    (``harness.pipeline.isolation``), so even a crash of the process is its result.
    """
    inputs = build_inputs(case)
    results = {}
    for impl in implementations:
        if options.isolate:
            from harness.pipeline.isolation import worker_for

            results[impl.name] = worker_for(impl).run(impl, case=case, options=options)
            continue
        result = run_guarded(impl, case=case, inputs=inputs, options=options)
        if result.mutated_inputs:  # generated from the seed on the CPU: rebuilding is exact
            inputs = build_inputs(case)
        results[impl.name] = result
        for name, earlier in results.items():  # its threads may have acted in later calls
            earlier.leaked_state += take_thread_blame(name)
    block = case_block(case, inputs)
    return CaseRun(case=case, inputs=inputs, block=block, results=results)
