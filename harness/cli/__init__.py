"""Command line: ``python -m harness [COMMAND] [options]``.

Commands: ``report`` (the default: the standard matrix, the statistical oracle
and the eliminated work), ``compare``, ``repro`` (here), and ``stats``, ``work``,
``sweep``, ``graphs``, ``gpu-figures`` (each in its own module with ``add_arguments``
and ``command``). Every command ends through ``harness.cli.emit`` and returns an
``ExitCode`` (``harness.cli.exit_codes``): 0 when every expectation holds, 1 when any
fails, 2 on bad usage or bad input (an unknown command included).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cli.emit import UsageError, emit, usage_error
from harness.cli.exit_codes import ExitCode
from harness.cli.options import add_impl_option, add_selection_options
from harness.cli.validate import validate_global_options
from harness.io.files import JournalError, write_atomically
from harness.io.lock import OutDirBusy, claim_out_dir
from harness.pipeline.case import Case, CaseError
from harness.pipeline.compare import compare, comparison_sections
from harness.pipeline.interrupts import StopRequested, stop_on_signals
from harness.pipeline.isolation import shutdown_workers
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.memory import MemoryLimitError
from harness.pipeline.runner import DEFAULT_TIME_LIMIT_S
from harness.plugins.implementations import (
    BUILTIN_IMPLEMENTATIONS,
    Implementation,
    ImplementationError,
    builtin_implementations,
    parse_names,
    select_implementations,
)
from harness.render.figures import PLOT_EXTRA_HINT
from harness.render.progress import Progress, progress_printer
from harness.render.sections import Section

COMMANDS = ("report", "compare", "repro", "stats", "work", "sweep", "graphs", "gpu-figures")
JOURNAL = "{command}.cases.jsonl"  # one line per finished case, under --out-dir


def _common_options(*, time_limit: bool = True) -> argparse.ArgumentParser:
    """Options every command takes; ``--time-limit`` only where implementations' calls
    run under the per-call limit."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--seed", type=int, default=0, help="base seed of every case (default 0)")
    common.add_argument(
        "--device", default="cpu", help="device the cases run on: cpu or cuda[:N] (default cpu)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    common.add_argument(
        "--out-dir",
        type=Path,
        default=Path("harness-report"),
        help="where report files are written (default ./harness-report)",
    )
    common.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    common.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="refuse work estimated above SIZE (e.g. 64G; default: half the free memory)",
    )
    if not time_limit:
        return common
    common.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        metavar="SECONDS",
        help=f"limit on each implementation's construction, staging and call "
        f"(default {DEFAULT_TIME_LIMIT_S:g})",
    )
    return common


def _isolate_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run each implementation in a worker process, so a crash is a recorded failure",
    )


def _resume_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the cases an interrupted run already finished (its journal in --out-dir)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description="Differential harness for DSpark draft samplers "
        "(legacy double walk vs fixed single walk).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    report = commands.add_parser(
        "report", parents=[common], help="the main job (default): matrix, stats, work"
    )
    add_impl_option(report)
    _resume_option(report)
    _isolate_option(report)
    report.add_argument("--no-stats", action="store_true", help="skip the statistical oracle")
    report.add_argument("--no-work", action="store_true", help="skip the eliminated-work section")

    comp = commands.add_parser(
        "compare", parents=[common], help="chosen cases and implementations side by side"
    )
    add_selection_options(comp, verb="run")
    _resume_option(comp)
    _isolate_option(comp)

    repro = commands.add_parser(
        "repro", parents=[common], help="write the smallest failing case, or replay one"
    )
    add_impl_option(repro)
    repro.add_argument("file", nargs="?", type=Path, help="a repro file to replay")
    repro.add_argument("--out", type=Path, help="find, shrink and write a failing case here")
    repro.add_argument(
        "--target", help="implementation to reproduce (default: the --impl given, else legacy)"
    )

    unlimited = _common_options(time_limit=False)
    for name, text in SUBCOMMAND_HELP.items():
        parents = [common] if name in TIME_LIMITED else [unlimited]
        sub = commands.add_parser(name, parents=parents, help=text)
        _subcommand_module(name).add_arguments(sub)
    return parser


