"""Command-line options that several sub-commands share, defined once."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.defaults import (
    BUILTIN_NAMES,
    DEFAULT_JOBS,
    DEFAULT_PAIR,
    DEFAULT_ROWS,
    DEFAULT_THREADS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_VERIFIER_NOISE,
    VerifierNoise,
)
from harness.options import Roles, RolesError, RunOptions, verifier_noise_of
from harness.pipeline.check_result import TIER_LABELS, Tier
from harness.render.progress import progress_printer

if TYPE_CHECKING:  # the options are offered without importing what runs them (torch)
    from harness.executor import Executor
    from harness.plugins.implementations import Implementation

T = TypeVar("T", int, float)


def add_impl_option(parser: argparse.ArgumentParser, *, verb: str = "add") -> None:
    """``--impl NAME=TARGET`` (repeatable): a class or block sampler function, by module or file."""
    parser.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help=(
            f"{verb} this sampler (repeatable). TARGET is module:Class, path/to/module.py[:Class] "
            "(default class DsparkDraftSampler; sglang.* imports are supplied when no sglang "
            "is installed), or module:function / file.py:function for a block sampler "
            "function; see docs/plugins.md"
        ),
    )


def add_selection_options(parser: argparse.ArgumentParser, *, verb: str) -> None:
    """``--case FILE`` (repeatable; default the standard matrix), ``--only NAMES`` and
    ``--impl``: which cases and which implementations a command runs."""
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a case JSON file (repeatable); default: the standard matrix",
    )
    parser.add_argument(
        "--only",
        default=",".join(BUILTIN_NAMES),
        metavar="NAMES",
        help=f"built-in implementations to {verb}, comma-separated (default: all three; "
        "none: only the --impl samplers)",
    )
    add_impl_option(parser, verb=f"also {verb}")


def add_rows_option(parser: argparse.ArgumentParser) -> None:
    """``--rows N``: the statistical oracle's rows per head kind (``RunOptions.oracle_rows``;
    checked with the memory they need, ``harness.cli.validate.check_oracle_run``)."""
    parser.add_argument(
        "--rows",
        type=int,
        default=DEFAULT_ROWS,
        metavar="N",
        help=f"the statistical oracle's rows per head kind (default {DEFAULT_ROWS})",
    )


def add_thorough_option(parser: argparse.ArgumentParser) -> None:
    """``--thorough``: the standard matrix plus production shapes."""
    parser.add_argument(
        "--thorough",
        action="store_true",
        help=(
            "add production shapes to the matrix: V 129280 and 151936, bf16 and fp16, "
            "bs 1 and 256, a longer life (minutes on a CPU; within --max-memory)"
        ),
    )


def comma_separated(
    convert: Callable[[str], T], *, what: str, minimum: T | None = None
) -> Callable[[str], tuple[T, ...]]:
    """An argparse ``type`` for ``"a,b,c"``: at least one value, each converted and, with
    ``minimum``, at least that."""

    def parse(text: str) -> tuple[T, ...]:
        try:
            values = tuple(convert(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} must be comma-separated numbers, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"at least one {what} value is needed")
        if minimum is not None and any(v < minimum for v in values):
            raise argparse.ArgumentTypeError(f"{what} must be >= {minimum}, got {text!r}")
        return values

    return parse


def _pair(text: str) -> tuple[str, str]:
    names = tuple(part.strip() for part in text.split(","))
    if len(names) != 2 or not all(names) or names[0] == names[1]:
        raise argparse.ArgumentTypeError(
            f"--pair needs two different names BUGGY,FIXED, got {text!r}"
        )
    return names[0], names[1]


def add_pair_option(
    parser: argparse.ArgumentParser,
    *,
    help_text: str = "hold BUGGY to the legacy divergence ledger against FIXED "
    "(default legacy,fixed)",
) -> None:
    """``--pair BUGGY,FIXED`` (default ``legacy,fixed``)."""
    parser.add_argument(
        "--pair", type=_pair, default=DEFAULT_PAIR, metavar="BUGGY,FIXED", help=help_text
    )


def add_role_options(parser: argparse.ArgumentParser, *, require: bool = True) -> None:
    """``--pair BUGGY,FIXED``, ``--expect-fail NAME`` (repeatable) and, with ``require``,
    ``--require``: what each implementation of a comparison is held to."""
    add_pair_option(parser)
    parser.add_argument(
        "--expect-fail",
        action="append",
        default=[],
        metavar="NAME",
        help="NAME must fail a lossless check for exit 0 (repeatable; CI guards over planted bugs)",
    )
    if not require:  # the statistical oracle has one verdict, so nothing to require
        return
    parser.add_argument(
        "--require",
        choices=TIER_LABELS,
        default=Tier.DROP_IN.label,
        help="what a plug-in must meet for exit 0 (default drop-in; built-in fixed is always "
        "held to drop-in)",
    )


def roles_from_args(args: argparse.Namespace) -> Roles:
    """The roles the role options describe (a command without some keeps their default)."""
    require = Tier.from_label(getattr(args, "require", Tier.DROP_IN))  # some have no --require
    return Roles(
        pair=getattr(args, "pair", DEFAULT_PAIR),
        expect_fail=tuple(getattr(args, "expect_fail", ())),
        require=require,
    )


def add_resume_option(parser: argparse.ArgumentParser) -> None:
    """``--resume``: reuse the records of an interrupted run of the same command."""
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the cases an interrupted run already finished (its journal in --out-dir)",
    )


def add_isolate_option(parser: argparse.ArgumentParser) -> None:
    """``--isolate``: each implementation in a worker process."""
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run each implementation in a worker process, so a crash is a recorded failure",
    )


def add_stats_option(parser: argparse.ArgumentParser) -> None:
    """``--no-stats``: skip the statistical oracle; every lossless verdict then says it
    rests on the checks alone. ``--verifiers``: the verifiers the oracle runs under
    (default: every one available here that runs at the report's rows)."""
    parser.add_argument(
        "--no-stats",
        action="store_true",
        help="skip the statistical oracle (lossless verdicts then read: checks only; "
        "statistical oracle not run)",
    )
    add_verifiers_option(parser, unnamed="every one available here but vllm-rejection")
    add_jobs_option(parser)


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    """``--jobs N``: the processes the statistical oracle's decodes take."""
    parser.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"processes the statistical oracle's decodes take, beside the cases and the "
        f"work where they run (default {DEFAULT_JOBS}; on the CPU with one thread and "
        "without --isolate; 1: all in this process). The report is the same",
    )


