"""``python -m harness scan``: the support scan (``harness.pipeline.support_scan``).

Every implementation (``--only``, default ``fixed``, plus each ``--impl``) is driven
over ``--triples`` (row, step, counter) triples per point, at every head kind x dtype x
row pattern, on degenerate rows where exactly one token may be drafted; then each is
probed on NaN and +-inf rows under the documented rule (docs/numerics.md). Any hit is
a lossless failure: its first hit is written to ``OUT_DIR/scan-repro-NAME.json``, which
``python -m harness repro FILE`` replays bit for bit. Exit 0 when no implementation
hits (or every one that hits is named with ``--expect-fail``), 1 otherwise, 2 on bad
usage.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.emit import UsageError
from harness.cli.exit_codes import ExitCode
from harness.cli.names import check_known
from harness.cli.options import add_impl_option
from harness.defaults import DTYPE_NAMES, FIXED

if TYPE_CHECKING:  # the work's modules import torch: they load when the scan runs
    from harness.judgement import ScanVerdict
    from harness.pipeline.support_scan import PointResult, RuleOutcome, ScanPlan
    from harness.plugins.implementations import Implementation
    from harness.render.sections import Section

DEFAULT_TRIPLES = 1 << 18  # per point: 12 points, about 3.1e6 triples per implementation
DEFAULT_BS = 1 << 14
TITLE = "Support scan (docs/upstream.md, 'The scan')"


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_option(parser, verb="also scan")
    parser.add_argument(
        "--only", default=FIXED, metavar="NAMES",
        help=f"built-in implementations to scan (default {FIXED})",
    )  # fmt: skip
    parser.add_argument(
        "--triples", type=int, default=DEFAULT_TRIPLES,
        help=f"(row, step, counter) triples per point (default {DEFAULT_TRIPLES})",
    )  # fmt: skip
    parser.add_argument("--bs", type=int, default=DEFAULT_BS, help="rows per call")
    parser.add_argument("--gamma", type=int, default=4, help="steps per call (default 4)")
    parser.add_argument("--vocab", type=int, default=4, help="vocabulary size V (default 4)")
    parser.add_argument(
        "--heads", type=_names, default=None,
        metavar="KIND[,KIND...]", help="head kinds (default: every kind)",
    )  # fmt: skip
    parser.add_argument(
        "--dtypes", type=_names, default=("float32", "bfloat16"),
        metavar="DTYPE[,DTYPE...]", help="model dtypes (default float32,bfloat16)",
    )  # fmt: skip
    parser.add_argument(
        "--patterns", type=_names, default=None, metavar="PATTERN[,PATTERN...]",
        help="row patterns (default: every pattern)",
    )  # fmt: skip
    parser.add_argument(
        "--expect-fail", action="append", default=[], metavar="NAME",
        help="an implementation that must hit (repeatable); exit 0 only if it does",
    )  # fmt: skip


def validate(args: argparse.Namespace) -> None:
    """The grid's sizes and ``--dtypes``, before any work (head kinds and row patterns,
    named where the work lives, when the plan is made)."""
    for name in ("triples", "bs", "gamma", "vocab"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.vocab < 2:
        raise UsageError(f"--vocab must be >= 2 (two finite logits), got {args.vocab}")
    check_known(args.dtypes, DTYPE_NAMES, option="--dtypes", what="dtype")


def _plan(args: argparse.Namespace) -> ScanPlan:
    from harness.pipeline.support_scan import RowPattern, ScanPlan
    from reference import HEAD_KINDS

    heads = HEAD_KINDS if args.heads is None else args.heads
    known_patterns = [p.value for p in RowPattern]
    pattern_names = known_patterns if args.patterns is None else args.patterns
    check_known(heads, HEAD_KINDS, option="--heads", what="head kind")
    check_known(pattern_names, known_patterns, option="--patterns", what="row pattern")
    patterns = tuple(RowPattern(p) for p in pattern_names)
    return ScanPlan(
        head_kinds=tuple(heads),
        dtypes=tuple(args.dtypes),
        patterns=patterns,
        bs=args.bs,
        gamma=args.gamma,
        vocab_size=args.vocab,
        triples_per_point=args.triples,
        seed=args.seed,
    )


def _results_rows(results: list[PointResult]) -> list[list[str]]:
    rows = []
    for r in results:
        first = (
            f"counter {r.hits[0].counter} row {r.hits[0].row} step {r.hits[0].step}: "
            f"token {r.hits[0].token} (only {r.hits[0].allowed} may be)"
            if r.hits
            else "-"
        )
        rows.append(
            [
                r.implementation,
                f"{r.point.head_kind}/{r.point.dtype}/{r.point.pattern.value}",
                f"{r.triples:.3g}",
                "ERROR" if r.error else str(r.hit_count),
                r.error or first,
            ]
        )
    return rows


def _rule_rows(name: str, outcomes: tuple[RuleOutcome, ...]) -> list[list[str]]:
    return [
        [
            name,
            o.rule.value,
            "ERROR" if o.error else ("holds" if o.holds else "VIOLATED"),
            o.error or f"{o.violations} of {o.draws} draws; tokens {list(o.tokens_seen)}",
        ]
        for o in outcomes
    ]


def _scan_verdict(name: str, results: list[PointResult]) -> ScanVerdict:
    """``name``'s scan as its verdict takes it: its first hit, else the first point that
    raised (neither: clean)."""
    from harness.judgement import ScanVerdict
    from harness.releases.versions import scan_findings

    raised = [f"support scan raised: {r.error}" for r in results if r.error is not None]
    return ScanVerdict(name, next(iter([*scan_findings(results), *raised]), ""))


def run_scan(
    implementations: list[Implementation],
    plan: ScanPlan,
    *,
    out_dir: Path,
    expect_fail: set[str],
    quiet: bool,
) -> Section:
    """Scan every implementation over the plan, probe the non-finite rule, write repros;
    the section's ok is the judgement of the scans, each held to its role."""
    from harness.judgement import Judgement
    from harness.options import Roles, RunOptions
    from harness.pipeline.repro import implementation_spec
    from harness.pipeline.support_scan import (
        first_hit_tokens,
        nonfinite_behaviour,
        scan_point,
        tokens_digest,
        write_scan_repro,
    )
    from harness.render.progress import progress_printer
    from harness.render.sections import Section
    from harness.render.tables import table

    progress = progress_printer(quiet=quiet)
    results: list[PointResult] = []
    repros: dict[str, str] = {}
    rules: dict[str, tuple[RuleOutcome, ...]] = {}
    for impl in implementations:
        mine = [scan_point(impl, point, progress=progress) for point in plan.points()]
        results += mine
        hit = next((r for r in mine if r.hits), None)
        if hit is not None:
            path = out_dir / f"scan-repro-{impl.name}.json"
            tokens = first_hit_tokens(impl, hit.point, hit.hits[0])
            write_scan_repro(
                path,
                implementation_spec=implementation_spec(impl),
                point=hit.point,
                hit=hit.hits[0],
                digest=tokens_digest(tokens),
            )
            repros[impl.name] = str(path)
            progress(f"written: {path} (replay with: python -m harness repro {path})")
        rules[impl.name] = nonfinite_behaviour(impl)
    hitting = {r.implementation for r in results if not r.clean}
    names = [impl.name for impl in implementations]
    scans = [
        _scan_verdict(name, [r for r in results if r.implementation == name]) for name in names
    ]
    roles = Roles(expect_fail=tuple(sorted(expect_fail)))
    ok = Judgement.of_parts(RunOptions(roles=roles)).with_scans(scans).ok
    verdicts = []
    for name in names:
        mine = [r for r in results if r.implementation == name]
        covered = sum(r.triples for r in mine)
        hits = sum(r.hit_count for r in mine)
        word = (
            "clean" if name not in hitting else f"NOT lossless: {hits} drafts outside the support"
        )
        expected = " (expected)" if name in expect_fail and name in hitting else ""
        missing = " UNEXPECTED: expected to hit" if name in expect_fail - hitting else ""
        verdicts.append(f"{name} {word}{expected}{missing} in {covered:.3g} triples")
    verdict = (
        f"support scan ({len(list(plan.points()))} points x {plan.triples_per_point:.3g} "
        f"triples): " + "; ".join(verdicts)
    )
    text = "\n".join(
        [
            f"bound: each implementation covers {plan.triples:.3g} (row, step, counter) triples "
            f"at bs={plan.bs}, gamma={plan.gamma}, V={plan.vocab_size}; a defect that drafts "
            f"outside the support at rate below about {3 / max(plan.triples, 1):.2g} per triple "
            "is likely missed (3/n, 95%)",
            "",
            table(["impl", "point", "triples", "hits", "first hit"], _results_rows(results)),
            *(f"  repro {name}: {path}" for name, path in repros.items()),
            "",
            "non-finite logits under the documented rule (docs/numerics.md):",
            table(
                ["impl", "rule", "verdict", "seen"],
                [row for name, outcomes in rules.items() for row in _rule_rows(name, outcomes)],
            ),
        ]
    )
    data = {
        "plan": {
            "head_kinds": list(plan.head_kinds),
            "dtypes": list(plan.dtypes),
            "patterns": [p.value for p in plan.patterns],
            "bs": plan.bs,
            "gamma": plan.gamma,
            "vocab_size": plan.vocab_size,
            "triples_per_point": plan.triples_per_point,
            "triples_per_implementation": plan.triples,
        },
        "results": [
            {
                "implementation": r.implementation,
                "point": r.point.to_json(),
                "triples": r.triples,
                "hit_count": r.hit_count,
                "hits": [h.__dict__ for h in r.hits],
                "error": r.error,
            }
            for r in results
        ],
        "repros": repros,
        "nonfinite": {
            name: [
                {
                    "rule": o.rule.name,
                    "holds": o.holds,
                    "violations": o.violations,
                    "draws": o.draws,
                    "tokens_seen": list(o.tokens_seen),
                    "error": o.error,
                }
                for o in outcomes
            ]
            for name, outcomes in rules.items()
        },
        "ok": ok,
    }
    return Section(title=TITLE, ok=ok, verdict=verdict, text=text, data=data)


