"""``python -m harness releases``: every released DSpark sampler judged unchanged from its
wheel (``harness.upstream.releases``), one process per release, and the advisory.

The options are checked before anything heavy is imported: the version selections
(``0.5.19,0.5.21-0.5.23``; ``none``; a range from low to high that holds a known
release; something to judge), ``--jobs``, the executor. Exit 0 when every
selected release has a row (a verdict, or the reason it is not judged); 1 when a
release's task gave no answer (its row says why).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from harness.cli.emit import UsageError, emit
from harness.cli.exit_codes import ExitCode
from harness.cli.options import add_impl_option, add_resume_option
from harness.defaults import JUNCTION_ROWS, MIN_JUNCTION_ROWS
from harness.upstream.releases.eras import (
    ERAS,
    FIRST_WITH_DSPARK,
    VLLM_LIFE_ROWS,
    known_versions,
)
from harness.upstream.releases.wheels import (
    DEFAULT_CACHE,
    NotFetched,
    index_versions,
    parse_selection,
    select,
    version_key,
)

PACKAGES = ("sglang", "vllm")
_VERSION = r"\d+(\.\d+)*(\.?post\d+)?"
_PART = re.compile(rf"^{_VERSION}(-{_VERSION})?$")


def default_selection(package: str) -> tuple[str, ...]:
    """The first and the last release of each of the package's eras."""
    ends = [v for era in ERAS if era.package == package for v in (era.first, era.last)]
    return tuple(sorted(dict.fromkeys(ends), key=version_key))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for package in PACKAGES:
        parser.add_argument(
            f"--{package}",
            metavar="VERSIONS",
            help=f"{package} releases: comma-separated versions and ranges (A-B: every "
            f"known release from A to B), or none (default: the first and last release "
            f"of each era: {','.join(default_selection(package))})",
        )
    parser.add_argument(
        "--all",
        action="store_true",
        help="every release with DSpark the package index lists (sglang from "
        f"{FIRST_WITH_DSPARK['sglang']}, vLLM from {FIRST_WITH_DSPARK['vllm']}), "
        "found with pip index versions",
    )
    parser.add_argument(
        "--wheel-dir",
        type=Path,
        help="an offline wheel cache: wheels are read from it and never fetched "
        f"(default: fetch into {DEFAULT_CACHE})",
    )
    parser.add_argument(
        "--scan-triples",
        type=int,
        default=4096,
        help="support-scan triples per point and release (12 points; 0: no scan; default 4096)",
    )
    parser.add_argument(
        "--life-rows",
        type=int,
        metavar="N",
        help="judged rows a request state of each row's life across the junction asks for "
        f"(at least {MIN_JUNCTION_ROWS}; default: the era's, {JUNCTION_ROWS:,}, or "
        f"{VLLM_LIFE_ROWS} on a vLLM release, whose drafter, batch building and verifier "
        "run under Triton's interpreter: there the full depth takes minutes a row)",
    )
    parser.add_argument(
        "--life-only",
        action="store_true",
        help="judge each release's life across the junction of its drafter and its "
        "verifier alone (no matrix, oracle or scan): what a life finding's repro replays",
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="releases judged at once, each in its own process"
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where the releases' processes run: local processes (default) or a Ray cluster",
    )
    parser.add_argument(
        "--ray-address", help="the Ray cluster to join (default: start a local one)"
    )
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 even when a judged release is not lossless: a sweep that only "
        "reports (a sweep that judged nothing, or whose task gave no answer, still exits 1)",
    )
    add_resume_option(parser)
    add_impl_option(parser, verb="also judge (one row each, in its own process)")


def _none(text: str | None) -> bool:
    return text is not None and text.strip() == "none"


def _checked_selection(text: str, *, option: str) -> tuple[str, ...]:
    if _none(text):
        return ()
    parts = parse_selection(text)
    bad = [part for part in parts if not _PART.match(part)]
    if bad or not parts:
        raise UsageError(
            f"{option}: expected versions and ranges like 0.5.19,0.5.21-0.5.23 or none; "
            f"got {', '.join(bad) or repr(text)}"
        )
    for part in parts:
        low, dash, high = part.partition("-")
        if dash and version_key(low) > version_key(high):
            raise UsageError(
                f"{option}: the range {part} runs backwards; write it from the lower "
                f"version to the higher: {high}-{low}"
            )
    return parts


