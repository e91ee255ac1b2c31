"""``python -m harness gpu-figures`` (CUDA): CUDA-event legacy/fixed ratios and the step
kernel's achieved bandwidth."""

from __future__ import annotations

import argparse
import time

from harness.cli.emit import emit, usage_error
from harness.cli.exit_codes import ExitCode
from harness.defaults import DTYPE_NAMES
from harness.gpu.shapes import DEFAULT_REPEATS, FIGURE_BS, FIGURE_DTYPE, FIGURE_HIDDEN
from harness.render.progress import progress_printer


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
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default=FIGURE_DTYPE, help="model dtype")
    parser.add_argument("--no-sampler", action="store_true", help="skip the sampler timing")
    parser.add_argument("--no-kernel", action="store_true", help="skip the step-kernel figures")


def command(args: argparse.Namespace) -> ExitCode:
    """Measure and report the GPU figures; 0 when measured, 2 without a CUDA device."""
    from harness.gpu.figures import KERNEL_DTYPES, figure_case, sampler_times
    from harness.gpu.graphs import require_cuda
    from harness.gpu.kernel_bandwidth import KernelFigure, kernel_figure, peak_bandwidth
    from harness.render.gpu_figures import figures_section

    device_text = str(args.device)
    try:
        device = require_cuda(device_text, what="python -m harness gpu-figures")
        if args.repeats < 1 or args.bs < 1 or args.hidden_size < 1:
            raise ValueError("--repeats, --bs and --hidden-size must be >= 1")
    except RuntimeError as error:
        return usage_error(f"{error} (run with --device cuda on a machine with a GPU)")
    except ValueError as error:
        return usage_error(str(error))
    progress = progress_printer(quiet=bool(args.quiet))
    timing: dict[str, float] = {}
    times = None
    if not args.no_sampler:
        case = figure_case(
            seed=int(args.seed),
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
    return emit(
        args,
        command="gpu-figures",
        heading=f"DSpark draft-sampler harness: GPU figures ({device_text})",
        sections=[figures_section(times, kernels, peak)],
        ok=True,  # figures are measured, not judged: every failure above was an error
        timing=timing,
    )
