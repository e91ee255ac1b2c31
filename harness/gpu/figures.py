"""GPU figures of the fix: legacy/fixed time ratios from CUDA events, and the step kernel's
achieved memory bandwidth against the device's peak.

- **Sampler time** (``sampler_times``): legacy and fixed alternating in one process, each
  call bracketed by CUDA events on the current stream (the device synchronised before
  each start event, so one call's time never includes another's). Two modes, as in
  ``harness.measure.timing``: *walk-only* runs the real ``__call__`` on the
  ``PrecomputedBaseLogits`` drafter (the lm_head, which the fix does not touch, replaced
  by a lookup), so it times every walk, the corrected-logits copy, legacy's pass-1 view
  and the output writes; timing ``head.sample_block`` once against twice instead would
  only restate the walk count and miss what ``__call__`` does around the walks. *Whole
  call* keeps the lm_head. Each mode runs **eagerly** (Python launches every kernel) and
  as a **replay of a captured CUDA graph**, which is how production runs the sampler and
  leaves only device time.
- **Step kernel** (``kernel_figures``): ``exponential_race_triton`` (the two Triton
  kernels of one step and their small allocations) at ``V = 129280``, ``bs = 64``.
  ``triton.testing.do_bench`` gives the time with the Python launch path (its default
  L2 flush between runs); the *device time* comes from one CUDA graph holding the call
  over several distinct input buffers whose total exceeds four times the L2 cache, so
  launch overhead is gone and no call reads another's inputs from L2. Achieved
  bandwidth = bytes moved (read logits and noise, write and re-read the per-tile
  partials, read the per-row parameters, write the tokens) / device time.
- **Peak** (``peak_bandwidth``): the datasheet figure from ``DATASHEET_PEAK_BYTES_PER_S``
  (keyed by the device name, each with its source), the figure the device reports
  (memory clock x bus width, where torch exposes both) and the practical peak measured
  here as a 1 GiB device-to-device copy (2 GiB moved), timed like the kernel.

``add_arguments`` / ``command`` are ``python -m harness gpu-figures`` (``--device cuda``);
everything imports without CUDA and the clock and the capture are parameters, so the
timing path runs on the CPU in tests (wall clock, ``harness.gpu.graphs.EagerReplay``).
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.gpu.graphs import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_USAGE,
    RunnerFactory,
    cuda_graph_runner,
    require_cuda,
)
from harness.measure.timing import MODE_LABELS, MODES, SAMPLERS, PairedTimes, make_samplers
from harness.pipeline.case import DTYPES, Case, build_inputs, make_case
from harness.pipeline.runner import same_rng_start
from harness.render.progress import Progress, no_progress, progress_printer
from harness.render.report import emit_report
from harness.render.sections import Section

FIGURE_BS = 64  # the largest decode graph bucket (SPEC 5)
FIGURE_GAMMA = 7
FIGURE_VOCAB = 129280  # DeepSeek V3/V4
FIGURE_RANK = 256
FIGURE_HIDDEN = 4096  # within the production drafters' 2560..5120
FIGURE_DTYPE = "bfloat16"
KERNEL_DTYPES = ("float32", "bfloat16")
EXECUTIONS = ("eager", "graph")
NOISE_BYTES = 4  # the noise buffer is float32 whatever the logits dtype
TOKEN_BYTES = 8  # int64 token ids
ROW_PARAM_BYTES = 4 + 1  # float32 temperature + bool greedy flag per row
TILE_PARTIAL_BYTES = 5 * 4  # per row and tile: max, best score, index, first NaN, first +inf
L2_MULTIPLE = 4  # the rotated inputs of one timed graph exceed this many L2 caches
COPY_BYTES = 1 << 30  # the measured-peak copy: 1 GiB read + 1 GiB written
DEFAULT_REPEATS = 30
GB = 1e9

# Peak DRAM bandwidth in bytes/s, keyed by a substring of torch.cuda.get_device_name();
# the first match wins, so the more specific names come first. Source: NVIDIA datasheets.
DATASHEET_PEAK_BYTES_PER_S: tuple[tuple[str, float, str], ...] = (
    ("H200", 4.8e12, "NVIDIA H200 datasheet: 4.8 TB/s HBM3e (H200 SXM and H200 NVL)"),
    ("H100 NVL", 3.9e12, "NVIDIA H100 datasheet: 3.9 TB/s (H100 NVL)"),
    ("H100 PCIe", 2.0e12, "NVIDIA H100 datasheet: 2 TB/s (H100 PCIe)"),
    ("H100", 3.35e12, "NVIDIA H100 datasheet: 3.35 TB/s (H100 SXM)"),
    ("A100-SXM4-80GB", 2.039e12, "NVIDIA A100 datasheet: 2,039 GB/s (A100 80GB SXM)"),
    ("A100 80GB PCIe", 1.935e12, "NVIDIA A100 datasheet: 1,935 GB/s (A100 80GB PCIe)"),
    ("A100", 1.555e12, "NVIDIA A100 datasheet: 1,555 GB/s (A100 40GB)"),
    ("B200", 8.0e12, "NVIDIA DGX B200 datasheet: 8 TB/s per GPU"),
    ("L40", 8.64e11, "NVIDIA L40 / L40S datasheets: 864 GB/s"),
    ("L4", 3.0e11, "NVIDIA L4 datasheet: 300 GB/s"),
)

Clock = Callable[[Callable[[], object]], float]  # milliseconds one call takes


# -- clocks ------------------------------------------------------------------------------------
def cuda_event_ms(call: Callable[[], object]) -> float:
    """Milliseconds of one call between two CUDA events on the current stream; the device
    is synchronised first, so earlier work does not count."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def wall_ms(call: Callable[[], object]) -> float:
    """Milliseconds of one call on the host clock (for the CPU; tests)."""
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


