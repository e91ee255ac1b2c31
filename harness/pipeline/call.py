"""One call of implementation code, observed and guarded: the one failure boundary.

``guarded_call`` is where every stage runs implementation code (construction, staging,
calls): whatever that code raises is its recorded failure (``SystemExit`` and its own
``KeyboardInterrupt`` included) and only the harness's own stop requests pass; the time
limit (``time_limit``) covers it. ``observed_call`` stages and calls a built sampler
under the observers (``harness.pipeline.observe``) and reads its outputs through its
convention, as the runner's two calls and every replay of a life do. Outputs are read
as plain tensors only (``harness.plugins.conventions.plain_tensor``): a
``torch.Tensor`` subclass, whose operators the sampler controls, is refused.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import torch

from harness.case import Case, CaseInputs
from harness.executor import WorkerFailure
from harness.interrupts import reraise_stop_request
from harness.pipeline.observe import DispatchObserver, RandomDraw, rng_consumption
from harness.pipeline.results import CallTimeout, ImplResult, RaisedError, WorkCounts
from harness.plugins.conventions import BuiltSampler, CallOutputs
from harness.plugins.protocol import DraftSampler
from harness.plugins.walks import HeadCounts
from harness.upstream.dispatch import build_for_case
from harness.world import WorldChanges, implementation_world


@contextmanager
def same_rng_start(device: torch.device, seed: int) -> Iterator[None]:
    """Seed the RNG of ``device`` (and the CPU) with ``seed``; restore both on exit."""
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices, device_type="cuda"):
        torch.manual_seed(seed)
        yield


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
    result.requested = outputs.requested
    result.stream_replays = outputs.stream_replays
    result.counter_reads = outputs.counter_reads
    result.verifier_counter = outputs.verifier_counter
    result.keyed_draws = outputs.keyed_draws
    result.verify_ids = outputs.verify_ids
    result.candidates = outputs.candidates
    result.draft_top_k = outputs.draft_top_k
    result.keeps_step_logits = outputs.keeps_step_logits


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


def observed_call(
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
        result.server_stream = dispatch.stream_of_call()
    record_outputs(sampler.read(case), result)
    result.outside_writes = sampler.outside_writes(case)


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


def failed_in_worker(failure: WorkerFailure) -> RaisedError:
    """A task that gave no answer (its worker died, hung or answered nonsense), as the
    failure of the implementation it ran."""
    return RaisedError(type=failure.type, message=failure.message, where="worker")