TIME_LIMITED = ("stats",)  # sub-commands whose implementation calls honour --time-limit
SUBCOMMAND_HELP = {
    "stats": "statistical losslessness oracle",
    "work": "work the fix eliminates (counters, model, --timing)",
    "sweep": "scaling sweep over bs, gamma and V",
    "graphs": "CUDA-graph capture and replay checks, and the no-host-sync check (CUDA)",
    "gpu-figures": "GPU timing ratios and the step kernel's bandwidth (CUDA)",
}


def _subcommand_module(name: str) -> Any:
    """The module that owns a sub-command (``add_arguments`` and ``command``)."""
    from harness.cli import gpu_figures, graphs, stats, sweep, work

    return {
        "stats": stats,
        "work": work,
        "sweep": sweep,
        "graphs": graphs,
        "gpu-figures": gpu_figures,
    }[name]


def _implementations(args: argparse.Namespace, names: Sequence[str]) -> list[Implementation]:
    return select_implementations(names, args.impl)


def cmd_report(args: argparse.Namespace) -> ExitCode:
    progress = progress_printer(quiet=args.quiet)
    started = time.perf_counter()
    cases = standard_matrix(seed=args.seed, device=args.device)
    records = compare(
        cases,
        _implementations(args, list(BUILTIN_IMPLEMENTATIONS)),
        require_observable=True,
        progress=progress,
        time_limit_s=args.time_limit,
        journal=args.out_dir / JOURNAL.format(command="report"),
        resume=args.resume,
        isolate=args.isolate,
    )
    timing = {"matrix_s": round(time.perf_counter() - started, 3)}
    sections = comparison_sections(records, require_coverage=True)
    if not args.no_stats:
        from harness.oracles import section as stats

        progress("statistical oracle ...")
        started = time.perf_counter()
        sections.insert(
            -1,
            stats.report_section(
                seed=args.seed,
                progress=progress,
                device=args.device,
                implementations=_implementations(args, list(BUILTIN_IMPLEMENTATIONS)),
                time_limit_s=args.time_limit,
            ),
        )
        timing["stats_s"] = round(time.perf_counter() - started, 3)
    if not args.no_work:
        from harness.measure import work_report

        progress("eliminated work ...")
        started = time.perf_counter()
        sections.insert(-1, work_report.report_section(seed=args.seed, progress=progress))
        timing["work_s"] = round(time.perf_counter() - started, 3)
    heading = (
        f"DSpark draft-sampler harness: standard matrix ({len(cases)} cases, "
        f"seed {args.seed}, {args.device})"
    )
    _write_power_plot(args.out_dir, sections, progress=progress)
    return emit(
        args,
        command="report",
        heading=heading,
        sections=sections,
        cases=records,
        timing=timing,
    )


def _write_power_plot(out_dir: Path, sections: list[Section], *, progress: Progress) -> None:
    """The statistical section's power curves as ``report-power.png``, when they ran and
    matplotlib (the ``plot`` extra) is installed; otherwise the section's evidence and
    the progress say the PNG was skipped."""
    section = next((s for s in sections if s.data.get("power_curves")), None)
    if section is None:
        return
    from harness.oracles.section import power_curves_png

    path = out_dir / "report-power.png"
    png = power_curves_png(section.data["power_curves"])
    if png is None:
        note = f"{path.name} skipped: {PLOT_EXTRA_HINT}"
        section.append(note)
        progress(note)
        return
    write_atomically(path, png)
    progress(f"written: {path}")


def cmd_compare(args: argparse.Namespace) -> ExitCode:
    implementations = _implementations(args, parse_names(args.only))
    if args.case:
        cases = [Case.load(path) for path in args.case]
        if args.device != "cpu":
            cases = [c.with_changes(device=args.device) for c in cases]
    else:
        cases = standard_matrix(seed=args.seed, device=args.device)
    started = time.perf_counter()
    records = compare(
        cases,
        implementations,
        require_observable=not args.case,
        progress=progress_printer(quiet=args.quiet),
        time_limit_s=args.time_limit,
        journal=args.out_dir / JOURNAL.format(command="compare"),
        resume=args.resume,
        isolate=args.isolate,
    )
    sections = comparison_sections(records, require_coverage=not args.case)
    heading = f"DSpark draft-sampler harness: compare ({len(cases)} cases, {args.device})"
    return emit(
        args,
        command="compare",
        heading=heading,
        sections=sections,
        cases=records,
        timing={"compare_s": round(time.perf_counter() - started, 3)},
    )