CLOCK_LABELS: dict[Clock, str] = {
    cuda_event_ms: "CUDA events on the current stream, device synchronised before each",
    wall_ms: "host wall clock",
}


# -- sampler time ------------------------------------------------------------------------------
def figure_case(
    *,
    seed: int = 0,
    device: str = "cuda",
    bs: int = FIGURE_BS,
    vocab_size: int = FIGURE_VOCAB,
    hidden_size: int = FIGURE_HIDDEN,
    dtype: str = FIGURE_DTYPE,
) -> Case:
    """Folded sampling, every row sampled at T=1, vanilla head: the production shape
    bs=64, gamma=7, V=129280, r=256, H=4096 in bfloat16 unless told otherwise."""
    return make_case(
        bs=bs,
        gamma=FIGURE_GAMMA,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        markov_rank=FIGURE_RANK,
        dtype=dtype,
        seed=seed,
        device=device,
        name=(
            f"bs={bs} gamma={FIGURE_GAMMA} V={vocab_size} H={hidden_size} r={FIGURE_RANK} "
            f"{dtype} vanilla folded, all rows sampled"
        ),
    )


@dataclass(frozen=True)
class SamplerTimes:
    """Legacy and fixed per call, by execution (eager, graph) and mode."""

    case: Case
    repeats: int
    warmup: int
    clock: str  # what timed each call
    times: dict[str, dict[str, PairedTimes]]  # execution -> mode -> seconds per call

    def ratio(self, execution: str, mode: str) -> float:
        return self.times[execution][mode].summary()["ratio_median"]

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json_dict()["case"],
            "repeats": self.repeats,
            "warmup": self.warmup,
            "clock": self.clock,
            **{
                execution: {
                    mode: {
                        "legacy_s": list(t.legacy_s),
                        "fixed_s": list(t.fixed_s),
                        **t.summary(),
                    }
                    for mode, t in by_mode.items()
                }
                for execution, by_mode in self.times.items()
            },
        }


