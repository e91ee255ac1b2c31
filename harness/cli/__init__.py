"""Command line: ``python -m harness [COMMAND] [options]``.

Commands, each in its own module of this package with ``add_arguments(parser)`` and
``command(args) -> ExitCode``: ``report`` (the default: the standard matrix, the
statistical oracle and the eliminated work), ``compare``, ``repro``, ``stats``,
``work``, ``sweep``, ``graphs``, ``gpu-figures``. Every command ends through
``harness.cli.emit`` and returns an ``ExitCode`` (``harness.cli.exit_codes``): 0 when
every expectation holds, 1 when any fails, 2 on bad usage or bad input (an unknown
command included).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from harness.cli.emit import UsageError, usage_error
from harness.cli.exit_codes import ExitCode
from harness.io.files import JournalError
from harness.pipeline.case import CaseError
from harness.pipeline.runner import DEFAULT_TIME_LIMIT_S
from harness.pipeline.verdicts import RolesError
from harness.plugins.implementations import ImplementationError

# name -> (module under harness.cli, help, whether its implementation calls honour --time-limit)
COMMAND_TABLE: dict[str, tuple[str, str, bool]] = {
    "report": ("report", "the main job (default): matrix, stats, work", True),
    "compare": ("compare", "chosen cases and implementations side by side", True),
    "repro": ("repro", "write the smallest failing case, or replay one", True),
    "stats": ("stats", "statistical losslessness oracle", True),
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
    if not time_limit:
        return common
    common.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        metavar="SECONDS",
        help=f"per-call limit for each implementation (default {DEFAULT_TIME_LIMIT_S:g})",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parents = {flag: [_common_options(time_limit=flag)] for flag in (True, False)}
    parser = argparse.ArgumentParser(
        prog="python -m harness",
        description="Differential harness for DSpark draft samplers "
        "(legacy double walk vs fixed single walk).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, text, time_limited) in COMMAND_TABLE.items():
        sub = commands.add_parser(name, parents=parents[time_limited], help=text)
        command_module(name).add_arguments(sub)
    return parser


def _check_device(device: str) -> None:
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise UsageError(f"--device: {error}") from None
    if parsed.type not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda[:N], got {device!r}")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda asked for, but no CUDA device is available")


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
        _check_device(args.device)
        time_limit = getattr(args, "time_limit", None)
        if time_limit is not None and time_limit <= 0:
            raise UsageError(f"--time-limit must be positive, got {time_limit:g}")
        return int(command_module(args.command).command(args))
    except (UsageError, CaseError, ImplementationError, JournalError, RolesError) as error:
        return usage_error(str(error))


__all__ = ["COMMANDS", "ExitCode", "build_parser", "command_module", "main"]
