"""``python -m harness [report]``: the main job on the embedded default.

The standard matrix for every implementation (checks, verdicts, the divergence
ledger between the pair), the statistical oracle and the eliminated work, in one
report; ``report-power.png`` beside it when matplotlib is installed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.cli.emit import emit
from harness.cli.exit_codes import ExitCode
from harness.cli.options import (
    add_impl_option,
    add_isolate_option,
    add_resume_option,
    add_role_options,
    add_stats_option,
    add_thorough_option,
    journal_path,
    judged_implementations,
    run_options,
)
from harness.defaults import BUILTIN_NAMES
from harness.io.files import write_atomically
from harness.progress import Progress
from harness.render.figures import PLOT_EXTRA_HINT
from harness.render.sections import Figure, Section

POWER_CAPTION = "power of the statistical oracle per head kind: measured and predicted"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_option(parser)
    add_role_options(parser)
    add_thorough_option(parser)
    add_resume_option(parser)
    add_isolate_option(parser)
    add_stats_option(parser)
    parser.add_argument("--no-work", action="store_true", help="skip the eliminated-work section")


def command(args: argparse.Namespace) -> ExitCode:
    from harness.judge import judge
    from harness.pipeline.isolation import make_executor
    from harness.pipeline.matrix import matrix_for
    from harness.render.verdicts import judgement_sections

    options = run_options(args, require_observable=True)
    cases = matrix_for(options)
    with make_executor(isolate=options.isolate) as executor:  # stopped before the report
        implementations = judged_implementations(
            args, list(BUILTIN_NAMES), roles=options.roles, executor=executor
        )
        judgement = judge(
            cases,
            implementations,
            options=options,
            executor=executor,
            power=True,
            work=not args.no_work,
            journal=journal_path(args.out_dir, command="report"),
        )
    sections = judgement_sections(judgement)
    heading = (
        f"DSpark draft-sampler harness: standard matrix ({len(cases)} cases, "
        f"seed {args.seed}, {args.device})"
    )
    write_power_plot(args.out_dir, sections, progress=options.progress)
    return emit(args, command="report", heading=heading, sections=sections, judgement=judgement)


def write_power_plot(out_dir: Path, sections: list[Section], *, progress: Progress) -> None:
    """The statistical section's power curves as ``report-power.png``, when they ran and
    matplotlib (the ``plot`` extra) is installed; otherwise the section's evidence and
    the progress say the PNG was skipped."""
    section = next((s for s in sections if s.data.get("power_curves")), None)
    if section is None:
        return
    from harness.render.power_figure import power_curves_png

    path = out_dir / "report-power.png"
    png = power_curves_png(section.data["power_curves"])
    if png is None:
        note = f"{path.name} skipped: {PLOT_EXTRA_HINT}"
        section.append(note)
        progress(note)
        return
    write_atomically(path, png)
    section.append(Figure(path.name, caption=POWER_CAPTION))
    progress(f"written: {path}")