def validate(args: argparse.Namespace) -> None:
    """Refuse bad options before anything heavy is imported."""
    for package in PACKAGES:
        text = getattr(args, package)
        if text is not None:
            _checked_selection(text, option=f"--{package}")
    if not args.all and not args.impl and all(_none(getattr(args, p)) for p in PACKAGES):
        raise UsageError("nothing to judge: --sglang none and --vllm none, and no --impl")
    if args.all and any(getattr(args, p) is not None for p in PACKAGES):
        raise UsageError("--all judges every release; give it without --sglang/--vllm")
    if args.scan_triples < 0:
        raise UsageError(f"--scan-triples must be 0 or more, got {args.scan_triples}")
    if args.life_rows is not None and args.life_rows < MIN_JUNCTION_ROWS:
        raise UsageError(
            f"--life-rows must be {MIN_JUNCTION_ROWS} or more (rows a request state), "
            f"got {args.life_rows}"
        )
    if args.ray_address and args.executor != "ray":
        raise UsageError("--ray-address needs --executor ray")
    if args.executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise UsageError("--executor ray needs Ray: pip install 'dspark-sampler-harness[ray]'")
    if args.wheel_dir is not None and not args.wheel_dir.is_dir():
        raise UsageError(f"--wheel-dir {args.wheel_dir}: no such folder")
    if args.device != "cpu":
        raise UsageError(f"releases runs on the CPU only; got --device {args.device}")


def chosen_versions(args: argparse.Namespace, package: str) -> tuple[tuple[str, ...], str]:
    """The package's releases to judge, and a note when discovery fell back to the table."""
    known = known_versions(package)
    if args.all:
        try:
            listed = index_versions(package)
        except NotFetched as error:
            return known, f"{package}: the era table's releases ({error})"
        first = version_key(FIRST_WITH_DSPARK[package])
        return tuple(v for v in listed if version_key(v) >= first), ""
    text = getattr(args, package)
    if text is None:
        return default_selection(package), ""
    chosen = select(_checked_selection(text, option=f"--{package}"), known=known)
    if not _none(text) and not chosen:
        raise UsageError(
            f"--{package} {text}: no known release in that range "
            f"(known: {known[0]} to {known[-1]}); give versions, ranges or none"
        )
    return chosen, ""


def command(args: argparse.Namespace) -> ExitCode:
    from harness.releases.advisory import advisory_json, advisory_verdict
    from harness.releases.run import run_sweep
    from harness.releases.sweep import ReleaseTask
    from harness.render.progress import progress_printer
    from harness.render.releases import releases_section

    started = time.perf_counter()
    cache = args.wheel_dir or DEFAULT_CACHE
    tasks, notes = [], []
    for package in PACKAGES:
        versions, note = chosen_versions(args, package)
        notes += [note] if note else []
        tasks += [
            ReleaseTask(
                package=package,
                version=v,
                cache=str(cache),
                offline=args.wheel_dir is not None,
                seed=args.seed,
                scan_triples=args.scan_triples,
                life_only=args.life_only,
                life_rows=args.life_rows,
            )
            for v in versions
        ]
    tasks += [
        ReleaseTask(
            package="impl",
            version=spec,
            cache=str(cache),
            offline=True,
            seed=args.seed,
            scan_triples=args.scan_triples,
            life_only=args.life_only,
            life_rows=args.life_rows,
        )
        for spec in args.impl
    ]
    sweep = run_sweep(
        tasks,
        jobs=args.jobs,
        executor=args.executor,
        ray_address=args.ray_address,
        out_dir=args.out_dir,
        resume=args.resume,
        progress=progress_printer(quiet=args.quiet),
    )
    advisory = advisory_json(sweep.rows)
    verdict = advisory_verdict(sweep.rows, unanswered=sweep.unanswered, exit_zero=args.exit_zero)
    section = releases_section(
        advisory["releases"],  # type: ignore[arg-type]
        advisory["advisories"],  # type: ignore[arg-type]
        verdict=verdict,
    )
    for note in notes:
        section.append(f"discovery: {note}")
    return emit(
        args,
        command="releases",
        heading=f"DSpark draft-sampler harness: releases (seed {args.seed}, {args.jobs} jobs)",
        sections=[section],
        ok=verdict.ok,
        said=verdict.line(),
        top_level=advisory,
        timing={"releases_s": round(time.perf_counter() - started, 3)},
    )
