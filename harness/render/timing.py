"""The "time ratio" section of ``python -m harness work --timing``: the pair's A/B timing
(``harness.measure.timing``) and the built-in pair's callgrind instruction counts
(``harness.measure.callgrind``), as gathered by ``harness.measure.time_ratio``, each as a
table; ``MODE_LABELS`` names the timed modes here and in the GPU figures."""

from __future__ import annotations

from typing import Any

from harness.defaults import PAIR_SIDES
from harness.measure.callgrind import CallgrindCounts
from harness.measure.time_ratio import TimeRatio
from harness.measure.timing import MODES, WALK_RATIO_RANGE, ABTiming
from harness.render.sections import Block, Section, Table, right_aligned

MODE_LABELS = {"walk_only": "walk-only (lm_head precomputed)", "whole_call": "whole call"}


def timing_blocks(timing: ABTiming) -> tuple[str, Table]:
    """What was timed, then the median times and the paired-ratio spread per mode and clock."""
    case = timing.case
    stated = (
        f"{case.label()}, {case.dtype}, {case.device}, {timing.threads} intra-op threads; "
        f"{timing.repeats} alternating repetitions after {timing.warmup} warm-up"
    )
    rows = []
    for mode, by_clock in timing.times.items():
        for clock, times in by_clock.items():
            s = times.summary()
            rows.append(
                [
                    MODE_LABELS[mode],
                    clock,
                    f"{s['legacy_median_s'] * 1e3:.1f}",
                    f"{s['fixed_median_s'] * 1e3:.1f}",
                    f"{s['ratio_min']:.3f}",
                    f"{s['ratio_median']:.3f}",
                    f"{s['ratio_max']:.3f}",
                ]
            )
    buggy, fixed = timing.pair
    header = ["mode", "clock", f"{buggy} ms", f"{fixed} ms", "ratio min", "median", "max"]
    return stated, Table.of(header, rows, align=["left", "left", *right_aligned(5)])


def callgrind_blocks(counts: CallgrindCounts) -> tuple[str, Table]:
    """Instructions per call of legacy and fixed, and their ratio, per mode."""
    rows = [
        [
            MODE_LABELS[mode],
            f"{counts.instructions[f'{mode}/legacy']:,}",
            f"{counts.instructions[f'{mode}/fixed']:,}",
            f"{counts.ratio(mode):.3f}",
        ]
        for mode in MODES
    ]
    table = Table.of(
        ["mode", *PAIR_SIDES, "ratio"], rows, align=["left", "right", "right", "right"]
    )
    return f"callgrind, {counts.case.label()}, 1 thread, instructions per call:", table


def timing_section(run: TimeRatio) -> Section:
    """The "time ratio" section: the timing, its verdict (``TimeRatio.ok``: the median
    walk-only ratio in ``WALK_RATIO_RANGE``), and callgrind's counts or why there are none."""
    if run.timing is None:
        verdict = f"timing failed: {run.failure}"
        return Section(title="time ratio", ok=run.ok, verdict=verdict, blocks=(verdict,))
    timing = run.timing
    buggy, fixed = timing.pair
    walk = timing.times["walk_only"]["wall"].summary()
    whole = timing.times["whole_call"]["wall"].summary()
    low, high = WALK_RATIO_RANGE
    blocks: list[Block] = [*timing_blocks(timing)]
    data: dict[str, Any] = {"ab": timing.to_json(), "callgrind": None}
    if run.callgrind is None:
        blocks.append(f"callgrind: {run.callgrind_note}")
    else:
        blocks.extend(callgrind_blocks(run.callgrind))
        data["callgrind"] = run.callgrind.to_json()
    verdict = (
        f"{buggy}/{fixed} wall time: walk-only median {walk['ratio_median']:.3f} "
        f"(min {walk['ratio_min']:.3f}, max {walk['ratio_max']:.3f}; expected "
        f"{low}-{high}), whole call median {whole['ratio_median']:.3f} at H={run.hidden_size}"
    )
    return Section(title="time ratio", ok=run.ok, verdict=verdict, blocks=tuple(blocks), data=data)
