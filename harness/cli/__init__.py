"""Command line: ``python -m harness [COMMAND] [options]``.

Commands, each in its own module of this package with ``add_arguments(parser)``,
``command(args) -> ExitCode`` and, where it has options of its own to refuse before any
work, ``validate(args)`` (run after the shared options' checks of
``harness.cli.validate``): ``report`` (the default: the standard matrix, the
statistical oracle and the eliminated work), ``compare``, ``repro``, ``stats``,
``scan``, ``versions``, ``work``, ``sweep``, ``graphs``, ``gpu-figures``. Every command ends through
``harness.cli.emit`` and returns an ``ExitCode`` (``harness.cli.exit_codes``): 0 when
every expectation holds, 1 when any fails, 2 on bad usage or bad input (an unknown
command included).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from harness.cli.emit import UsageError, usage_error
from harness.cli.exit_codes import ExitCode
from harness.interrupts import StopRequested, stop_on_signals
from harness.io.files import JournalError, OutputWriteError
from harness.io.lock import OutDirBusy, claim_out_dir
from harness.options import DEFAULT_OPTIONS

# name -> (module under harness.cli, help, whether its implementation calls honour --time-limit)
COMMAND_TABLE: dict[str, tuple[str, str, bool]] = {
    "report": ("report", "the main job (default): matrix, stats, work", True),
    "compare": ("compare", "chosen cases and implementations side by side", True),
    "repro": ("repro", "write the smallest failing case, or replay one", True),
    "stats": ("stats", "statistical losslessness oracle", True),
    "scan": ("scan", "support scan over many (row, step, counter) triples, NaN/inf rule", False),
    "versions": ("versions", "before-fix, after-fix and sglang 0.5.23 side by side", False),
    "work": ("work", "work the fix eliminates (counters, model, --timing)", False),
    "sweep": ("sweep", "scaling sweep over bs, gamma and V", False),
    "graphs": (
        "graphs",
        "CUDA-graph capture and replay checks, and the no-host-sync check (CUDA)",
        False,
    ),
    "gpu-figures": (
        "gpu_figures",
        "GPU timing ratios and the step kernel's bandwidth (CUDA)",
        False,
    ),
}
COMMANDS = tuple(COMMAND_TABLE)


def command_module(name: str) -> Any:
    """The module that owns a command (``add_arguments`` and ``command``)."""
    return importlib.import_module(f"harness.cli.{COMMAND_TABLE[name][0]}")


def _common_options(*, time_limit: bool) -> argparse.ArgumentParser:
    """Options every command takes; ``--time-limit`` only where implementations' calls
    run under the per-call limit."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_OPTIONS.seed,
        help=f"base seed of every case (default {DEFAULT_OPTIONS.seed})",
    )
    common.add_argument(
        "--device",
        default=DEFAULT_OPTIONS.device,
        help=f"device the cases run on: cpu or cuda[:N] (default {DEFAULT_OPTIONS.device})",
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
        default=DEFAULT_OPTIONS.time_limit_s,
        metavar="SECONDS",
        help=f"limit on each implementation's construction, staging and each call "
        f"(default {DEFAULT_OPTIONS.time_limit_s:g})",
    )
    return common


def build_parser(*, with_options: Collection[str] = COMMANDS) -> argparse.ArgumentParser:
    """The whole command line; only the commands in ``with_options`` get their own
    options (``main`` builds just the one it runs, so that ``--help`` and bad usage
    answer without importing the other commands or torch)."""
    parents = {flag: [_common_options(time_limit=flag)] for flag in (True, False)}
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description="Differential harness for DSpark draft samplers "
        "(legacy double walk vs fixed single walk).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, text, time_limited) in COMMAND_TABLE.items():
        sub = commands.add_parser(name, parents=parents[time_limited], help=text)
        if name in with_options:
            command_module(name).add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its ``ExitCode``. No command (or options only) means ``report``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return usage_error(f"unknown command {argv[0]}; expected one of {', '.join(COMMANDS)}")
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        argv = ["report", *argv]
    parser = build_parser(with_options=argv[:1])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:  # argparse: --help (0) or bad usage (2)
        return int(exit_request.code or 0)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Validate the options, claim ``--out-dir`` and run the command; bad input,
    a stop request and a closed stdout each end the way the module docstring says."""
    from harness.cli.validate import validate_global_options

    try:
        with stop_on_signals():
            module = command_module(args.command)
            validate_global_options(args)
            if hasattr(module, "validate"):
                module.validate(args)
            with claim_out_dir(args.out_dir):
                return int(module.command(args))
    except _bad_input() as error:
        return usage_error(str(error))
    except StopRequested as stop:
        return _stopped(stop, args)
    except BrokenPipeError:  # stdout closed early (``--json | head``): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE


def _bad_input() -> tuple[type[Exception], ...]:
    """The errors that mean bad usage or bad input (exit 2): imported only once a
    command runs, since most of them live beside torch."""
    from harness.case import CaseError
    from harness.options import RolesError
    from harness.pipeline.memory import MemoryLimitError
    from harness.plugins.implementations import ImplementationError

    return (
        UsageError,
        CaseError,
        ImplementationError,
        JournalError,
        RolesError,
        OutDirBusy,
        MemoryLimitError,
        OutputWriteError,
    )


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


__all__ = ["COMMANDS", "ExitCode", "build_parser", "command_module", "main"]