def command(args: argparse.Namespace) -> ExitCode:
    from harness.case import CaseError
    from harness.plugins.implementations import parse_names, select_implementations
    from harness.render.report import Report, emit_report

    if args.device != "cpu":
        raise UsageError(f"scan runs the samplers' CPU paths only; got --device {args.device}")
    plan = _plan(args)
    try:
        implementations = select_implementations(parse_names(args.only), args.impl)
    except CaseError as error:
        raise UsageError(str(error)) from None
    names = {impl.name for impl in implementations}
    stray = set(args.expect_fail) - names
    if stray:
        raise UsageError(f"--expect-fail names {sorted(stray)}, which are not scanned")
    started = time.perf_counter()
    section = run_scan(
        implementations,
        plan,
        out_dir=args.out_dir,
        expect_fail=set(args.expect_fail),
        quiet=args.quiet,
    )
    report = Report(
        command="scan",
        seed=args.seed,
        device=args.device,
        heading=f"DSpark draft-sampler harness: support scan (seed {args.seed}, {args.device})",
        ok=section.ok,
        sections=[section],
        timing={"scan_s": round(time.perf_counter() - started, 3)},
    )
    ok = emit_report(report, out_dir=args.out_dir, as_json=args.json, long=args.long)
    return ExitCode.OK if ok else ExitCode.FAIL