def cmd_repro(args: argparse.Namespace) -> ExitCode:
    from harness.pipeline import repro

    progress = progress_printer(quiet=args.quiet)
    if args.file is not None:
        if args.out is not None:
            raise UsageError("give either a repro FILE to replay or --out FILE, not both")
        case, spec, recorded = repro.read_repro(args.file)
        implementation = repro.resolve_implementation(spec)
        if args.device != "cpu":
            case = case.with_changes(device=args.device)
        now = repro.outcome_of(case, implementation)
        identical = now == recorded
        result = {
            "case": case.label(),
            "implementation": spec,
            "identical": identical,
            "failing": now.failing,
            "outcome": now.to_json(),
        }
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(f"replayed {spec} on {case.label()}")
            print(
                "result: "
                + (
                    "IDENTICAL to the recorded one"
                    if identical
                    else "DIFFERS from the recorded one"
                )
            )
            for name, detail, _ in now.failures:
                print(f"  FAIL {name}: {detail}")
            if not now.failing:
                print("  the implementation passes every check on this case now")
        return ExitCode.FAIL if now.failing or not identical else ExitCode.OK
    if args.out is None:
        raise UsageError("repro needs a FILE to replay or --out FILE to write one")
    implementations = _implementations(args, [])
    target = args.target or (implementations[0].name if len(implementations) == 1 else "legacy")
    chosen = [i for i in implementations if i.name == target]
    if not chosen:
        if target not in BUILTIN_IMPLEMENTATIONS:
            raise UsageError(f"--target {target!r} is neither built in nor given with --impl")
        chosen = builtin_implementations((target,))
    found = repro.find_smallest_failure(
        standard_matrix(seed=args.seed, device=args.device), chosen[0], progress=progress
    )
    if found is None:
        print(f"{target}: no failing case in the standard matrix; nothing written")
        return ExitCode.OK
    case, outcome = found
    repro.write_repro(args.out, case=case, implementation=chosen[0], outcome=outcome)
    if args.json:
        print(
            json.dumps(
                {"file": str(args.out), "case": case.to_json_dict(), "outcome": outcome.to_json()},
                indent=2,
            )
        )
    else:
        print(f"{target} fails on {case.label()}")
        for name, detail, _ in outcome.failures:
            print(f"  FAIL {name}: {detail}")
        print(f"written: {args.out} (replay with: python -m harness repro {args.out})")
    return ExitCode.FAIL


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its ``ExitCode``. No command (or options only) means ``report``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return usage_error(f"unknown command {argv[0]}; expected one of {', '.join(COMMANDS)}")
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["report", *argv]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse: --help (0) or bad usage (2)
        return int(exit_request.code or 0)
    try:
        with stop_on_signals():
            try:
                validate_global_options(args)
                with claim_out_dir(args.out_dir):
                    return _run_command(args)
            finally:
                shutdown_workers()
    except BAD_INPUT as error:
        return usage_error(str(error))
    except StopRequested as stop:
        return _stopped(stop, args)
    except BrokenPipeError:  # stdout closed early (``--json | head``): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


BAD_INPUT = (UsageError, CaseError, ImplementationError, JournalError, OutDirBusy, MemoryLimitError)
BROKEN_PIPE = 128 + signal.SIGPIPE  # what a shell reports for a closed pipe


def _stopped(stop: StopRequested, args: argparse.Namespace) -> int:
    """One line on stderr and 130 (SIGINT) or 143 (SIGTERM)."""
    code = ExitCode.INTERRUPTED if stop.signum == signal.SIGINT else ExitCode.TERMINATED
    resumable = args.command in ("report", "compare", "sweep")
    print(
        f"interrupted by {signal.Signals(stop.signum).name}"
        + (
            ": finished work is kept; rerun with the same options and --resume" if resumable else ""
        ),
        file=sys.stderr,
    )
    return int(code)


def _run_command(args: argparse.Namespace) -> int:
    if args.command == "report":
        return cmd_report(args)
    if args.command == "compare":
        return cmd_compare(args)
    if args.command == "repro":
        return cmd_repro(args)
    return int(_subcommand_module(args.command).command(args))