def sampler_times(
    case: Case,
    *,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = 2,
    clock: Clock = cuda_event_ms,
    runner_factory: RunnerFactory = cuda_graph_runner,
    progress: Progress = no_progress,
) -> SamplerTimes:
    """Time legacy and fixed alternately (the order flipped every repetition), walk-only and
    whole call, eagerly and as graph replays. The global RNG is left as it was."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    device = torch.device(case.device)
    inputs = build_inputs(case)
    ms: dict[tuple[str, str, str], list[float]] = {}
    with same_rng_start(device, case.seed), torch.inference_mode():
        samplers = make_samplers(case, inputs=inputs)
        calls: dict[tuple[str, str, str], Callable[[], object]] = {}
        for (mode, name), sampler in samplers.items():
            call = _bare_call(sampler, inputs.hidden_states, inputs.input_ids)
            runner = runner_factory(device)
            runner.capture(call)
            calls["eager", mode, name] = call
            calls["graph", mode, name] = runner.replay
        for _ in range(warmup):
            for warm in calls.values():
                warm()
        for key in calls:
            ms[key] = []
        for rep in range(repeats):
            order = SAMPLERS if rep % 2 == 0 else SAMPLERS[::-1]
            for execution in EXECUTIONS:
                for mode in MODES:
                    for name in order:
                        ms[execution, mode, name].append(clock(calls[execution, mode, name]))
            progress(
                f"[gpu timing {rep + 1}/{repeats}] "
                + ", ".join(
                    f"{execution} {mode}: legacy {ms[execution, mode, 'legacy'][-1]:.3f} ms, "
                    f"fixed {ms[execution, mode, 'fixed'][-1]:.3f} ms"
                    for execution in EXECUTIONS
                    for mode in MODES
                )
            )
    times = {
        execution: {
            mode: PairedTimes(
                tuple(t / 1e3 for t in ms[execution, mode, "legacy"]),
                tuple(t / 1e3 for t in ms[execution, mode, "fixed"]),
            )
            for mode in MODES
        }
        for execution in EXECUTIONS
    }
    return SamplerTimes(case, repeats, warmup, CLOCK_LABELS.get(clock, "custom clock"), times)


def _bare_call(
    sampler: Any, hidden_states: torch.Tensor, input_ids: torch.Tensor
) -> Callable[[], list[torch.Tensor]]:
    """The sampler's call as production captures it: no observers, and no static outputs
    besides the sampler's own buffers."""

    def call() -> list[torch.Tensor]:
        sampler(hidden_states, input_ids)
        return []

    return call


# -- the step kernel and the peak --------------------------------------------------------------
@dataclass(frozen=True)
class KernelBytes:
    """Bytes one ``exponential_race_triton`` call reads and writes, by what they are."""

    logits: int
    noise: int
    row_params: int
    tile_partials: int  # written by the tiles kernel and read again by the combine
    tokens: int

    @property
    def compulsory(self) -> int:
        """What any race must move: read logits, noise and row parameters, write tokens."""
        return self.logits + self.noise + self.row_params + self.tokens

    @property
    def moved(self) -> int:
        """What the two kernels move: the compulsory bytes plus the partials, twice."""
        return self.compulsory + 2 * self.tile_partials


def race_kernel_bytes(*, bs: int, vocab_size: int, dtype: str) -> KernelBytes:
    """The byte model of one step: ``bs`` rows of ``vocab_size`` logits in ``dtype``."""
    from reference.triton_race import BLOCK_V

    tiles = math.ceil(vocab_size / BLOCK_V)
    element = DTYPES[dtype].itemsize
    return KernelBytes(
        logits=bs * vocab_size * element,
        noise=bs * vocab_size * NOISE_BYTES,
        row_params=bs * ROW_PARAM_BYTES,
        tile_partials=bs * tiles * TILE_PARTIAL_BYTES,
        tokens=bs * TOKEN_BYTES,
    )


def datasheet_peak(device_name: str) -> tuple[float, str] | None:
    """``(bytes/s, source)`` of the first table entry whose key is in the device name."""
    for key, peak, source in DATASHEET_PEAK_BYTES_PER_S:
        if key in device_name:
            return peak, source
    return None


