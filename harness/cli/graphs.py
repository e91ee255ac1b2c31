"""``python -m harness graphs`` (CUDA): every case captured in a CUDA graph and replayed,
each replay held to the checks and the ledger; noise redrawn; no host sync in ``__call__``."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from harness.cli.emit import emit, usage_error
from harness.cli.exit_codes import ExitCode
from harness.cli.options import add_selection_options, run_options
from harness.gpu.shapes import DEFAULT_REPLAYS
from harness.progress import Progress
from harness.render.progress import progress_printer

if TYPE_CHECKING:  # the options are offered without importing the capture (torch)
    from harness.plugins.implementations import Implementation


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness graphs`` (``--seed``, ``--device``, ``--json``,
    ``--out-dir``, ``--quiet`` are the CLI's common options)."""
    parser.add_argument(
        "--replays",
        type=int,
        default=DEFAULT_REPLAYS,
        help=f"checked replays per graph, each on new inputs (default {DEFAULT_REPLAYS})",
    )
    add_selection_options(parser, verb="capture")
    parser.add_argument(
        "--no-sync-check", action="store_true", help="skip the host-synchronisation check"
    )


def _implementations(args: argparse.Namespace) -> list[Implementation]:
    from harness.plugins.implementations import (
        ImplementationError,
        parse_names,
        select_implementations,
    )

    implementations = select_implementations(parse_names(str(args.only)), args.impl)
    if not implementations:
        raise ImplementationError("no implementation to capture")
    return implementations


def command(args: argparse.Namespace) -> ExitCode:
    """``python -m harness graphs``: 0 when fixed is clean on every replay, the ledger holds,
    every graph redraws its noise and no implementation but legacy syncs; 1 otherwise;
    2 on bad usage, including a device that is not CUDA."""
    from harness.case import Case, CaseError
    from harness.gpu.graphs import capture_and_replay, replay_records, require_cuda
    from harness.gpu.host_sync import no_host_sync
    from harness.judgement import RedrawVerdict, SyncVerdict, judge_records
    from harness.pipeline.matrix import matrix_for
    from harness.plugins.implementations import ImplementationError
    from harness.render.graphs import graph_sections
    from harness.render.host_sync import sync_section

    options = run_options(args, require_observable=not args.case)
    device = options.device  # the run's one device: every case is moved there
    try:
        require_cuda(device, what="python -m harness graphs")
        if args.replays < 1:
            raise ValueError(f"--replays must be >= 1, got {args.replays}")
        implementations = _implementations(args)
        if args.case:
            cases = [Case.load(path).with_changes(device=device) for path in args.case]
        else:
            cases = matrix_for(options)
    except RuntimeError as error:
        return usage_error(f"{error} (run with --device cuda on a machine with a GPU)")
    except (ValueError, CaseError, ImplementationError) as error:
        return usage_error(str(error))
    progress: Progress = progress_printer(quiet=bool(args.quiet))
    started = time.perf_counter()
    results = []
    for index, case in enumerate(cases, start=1):
        progress(f"[graph {index}/{len(cases)}] {case.label()}")
        results.append(
            capture_and_replay(
                case,
                implementations,
                replays=args.replays,
                require_observable=not args.case,
            )
        )
    timing = {"graphs_s": round(time.perf_counter() - started, 3)}
    records = [record for result in results for record in replay_records(result.replays)]
    judgement = replace(
        judge_records(records, options=options),
        redraws=RedrawVerdict.of(results),
    )
    sections = graph_sections(judgement)
    if not args.no_sync_check:
        started = time.perf_counter()
        checks = []
        for case in cases:
            progress(f"[sync] {case.label()}")
            checks += [no_host_sync(case, implementation) for implementation in implementations]
        syncs = SyncVerdict.of(checks)
        judgement = replace(judgement, syncs=syncs)
        sections.insert(len(sections) - 1, sync_section(syncs))
        timing["sync_s"] = round(time.perf_counter() - started, 3)
    heading = (
        f"DSpark draft-sampler harness: CUDA graphs ({len(cases)} cases x {args.replays} "
        f"replays, {device})"
    )
    return emit(
        args,
        command="graphs",
        heading=heading,
        sections=sections,
        ok=judgement.ok,
        cases=[result.to_json() for result in results],
        timing=timing,
    )
