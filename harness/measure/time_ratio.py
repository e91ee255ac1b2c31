"""The A/B time ratio of the pair at the production-like shape, as data: the paired
timing (a task on the caller's executor, ``timing_in_domain``) or why it failed, and the
callgrind instruction counts of the built-in pair where they can be taken, or why not.
The "time ratio" section of ``python -m harness work --timing`` presents it
(``harness.render.timing``)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from harness.case import Case
from harness.defaults import DEFAULT_PAIR
from harness.executor import BUILTINS, IN_PROCESS, Executor, TimeLimited, WorkerFailure, for_domain
from harness.measure.callgrind import (
    CallgrindCounts,
    callgrind_case,
    callgrind_instructions,
    valgrind_path,
)
from harness.measure.timing import (
    PRODUCTION_HIDDEN,
    WALK_RATIO_RANGE,
    ABTiming,
    Pair,
    PairedTimes,
    TimingError,
    default_pair,
    production_like_case,
    timing_task,
)
from harness.pipeline.results import RaisedError
from harness.progress import Progress, no_progress


@dataclass(frozen=True)
class TimeRatio:
    """What the timing run gave: its timing or its failure, and the callgrind counts or
    why there are none."""

    hidden_size: int
    timing: ABTiming | None  # None: it failed
    failure: str = ""  # why the timing failed
    callgrind: CallgrindCounts | None = None
    callgrind_note: str = ""  # why there are no counts ("skipped (...)", "failed (...)")

    @property
    def ok(self) -> bool:
        """The timing ran and its median walk-only wall ratio lies in ``WALK_RATIO_RANGE``."""
        if self.timing is None:
            return False
        low, high = WALK_RATIO_RANGE
        return low <= self.timing.times["walk_only"]["wall"].summary()["ratio_median"] <= high


def timing_in_domain(case: Case, *, repeats: int, pair: Pair, executor: Executor) -> ABTiming:
    """``timing_task`` of the pair on ``executor``, in the one place both run: the timing
    alternates their calls in one process, so a pair whose trust domains run apart (two
    plug-ins under ``--isolate``) is not timed. A failure of the pair, or a task that gives
    no answer, is a ``TimingError``."""
    places = {i.trust_domain: for_domain(executor, i.trust_domain) for i in pair}
    plug_ins = [domain for domain in places if domain != BUILTINS]
    place = places[plug_ins[0]] if plug_ins else places[BUILTINS]  # a plug-in's own place
    if any(places[domain] is not place for domain in plug_ins):
        raise TimingError(
            f"a timed pair runs in one process; {pair[0].name} and {pair[1].name} run apart "
            "(two plug-ins under --isolate)"
        )
    future = place.submit(TimeLimited(timing_task, None), case, repeats=repeats, pair=pair)
    try:
        answer = future.result()
    except WorkerFailure as failure:
        raise TimingError(str(failure)) from None
    if isinstance(answer, RaisedError):
        raise TimingError(answer.message if answer.type == "TimingError" else answer.summary())
    threads, times = answer if isinstance(answer, tuple) and len(answer) == 2 else (None, None)
    if not isinstance(threads, int) or not _is_times(times):
        raise TimingError("BadAnswer: the worker's answer is not a timing")
    names = (pair[0].name, pair[1].name)
    return ABTiming(case=case, repeats=repeats, warmup=1, threads=threads, times=times, pair=names)


def _is_times(times: object) -> bool:
    return isinstance(times, dict) and all(
        isinstance(by_clock, dict) and all(isinstance(t, PairedTimes) for t in by_clock.values())
        for by_clock in times.values()
    )


def time_ratio(
    *,
    seed: int,
    device: str,
    repeats: int,
    hidden_size: int = PRODUCTION_HIDDEN,
    callgrind: bool = True,
    progress: Progress = no_progress,
    pair: Pair | None = None,
    executor: Executor = IN_PROCESS,
) -> TimeRatio:
    """A/B timing of the pair (default legacy, fixed) at the production-like shape on
    ``executor``, and callgrind of the built-in pair where valgrind exists."""
    case = production_like_case(seed=seed, device=device, hidden_size=hidden_size)
    progress(f"timing: {case.label()} ({repeats} alternating repetitions)")
    try:
        timing = timing_in_domain(
            case, repeats=repeats, pair=pair or default_pair(), executor=executor
        )
    except TimingError as error:  # a plug-in that raises is a result, not a crash
        return TimeRatio(hidden_size=hidden_size, timing=None, failure=str(error))
    note = ""
    if not callgrind:
        note = "skipped (--no-callgrind)"
    elif timing.pair != DEFAULT_PAIR:
        note = "skipped (it counts the built-in legacy and fixed only)"
    elif device != "cpu":
        note = "skipped (counts CPU instructions; the device is not the CPU)"
    elif valgrind_path() is None:
        note = "skipped (valgrind is not on PATH)"
    else:
        try:
            counts = callgrind_instructions(callgrind_case(seed=seed), progress=progress)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            note = f"failed ({error})"
        else:
            return TimeRatio(hidden_size=hidden_size, timing=timing, callgrind=counts)
    return TimeRatio(hidden_size=hidden_size, timing=timing, callgrind_note=note)