def reported_peak(properties: Any) -> float | None:
    """Memory clock (kHz) x 2 (double data rate) x bus width (bits) / 8, where torch's
    device properties expose both; ``None`` otherwise."""
    clock_khz = getattr(properties, "memory_clock_rate", 0) or 0
    bus_bits = getattr(properties, "memory_bus_width", 0) or 0
    if clock_khz <= 0 or bus_bits <= 0:
        return None
    return float(clock_khz) * 1e3 * 2 * bus_bits / 8


def graph_device_ms(
    calls: Sequence[Callable[[], Any]],
    *,
    device: torch.device,
    replays: int = 10,
    runner_factory: RunnerFactory = cuda_graph_runner,
    clock: Clock = cuda_event_ms,
) -> float:
    """Device milliseconds per call: every call captured in one graph, the graph replayed
    ``replays`` times between two events, divided by the number of calls made."""

    def all_calls() -> list[torch.Tensor]:
        for call in calls:
            call()
        return []

    runner = runner_factory(device)
    runner.capture(all_calls)
    runner.replay()  # first replay uploads the graph

    def replayed() -> None:
        for _ in range(replays):
            runner.replay()

    return clock(replayed) / (replays * len(calls))


@dataclass(frozen=True)
class PeakBandwidth:
    """The device's peak bandwidth three ways (bytes/s; ``None`` where unknown)."""

    device_name: str
    datasheet: float | None
    datasheet_source: str | None
    reported: float | None
    measured_copy: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "device_name": self.device_name,
            "datasheet_bytes_per_s": self.datasheet,
            "datasheet_source": self.datasheet_source,
            "reported_bytes_per_s": self.reported,
            "measured_copy_bytes_per_s": self.measured_copy,
            "measured_copy_note": f"device-to-device copy of {COPY_BYTES} bytes "
            f"({2 * COPY_BYTES} moved), device time from a CUDA graph",
        }


def peak_bandwidth(device: torch.device) -> PeakBandwidth:
    """Datasheet, reported and measured (1 GiB copy) peak of ``device``."""
    require_cuda(device, what="the peak-bandwidth figure")
    name = torch.cuda.get_device_name(device)
    sheet = datasheet_peak(name)
    source = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    copy_ms = graph_device_ms([lambda: target.copy_(source)], device=device)
    return PeakBandwidth(
        device_name=name,
        datasheet=None if sheet is None else sheet[0],
        datasheet_source=None if sheet is None else sheet[1],
        reported=reported_peak(torch.cuda.get_device_properties(device)),
        measured_copy=2 * COPY_BYTES / (copy_ms / 1e3),
    )


@dataclass(frozen=True)
class KernelFigure:
    """One dtype of the step kernel: its bytes, both times and the achieved bandwidth."""

    dtype: str
    bs: int
    vocab_size: int
    bytes: KernelBytes
    do_bench_ms: float  # with the Python launch path
    device_ms: float  # from a CUDA graph over rotated inputs
    rotated_inputs: int

    @property
    def achieved(self) -> float:
        return self.bytes.moved / (self.device_ms / 1e3)

    def to_json(self, peak: PeakBandwidth) -> dict[str, Any]:
        def share(reference: float | None) -> float | None:
            return None if reference is None else self.achieved / reference

        return {
            "dtype": self.dtype,
            "bs": self.bs,
            "vocab_size": self.vocab_size,
            "bytes_moved": self.bytes.moved,
            "bytes_compulsory": self.bytes.compulsory,
            "do_bench_ms": self.do_bench_ms,
            "device_ms": self.device_ms,
            "rotated_inputs": self.rotated_inputs,
            "achieved_bytes_per_s": self.achieved,
            "fraction_of_datasheet_peak": share(peak.datasheet),
            "fraction_of_measured_copy_peak": share(peak.measured_copy),
        }


