"""The one way a command ends: its sections through the report emitter (text or
``--json`` on stdout, ``COMMAND.{json,md,txt}`` in ``--out-dir``), and an exit code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.cli.exit_codes import ExitCode
from harness.render.report import Report, emit_report
from harness.render.sections import Section

if TYPE_CHECKING:
    from harness.judgement import Judgement

IN_PROCESS_NOTE = "in-process: plug-in code shares the judge"
ISOLATE_HINT = "--isolate keeps it out"  # said where the command has --isolate


def plugin_note(args: argparse.Namespace) -> str | None:
    """What the heading says of the ``--impl`` plug-ins' code: it shares the judge
    unless the command isolated it, and ``--isolate`` is named only where the command
    has it; ``None`` without plug-ins, or isolated."""
    if not getattr(args, "impl", None) or getattr(args, "isolate", False):
        return None
    return f"{IN_PROCESS_NOTE}; {ISOLATE_HINT}" if hasattr(args, "isolate") else IN_PROCESS_NOTE


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
    ok: bool | None = None,
    judgement: Judgement | None = None,
    cases: Sequence[Mapping[str, Any]] = (),
    timing: dict[str, float] | None = None,
    said: str = "",
    top_level: Mapping[str, Any] | None = None,
) -> ExitCode:
    """Emit a command's report with the common options in ``args`` (``--out-dir``,
    ``--json``, ``--seed``, ``--device``): ``OK`` when it holds (the ``judgement``'s
    ``ok``, else the ``ok`` the command decided), else ``FAIL``. A judgement brings its
    records, its wall times and its JSON.

    A command that runs implementations elsewhere (``--isolate``) has stopped its
    executor, and every worker with it, before it comes here: the report and the exit
    status are the judge's alone. A plug-in run in process is said to share the judge.
    ``said`` replaces PASS/FAIL on the verdict line with what the command found;
    ``top_level`` adds its findings at the top of the JSON."""
    note = plugin_note(args)
    heading += "" if note is None else f"\n({note})"
    if judgement is not None:
        ok, cases = judgement.ok, judgement.records
        timing = {**judgement.timing, **(timing or {})}
    if ok is None:
        raise ValueError(f"{command}: a report needs its judgement or the ok it decided")
    report = Report(
        command=command,
        seed=int(args.seed),
        device=str(args.device),
        heading=heading,
        ok=ok,
        sections=sections,
        cases=cases,
        timing=timing or {},
        judgement=None if judgement is None else judgement.to_json(),
        said=said,
        top_level=top_level or {},
    )
    holds = emit_report(
        report,
        out_dir=Path(args.out_dir),
        as_json=bool(args.json),
        long=bool(getattr(args, "long", False)),
    )
    return ExitCode.OK if holds else ExitCode.FAIL