def verifier_noise(text: str) -> VerifierNoise:
    """``--verifier-noise``'s value, refused with the words it takes."""
    try:
        return verifier_noise_of(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_verifier_noise_option(parser: argparse.ArgumentParser) -> None:
    """``--verifier-noise shared|independent``: where the oracle's verifier draws from
    (``RunOptions.verifier_noise``; checked by argparse, before any work)."""
    parser.add_argument(
        "--verifier-noise",
        type=verifier_noise,
        choices=list(VerifierNoise),
        default=DEFAULT_VERIFIER_NOISE,
        metavar="{" + ",".join(VerifierNoise) + "}",
        help="where the oracle's verifier draws from: shared (default), each server's own "
        "plumbing, its drafter and verifier streams from one server seed; independent, "
        "streams of their own (a control)",
    )


def add_verifiers_option(parser: argparse.ArgumentParser, *, unnamed: str) -> None:
    """``--verifiers NAME[,NAME...]``: the oracle's verifiers by name (checked before any
    work, ``harness.cli.validate.check_verifiers``); not given, it is ``None`` (as
    ``RunOptions.verifiers``) and the command runs ``unnamed`` (its help's words)."""
    from harness.oracles.defaults import VERIFIER_NAMES

    listed = "; ".join(f"{name} ({needs})" for name, needs in VERIFIER_NAMES.items())
    parser.add_argument(
        "--verifiers",
        type=lambda text: tuple(part.strip() for part in text.split(",") if part.strip()),
        default=None,
        metavar="NAME[,NAME...]",
        help=f"run the statistical oracle under each of these: {listed} (default: {unnamed})",
    )
    add_verifier_noise_option(parser)


def run_options(args: argparse.Namespace, *, require_observable: bool = False) -> RunOptions:
    """The run's options, built once from the command line (an option a command does not
    offer keeps its default); ``require_observable`` when the cases are the standard
    matrix."""
    from harness.cli.validate import check_max_memory

    return RunOptions(
        seed=args.seed,
        device=args.device,
        time_limit_s=getattr(args, "time_limit", DEFAULT_TIME_LIMIT_S),
        isolate=bool(getattr(args, "isolate", False)),
        roles=roles_from_args(args),
        require_observable=require_observable,
        max_memory_bytes=check_max_memory(args.max_memory),
        stats=not getattr(args, "no_stats", False),
        verifiers=getattr(args, "verifiers", None),
        verifier_noise=getattr(args, "verifier_noise", DEFAULT_VERIFIER_NOISE),
        oracle_rows=getattr(args, "rows", DEFAULT_ROWS),
        thorough=bool(getattr(args, "thorough", False)),
        resume=bool(getattr(args, "resume", False)),
        threads=getattr(args, "threads", DEFAULT_THREADS) or None,
        jobs=getattr(args, "jobs", DEFAULT_JOBS),
        progress=progress_printer(quiet=args.quiet),
    )


def journal_path(out_dir: Path, *, command: str) -> Path:
    """Where a command keeps one line per finished case, under ``--out-dir``."""
    return out_dir / f"{command}.cases.jsonl"


def selected_implementations(
    args: argparse.Namespace, names: Sequence[str], *, executor: Executor | None = None
) -> list[Implementation]:
    """The built-ins ``names`` and every ``--impl`` of the command line, each plug-in
    loaded where ``executor`` runs its tasks: here when it runs them in this process (or
    none is given), else there only (``--isolate``: in its own worker)."""
    from harness.executor import InProcessExecutor
    from harness.pipeline.worker_only import worker_only
    from harness.plugins.implementations import parse_impl_spec, select_implementations

    if executor is None or isinstance(executor, InProcessExecutor):
        return select_implementations(names, args.impl, load=parse_impl_spec)
    return select_implementations(
        names, args.impl, load=functools.partial(worker_only, executor=executor)
    )


def pair_implementations(
    implementations: Sequence[Implementation], pair: tuple[str, str]
) -> tuple[Implementation, Implementation]:
    """The two implementations ``--pair`` names, in its order; a name that is neither a
    built-in nor an ``--impl`` is bad usage (``RolesError``)."""
    by_name = {i.name: i for i in implementations}
    missing = [name for name in pair if name not in by_name]
    if missing:
        raise RolesError(f"--pair names implementations not in the comparison: {missing}")
    return by_name[pair[0]], by_name[pair[1]]


def judged_implementations(
    args: argparse.Namespace, names: Sequence[str], *, roles: Roles, executor: Executor
) -> list[Implementation]:
    """The implementations (plug-ins loaded where ``executor`` runs them), checked against
    the roles they are held to; nothing to judge is bad usage."""
    implementations = selected_implementations(args, names, executor=executor)
    roles.validate([i.name for i in implementations])
    return implementations