def race_inputs(
    *, bs: int, vocab_size: int, dtype: str, device: torch.device, seed: int
) -> dict[str, torch.Tensor]:
    """Race inputs made on the CPU from ``seed``, then moved: logits ~ 3 N(0, 1) in
    ``dtype``, ``Exp(1)`` noise, T = 1 and every row sampled."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, vocab_size, generator=generator) * 3
    noise = torch.empty(bs, vocab_size).exponential_(generator=generator)
    return {
        "logits": logits.to(DTYPES[dtype]).to(device),
        "temperatures": torch.ones(bs, device=device),
        "greedy_mask": torch.zeros(bs, dtype=torch.bool, device=device),
        "noise": noise.to(device),
    }


def kernel_figure(
    *, dtype: str, device: torch.device, bs: int = FIGURE_BS, vocab_size: int = FIGURE_VOCAB
) -> KernelFigure:
    """``do_bench`` and graph device time of ``exponential_race_triton`` for one dtype."""
    require_cuda(device, what="the step-kernel figure")
    import triton.testing

    from reference.triton_race import exponential_race_triton

    byte_model = race_kernel_bytes(bs=bs, vocab_size=vocab_size, dtype=dtype)
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    rotated = max(2, math.ceil(L2_MULTIPLE * l2_bytes / byte_model.moved))
    first = race_inputs(bs=bs, vocab_size=vocab_size, dtype=dtype, device=device, seed=0)
    sets = [first] + [{k: v.clone() for k, v in first.items()} for _ in range(rotated - 1)]
    do_bench_ms = float(
        triton.testing.do_bench(
            lambda: exponential_race_triton(**first), warmup=25, rep=100, return_mode="median"
        )
    )
    device_ms = graph_device_ms(
        [functools.partial(exponential_race_triton, **inputs) for inputs in sets],
        device=device,
    )
    return KernelFigure(dtype, bs, vocab_size, byte_model, do_bench_ms, device_ms, rotated)


# -- report ------------------------------------------------------------------------------------
def format_sampler_times(times: SamplerTimes) -> str:
    head = (
        f"sampler time per call ({times.clock}), median of {times.repeats} alternating "
        "pairs\n"
        f"shape: {times.case.label()}\n"
    )
    width = max(len(label) for label in MODE_LABELS.values())
    lines = [
        f"{'execution':9}  {'mode'.ljust(width)}  {'legacy ms':>10}  {'fixed ms':>10}  "
        f"{'legacy/fixed':>12}  (min..max)"
    ]
    for execution in EXECUTIONS:
        for mode in MODES:
            s = times.times[execution][mode].summary()
            lines.append(
                f"{execution:9}  {MODE_LABELS[mode].ljust(width)}  "
                f"{s['legacy_median_s'] * 1e3:10.3f}  {s['fixed_median_s'] * 1e3:10.3f}  "
                f"{s['ratio_median']:12.2f}  ({s['ratio_min']:.2f}..{s['ratio_max']:.2f})"
            )
    return head + "\n".join(lines)


def format_kernel_figures(figures: list[KernelFigure], peak: PeakBandwidth) -> str:
    def share(value: float, reference: float | None) -> str:
        return "n/a" if reference is None else f"{100 * value / reference:.0f}%"

    lines = []
    if figures:
        f0 = figures[0]
        lines.append(
            f"step kernel exponential_race_triton, bs={f0.bs}, V={f0.vocab_size}; "
            "bytes moved = logits + noise + row params + tokens + 2 x tile partials"
        )
    lines.append(
        f"{'dtype':9}  {'MB moved':>9}  {'do_bench ms':>11}  {'device ms':>9}  "
        f"{'GB/s':>7}  {'of datasheet':>12}  {'of copy':>7}"
    )
    for f in figures:
        lines.append(
            f"{f.dtype:9}  {f.bytes.moved / 1e6:9.1f}  {f.do_bench_ms:11.4f}  "
            f"{f.device_ms:9.4f}  {f.achieved / GB:7.0f}  "
            f"{share(f.achieved, peak.datasheet):>12}  {share(f.achieved, peak.measured_copy):>7}"
        )

    def gbs(value: float | None) -> str:
        return "unknown" if value is None else f"{value / GB:.0f} GB/s"

    lines += [
        f"peak on {peak.device_name}: datasheet {gbs(peak.datasheet)}"
        + (f" ({peak.datasheet_source})" if peak.datasheet_source else " (device not in table)"),
        f"  device-reported (memory clock x bus width): {gbs(peak.reported)}",
        f"  measured: 1 GiB device-to-device copy, {gbs(peak.measured_copy)} (practical peak)",
        "do_bench: median, Python launch path included, L2 flushed between runs; "
        "device ms: one CUDA graph over rotated inputs (> 4 x L2), launch overhead excluded",
    ]
    return "\n".join(lines)


def figures_section(
    times: SamplerTimes | None, kernels: list[KernelFigure], peak: PeakBandwidth | None
) -> Section:
    """The GPU figures as one report section (measurements: ``ok`` is always true)."""
    parts: list[str] = []
    data: dict[str, Any] = {}
    verdict: list[str] = []
    if times is not None:
        parts.append(format_sampler_times(times))
        data["sampler_time"] = times.to_json()
        verdict.append(
            f"legacy/fixed walk-only {times.ratio('graph', 'walk_only'):.2f}x, whole call "
            f"{times.ratio('graph', 'whole_call'):.2f}x (graph replays)"
        )
    if peak is not None:
        parts.append(format_kernel_figures(kernels, peak))
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
        text="\n\n".join(parts),
        data=data,
    )


# -- command line ------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness gpu-figures``."""
    parser.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"alternating legacy/fixed pairs per figure (default {DEFAULT_REPEATS})",
    )
    parser.add_argument("--bs", type=int, default=FIGURE_BS, help="requests per call")
    parser.add_argument(
        "--hidden-size", type=int, default=FIGURE_HIDDEN, help="draft hidden size H"
    )
    parser.add_argument("--dtype", choices=tuple(DTYPES), default=FIGURE_DTYPE, help="model dtype")
    parser.add_argument("--no-sampler", action="store_true", help="skip the sampler timing")
    parser.add_argument("--no-kernel", action="store_true", help="skip the step-kernel figures")


