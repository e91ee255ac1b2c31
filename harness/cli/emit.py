"""The one way a command ends: its sections through the report emitter (text or
``--json`` on stdout, ``COMMAND.{json,md,txt}`` in ``--out-dir``), and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.cli.exit_codes import ExitCode
from harness.render.report import Report, emit_report
from harness.render.sections import Section

IN_PROCESS_NOTE = "in-process: plug-in code shares the judge; --isolate keeps it out"


class UsageError(Exception):
    """Bad usage or bad input: nothing was judged (``ExitCode.USAGE``)."""


def usage_error(message: str) -> ExitCode:
    """Say what is wrong with the command line on stderr; ``ExitCode.USAGE``."""
    print(f"error: {message}", file=sys.stderr)
    return ExitCode.USAGE


def emit(
    args: argparse.Namespace,
    *,
    command: str,
    heading: str,
    sections: list[Section],
    cases: Sequence[Mapping[str, Any]] = (),
    timing: dict[str, float] | None = None,
    verdicts: dict[str, Any] | None = None,
) -> ExitCode:
    """Emit a command's report with the common options in ``args`` (``--out-dir``,
    ``--json``, ``--seed``, ``--device``): ``OK`` when every section holds, else ``FAIL``.

    A command that runs implementations elsewhere (``--isolate``) has stopped its
    executor, and every worker with it, before it comes here: the report and the exit
    status are the judge's alone. A plug-in run in process is said to share the judge."""
    if getattr(args, "impl", None) and not getattr(args, "isolate", False):
        heading += f" ({IN_PROCESS_NOTE})"
    report = Report(
        command=command,
        seed=int(args.seed),
        device=str(args.device),
        heading=heading,
        sections=sections,
        cases=cases,
        timing=timing or {},
        verdicts=verdicts,
    )
    ok = emit_report(report, out_dir=Path(args.out_dir), as_json=bool(args.json))
    return ExitCode.OK if ok else ExitCode.FAIL
