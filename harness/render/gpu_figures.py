"""The "GPU figures" section of ``python -m harness gpu-figures``: the pair's sampler time
per call from CUDA events (``harness.gpu.figures``) and the step kernel's achieved
bandwidth against the device's peaks (``harness.gpu.kernel_bandwidth``)."""

from __future__ import annotations

from typing import Any

from harness.gpu.figures import EXECUTIONS, SamplerTimes
from harness.gpu.kernel_bandwidth import GB, KernelFigure, PeakBandwidth
from harness.measure.timing import MODES
from harness.render.sections import Block, Section, Table, right_aligned
from harness.render.timing import MODE_LABELS


def kernel_blocks(figures: list[KernelFigure], peak: PeakBandwidth) -> list[Block]:
    """What was measured, the achieved bandwidth per dtype, then the three peaks."""

    def share(value: float, reference: float | None) -> str:
        return "n/a" if reference is None else f"{100 * value / reference:.0f}%"

    def gbs(value: float | None) -> str:
        return "unknown" if value is None else f"{value / GB:.0f} GB/s"

    blocks: list[Block] = []
    if figures:
        f0 = figures[0]
        blocks.append(
            f"step kernel exponential_race_triton, bs={f0.bs}, V={f0.vocab_size}; "
            "bytes moved = logits + noise + row params + tokens + 2 x tile partials"
        )
    rows = [
        [
            f.dtype,
            f"{f.bytes.moved / 1e6:.1f}",
            f"{f.do_bench_ms:.4f}",
            f"{f.device_ms:.4f}",
            f"{f.achieved / GB:.0f}",
            share(f.achieved, peak.datasheet),
            share(f.achieved, peak.measured_copy),
        ]
        for f in figures
    ]
    header = ["dtype", "MB moved", "do_bench ms", "device ms", "GB/s", "of datasheet", "of copy"]
    blocks.append(Table.of(header, rows, align=["left", *right_aligned(6)]))
    blocks.append(
        "\n".join(
            [
                f"peak on {peak.device_name}: datasheet {gbs(peak.datasheet)}"
                + (
                    f" ({peak.datasheet_source})"
                    if peak.datasheet_source
                    else " (device not in table)"
                ),
                f"  device-reported (memory clock x bus width): {gbs(peak.reported)}",
                f"  measured: 1 GiB device-to-device copy, {gbs(peak.measured_copy)} "
                "(practical peak)",
                "do_bench: median, Python launch path included, L2 flushed between runs; "
                "device ms: one CUDA graph over rotated inputs (> 4 x L2), launch overhead "
                "excluded",
            ]
        )
    )
    return blocks


def sampler_time_blocks(times: SamplerTimes) -> tuple[str, Table]:
    """What was timed, then legacy and fixed per execution and mode, and their ratio."""
    head = (
        f"sampler time per call ({times.clock}), median of {times.repeats} alternating "
        f"pairs\nshape: {times.case.label()}"
    )
    rows = []
    for execution in EXECUTIONS:
        for mode in MODES:
            s = times.times[execution][mode].summary()
            rows.append(
                [
                    execution,
                    MODE_LABELS[mode],
                    f"{s['legacy_median_s'] * 1e3:.3f}",
                    f"{s['fixed_median_s'] * 1e3:.3f}",
                    f"{s['ratio_median']:.2f}",
                    f"{s['ratio_min']:.2f}..{s['ratio_max']:.2f}",
                ]
            )
    header = ["execution", "mode", "legacy ms", "fixed ms", "legacy/fixed", "min..max"]
    return head, Table.of(header, rows, align=["left", "left", "right", "right", "right", "left"])


def figures_section(
    times: SamplerTimes | None, kernels: list[KernelFigure], peak: PeakBandwidth | None
) -> Section:
    """The GPU figures as one report section (measurements: ``ok`` is always true)."""
    blocks: list[Block] = []
    data: dict[str, Any] = {}
    verdict: list[str] = []
    if times is not None:
        blocks.extend(sampler_time_blocks(times))
        data["sampler_time"] = times.to_json()
        verdict.append(
            f"legacy/fixed walk-only {times.ratio('graph', 'walk_only'):.2f}x, whole call "
            f"{times.ratio('graph', 'whole_call'):.2f}x (graph replays)"
        )
    if peak is not None:
        blocks.extend(kernel_blocks(kernels, peak))
        data["step_kernel"] = [k.to_json(peak) for k in kernels]
        data["peak"] = peak.to_json()
        for k in kernels:
            reference = peak.datasheet or peak.measured_copy
            share = f" = {100 * k.achieved / reference:.0f}% of peak" if reference else ""
            verdict.append(f"step kernel {k.dtype} {k.achieved / GB:.0f} GB/s{share}")
    device = peak.device_name if peak is not None else "GPU"
    return Section(
        title="GPU figures",
        ok=True,
        verdict=f"{device}: " + "; ".join(verdict) if verdict else "no figures",
        blocks=tuple(blocks),
        data=data,
    )