def command(args: argparse.Namespace) -> int:
    """Measure and report the GPU figures; 0 when measured, 2 without a CUDA device."""
    device_text = str(getattr(args, "device", "cpu"))
    try:
        device = require_cuda(device_text, what="python -m harness gpu-figures")
        if args.repeats < 1 or args.bs < 1 or args.hidden_size < 1:
            raise ValueError("--repeats, --bs and --hidden-size must be >= 1")
    except RuntimeError as error:
        print(f"error: {error} (run with --device cuda on a machine with a GPU)", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    progress = progress_printer(quiet=bool(getattr(args, "quiet", False)))
    timing: dict[str, float] = {}
    times = None
    if not args.no_sampler:
        case = figure_case(
            seed=int(getattr(args, "seed", 0)),
            device=device_text,
            bs=args.bs,
            hidden_size=args.hidden_size,
            dtype=args.dtype,
        )
        progress(f"gpu figures: sampler time, {case.label()}")
        started = time.perf_counter()
        times = sampler_times(case, repeats=args.repeats, progress=progress)
        timing["sampler_s"] = round(time.perf_counter() - started, 3)
    kernels: list[KernelFigure] = []
    peak = None
    if not args.no_kernel:
        started = time.perf_counter()
        progress("gpu figures: peak bandwidth (1 GiB copy)")
        peak = peak_bandwidth(device)
        for dtype in KERNEL_DTYPES:
            progress(f"gpu figures: step kernel, {dtype}")
            kernels.append(kernel_figure(dtype=dtype, device=device))
        timing["kernel_s"] = round(time.perf_counter() - started, 3)
    ok = emit_report(
        out_dir=Path(args.out_dir),
        as_json=bool(args.json),
        seed=int(args.seed),
        device=str(args.device),
        command="gpu-figures",
        heading=f"DSpark draft-sampler harness: GPU figures ({device_text})",
        sections=[figures_section(times, kernels, peak)],
        cases=[],
        timing=timing,
    )
    return EXIT_OK if ok else EXIT_FAIL
