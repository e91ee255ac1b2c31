"""``python -m harness sweep``: the scaling sweep of the pair (``--pair``, default
legacy,fixed; ``--impl`` adds plug-ins it may name) over bs, gamma and V, resumable."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.emit import UsageError, emit, usage_error
from harness.cli.exit_codes import ExitCode
from harness.cli.options import add_impl_option, add_pair_option, comma_separated, run_options
from harness.render.progress import progress_printer

if TYPE_CHECKING:  # the options are offered without importing the sweep (torch)
    from harness.measure.sweep import SweepConfig

POSITIVE_INTS = comma_separated(int, what="grid values", minimum=1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness sweep`` (--seed, --device, --json come from the CLI)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory of the points file, CSV, JSON and plot (default: OUT_DIR/sweep)",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny grid (seconds; for tests)")
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the finished points of an earlier run (default: on)",
    )
    parser.add_argument("--bs", type=POSITIVE_INTS, help="batch sizes, e.g. 8,16,32")
    parser.add_argument("--gamma", type=POSITIVE_INTS, help="block lengths, e.g. 2,4,8")
    parser.add_argument("--vocab", type=POSITIVE_INTS, help="vocabulary sizes, e.g. 8192,32768")
    parser.add_argument("--repeats", type=int, help="alternating repetitions per point")
    parser.add_argument("--hidden-size", type=int, help="hidden size H of every point")
    parser.add_argument("--rank", type=int, help="Markov rank r of every point")
    add_impl_option(parser, verb="load")
    add_pair_option(
        parser,
        help_text="time BUGGY against FIXED at every point; either may be an --impl "
        "(default legacy,fixed)",
    )


def config_from_args(args: argparse.Namespace) -> tuple[SweepConfig, bool]:
    """The grid the options ask for, and whether the exponent expectation applies."""
    from harness.measure.sweep import DEFAULT_CONFIG, QUICK_CONFIG, SweepConfig

    base = QUICK_CONFIG if args.quick else DEFAULT_CONFIG
    changes = {
        "bs": args.bs,
        "gamma": args.gamma,
        "vocab": args.vocab,
        "repeats": args.repeats,
        "hidden_size": args.hidden_size,
        "markov_rank": args.rank,
    }
    fields = asdict(base)
    fields.update({k: v for k, v in changes.items() if v is not None})
    fields.update(
        seed=args.seed,
        device=args.device,
        threads=args.threads or None,
        pair=tuple(args.pair),
        plugins=tuple(args.impl),
    )
    config = SweepConfig(**fields)
    default_grid = not args.quick and all(
        changes[k] is None for k in ("bs", "gamma", "vocab", "hidden_size", "markov_rank")
    )
    return config, default_grid


def validate(args: argparse.Namespace) -> None:
    """The grid, and the memory estimate of its largest points, before any point runs."""
    import torch

    from harness.cli.validate import check_max_memory
    from harness.measure.sweep import SweepError
    from harness.pipeline import memory

    try:
        config, _ = config_from_args(args)
    except SweepError as error:
        raise UsageError(str(error)) from None
    max_memory_bytes = check_max_memory(args.max_memory)
    for bs, gamma, vocab in config.points():
        estimate = memory.sampler_call_bytes(
            bs=bs,
            max_bs=bs,
            gamma=gamma,
            vocab=vocab,
            hidden=config.hidden_size,
            rank=config.markov_rank,
            dtype_bytes=torch.float32.itemsize,
        )
        memory.check_fits(
            estimate,
            what=f"sweep point bs={bs} gamma={gamma} V={vocab}",
            device=args.device,
            max_memory_bytes=max_memory_bytes,
        )


def command(args: argparse.Namespace) -> ExitCode:
    """``OK`` when done (and, on the default grid, the fixed sampler's walk-only exponent
    lies in ``harness.measure.sweep.EXPONENT_RANGE``); ``FAIL`` otherwise; ``USAGE`` on a
    bad grid."""
    from harness.judgement import Judgement
    from harness.measure.sweep import (
        SweepError,
        run_sweep,
        summarise,
        sweep_pair,
        write_outputs,
    )
    from harness.measure.timing import TimingError
    from harness.render.sweep import sweep_png, sweep_section

    progress = progress_printer(quiet=args.quiet)
    try:
        config, checked = config_from_args(args)
        sweep_pair(config)  # a bad --impl or --pair is bad usage before anything is written
        out_dir = args.out or Path(args.out_dir) / "sweep"
        records = run_sweep(config, out_dir=out_dir, resume=args.resume, progress=progress)
    except SweepError as error:
        return usage_error(str(error))
    except TimingError as error:  # a sampler of the pair raised: finished points are kept
        print(f"sweep failed: {error}", file=sys.stderr)
        return ExitCode.FAIL
    summary = summarise(records, clock=config.clock, checked=checked)
    png = sweep_png(config=config, records=records, summary=summary)
    paths = write_outputs(out_dir=out_dir, config=config, records=records, summary=summary, png=png)
    section = sweep_section(summary, config=config, paths=paths)
    heading = (
        f"DSpark draft-sampler harness: scaling sweep ({len(records)} points, {config.device})"
    )
    judgement = Judgement.of_parts(run_options(args), scaling=summary)
    return emit(args, command="sweep", heading=heading, sections=[section], ok=judgement.ok)
