"""``python -m harness versions``: the before-fix module, the after-fix module, the
installed sglang 0.5.23 and, where the vllm package loads, vLLM 0.33's dense and top-k
speculators side by side (``harness.releases.versions``), measured in one
run: lossless and drop-in with why, walks, torch random-number launches and counter
advances per call, the A/B time per call against ``fixed``, the statistical verdicts
under both verifiers, and the findings. Needs the sglang package (exit 2 with its one
line without it). Exit 0 when the before-fix module is not lossless and the after-fix
module is; 1 otherwise.
"""

from __future__ import annotations

import argparse
import time

from harness.cli.emit import UsageError
from harness.cli.exit_codes import ExitCode
from harness.cli.options import add_verifier_noise_option
from harness.render.progress import progress_printer
from harness.render.report import Report, emit_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scan-triples",
        type=int,
        default=1 << 16,
        help="support-scan triples per point and version (12 points; default 65536)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="A/B timing repetitions (default 5)")
    add_verifier_noise_option(parser)


def command(args: argparse.Namespace) -> ExitCode:
    from harness.upstream.loaders.sglang_loader import unavailable_reason

    missing = unavailable_reason()
    if missing is not None:
        raise UsageError(f"versions needs the released sglang: {missing}")
    if args.device != "cpu":
        raise UsageError(f"versions runs on the CPU only; got --device {args.device}")
    if args.scan_triples < 1 or args.repeats < 1:
        raise UsageError("--scan-triples and --repeats must be positive integers")
    from harness.releases.versions import collect_versions
    from harness.render.versions import versions_section

    started = time.perf_counter()
    versions = collect_versions(
        seed=args.seed,
        scan_triples_per_point=args.scan_triples,
        repeats=args.repeats,
        verifier_noise=args.verifier_noise,
        progress=progress_printer(quiet=args.quiet),
    )
    report = Report(
        command="versions",
        seed=args.seed,
        device=args.device,
        heading=f"DSpark draft-sampler harness: versions (seed {args.seed}, {args.device})",
        ok=versions.ok,
        sections=[versions_section(versions)],
        timing={"versions_s": round(time.perf_counter() - started, 3)},
    )
    ok = emit_report(report, out_dir=args.out_dir, as_json=args.json, long=args.long)
    return ExitCode.OK if ok else ExitCode.FAIL
