"""``python -m harness compare``: chosen cases and implementations side by side.

Every lossless verdict is the report's: the per-call checks on the chosen cases and
the statistical oracle at the report's defaults on every implementation compared
(``--no-stats`` skips the oracle, and each verdict line then says so).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harness.cli.emit import emit
from harness.cli.exit_codes import ExitCode
from harness.cli.options import (
    add_isolate_option,
    add_resume_option,
    add_role_options,
    add_rows_option,
    add_selection_options,
    add_stats_option,
    add_thorough_option,
    journal_path,
    judged_implementations,
    run_options,
)
from harness.render.sections import Section
from harness.render.tables import table

if TYPE_CHECKING:
    from harness.plugins.implementations import Implementation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_options(parser, verb="run")
    add_role_options(parser)
    add_thorough_option(parser)
    add_resume_option(parser)
    add_isolate_option(parser)
    add_stats_option(parser)
    add_rows_option(parser)


def validate(args: argparse.Namespace) -> None:
    """The oracle's ``--rows`` and the memory its run needs, as ``stats`` checks them."""
    from harness.cli.validate import check_oracle_run

    if not args.no_stats:
        check_oracle_run(args)


def command(args: argparse.Namespace) -> ExitCode:
    from harness.case import Case
    from harness.judge import judge
    from harness.pipeline.isolation import make_executor
    from harness.pipeline.matrix import matrix_for
    from harness.plugins.implementations import parse_names
    from harness.render.verdicts import judgement_sections

    options = run_options(args, require_observable=not args.case)
    # on --device, whatever device a case file names: judge() moves each case there
    cases = [Case.load(path) for path in args.case] if args.case else matrix_for(options)
    with make_executor(isolate=options.isolate) as executor:  # stopped before the report
        implementations = judged_implementations(
            args, parse_names(args.only), roles=options.roles, executor=executor
        )
        judgement = judge(
            cases,
            implementations,
            options=options,
            executor=executor,
            journal=journal_path(args.out_dir, command="compare"),
        )
    sections = [*judgement_sections(judgement), provenance_section(implementations)]
    heading = f"DSpark draft-sampler harness: compare ({len(cases)} cases, {args.device})"
    return emit(args, command="compare", heading=heading, sections=sections, judgement=judgement)


def provenance_section(implementations: list[Implementation]) -> Section:
    """Where each sampler came from: its spec, the server era its module was loaded for,
    the calling convention it was built in and what the adapter works around in it
    (docs/plugins.md)."""
    from harness.upstream.dispatch import provenance

    rows = [provenance(implementation) for implementation in implementations]
    text = table(
        ("implementation", "spec", "kind", "era", "convention"),
        [
            (row["name"], row["spec"], row["kind"], row["era"] or "-", row["convention"])
            for row in rows
        ],
    )
    brief = table(  # the specs, wide, are in the whole evidence
        ("implementation", "kind", "era", "convention"),
        [(row["name"], row["kind"], row["era"] or "-", row["convention"]) for row in rows],
    )
    adapted = [
        f"{row['name']}: the harness's adapter works around: {adaptation}"
        for row in rows
        for adaptation in row["adaptations"]
    ]
    return Section(
        title="Implementations",
        ok=True,
        verdict="where each sampler came from (era: the sglang its module was loaded with)",
        text="\n".join([text, *adapted]),
        data={"implementations": rows},
        brief=("\n".join([brief, *adapted]),),
    )
