"""The A/B time ratio of the pair at the production-like shape, as data: the paired
timing (in a worker with ``isolate``) or why it failed, and the callgrind instruction
counts of the built-in pair where they can be taken, or why not. The "time ratio"
section of ``python -m harness work --timing`` presents it (``harness.render.timing``)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from harness.defaults import DEFAULT_PAIR
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
    TimingError,
    ab_timing,
    default_pair,
    production_like_case,
)
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


def time_ratio(
    *,
    seed: int,
    device: str,
    repeats: int,
    hidden_size: int = PRODUCTION_HIDDEN,
    callgrind: bool = True,
    progress: Progress = no_progress,
    pair: Pair | None = None,
    isolate: bool = False,
) -> TimeRatio:
    """A/B timing of the pair (default legacy, fixed) at the production-like shape, with
    ``isolate`` in a worker, and callgrind of the built-in pair where valgrind exists."""
    case = production_like_case(seed=seed, device=device, hidden_size=hidden_size)
    progress(f"timing: {case.label()} ({repeats} alternating repetitions)")
    try:
        if isolate:
            from harness.pipeline.isolation import isolated_ab_timing

            timing = isolated_ab_timing(case, repeats=repeats, pair=pair or default_pair())
        else:
            timing = ab_timing(case, repeats=repeats, progress=progress, pair=pair)
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
