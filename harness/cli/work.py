"""``python -m harness work``: the work the fix eliminates, counted against the model
for the built-ins and counted only for ``--impl`` plug-ins, the pair (``--pair``,
default legacy,fixed) compared (and, with ``--timing``, the pair's time ratio)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from harness.cli.emit import UsageError, emit
from harness.cli.exit_codes import ExitCode
from harness.cli.options import (
    add_impl_option,
    add_isolate_option,
    add_pair_option,
    pair_implementations,
    run_options,
    selected_implementations,
)
from harness.defaults import BUILTIN_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness work`` (``--seed``, ``--device``, ``--json``,
    ``--out-dir``, ``--quiet`` are the CLI's common options)."""
    add_impl_option(parser, verb="also count the work of")
    add_isolate_option(parser)
    add_pair_option(
        parser,
        help_text="report the work BUGGY does beyond FIXED, and time this pair with --timing "
        "(default legacy,fixed)",
    )
    parser.add_argument(
        "--timing",
        action="store_true",
        help="add the A/B legacy/fixed time ratio at the production-like shape "
        "(and callgrind instruction counts where valgrind exists)",
    )
    parser.add_argument("--repeats", type=int, default=7, help="A/B timing repetitions (default 7)")
    parser.add_argument(
        "--hidden-size",
        type=int,
        default=None,
        help="hidden size of the timing shape (default 256: small, so the lm_head "
        "does not swamp the walk)",
    )
    parser.add_argument(
        "--no-callgrind", action="store_true", help="skip the callgrind instruction counts"
    )


def validate(args: argparse.Namespace) -> None:
    """``--repeats``, ``--hidden-size`` and the pair's names, before any work."""
    if args.repeats < 1:
        raise UsageError(f"--repeats must be >= 1, got {args.repeats}")
    if args.hidden_size is not None and args.hidden_size < 1:
        raise UsageError(f"--hidden-size must be >= 1, got {args.hidden_size}")
    reserved = {"op", "diff", "ratio", "one_walk"} & set(args.pair)
    if reserved:
        raise UsageError(f"--pair names {sorted(reserved)} are reserved words of the work JSON")


def command(args: argparse.Namespace) -> ExitCode:
    """``OK`` when the counts match the model and legacy's surplus is exactly one walk
    (and, with ``--timing``, the walk-only ratio is in ``WALK_RATIO_RANGE``)."""
    from harness.judge import judge
    from harness.measure.time_ratio import time_ratio
    from harness.measure.timing import PRODUCTION_HIDDEN
    from harness.pipeline.isolation import make_executor
    from harness.render.timing import timing_section
    from harness.render.work import work_section

    options = replace(run_options(args), stats=False)
    with make_executor(isolate=options.isolate) as executor:  # stopped before the report
        implementations = selected_implementations(args, BUILTIN_NAMES, executor=executor)
        pair = pair_implementations(implementations, options.roles.pair)
        judgement = judge([], implementations, options=options, executor=executor, work=True)
        assert judgement.work is not None  # asked for
        sections = [work_section(judgement.work)]
        if args.timing:
            timed = time_ratio(
                seed=options.seed,
                device=options.device,
                repeats=args.repeats,
                hidden_size=args.hidden_size or PRODUCTION_HIDDEN,
                callgrind=not args.no_callgrind,
                progress=options.progress,
                pair=pair,
                executor=executor,
            )
            judgement = replace(judgement, time_ratio=timed)
            sections.append(timing_section(timed))
    heading = f"DSpark draft-sampler harness: eliminated work (seed {args.seed}, {args.device})"
    return emit(
        args,
        command="work",
        heading=heading,
        sections=sections,
        ok=judgement.ok,
        timing=judgement.timing,
    )
