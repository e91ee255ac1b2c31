"""``python -m harness repro``: write the smallest failing case to a file, or replay one.

With ``--out FILE``: find a failing case of the standard matrix (of ``--check NAME``
when given), shrink it and write it. With ``FILE``: replay it with its recorded
implementation (or the one ``--impl`` names) on ``--device`` (the run's one device,
whatever device the file names); exit 0 when that implementation now passes the
recorded check. A replay is no verdict on the implementation (no ``Judgement``): it
answers whether one recorded finding still stands; ``compare --case FILE`` judges the
implementation on that case.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.emit import UsageError
from harness.cli.exit_codes import ExitCode
from harness.cli.options import add_impl_option, run_options, selected_implementations
from harness.defaults import BUILTIN_NAMES, LEGACY

if TYPE_CHECKING:
    from harness.pipeline.support_scan import ScanRepro


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_option(parser)
    parser.add_argument("file", nargs="?", type=Path, help="a repro file to replay")
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="find, shrink and write a failing case here"
    )
    parser.add_argument(
        "--target", help="implementation to reproduce (default: the --impl given, else legacy)"
    )
    parser.add_argument(
        "--check",
        metavar="NAME",
        help="minimise a failure of this check (default: the first failing check)",
    )


def _replay(args: argparse.Namespace) -> ExitCode:
    """Replay a repro file with its recorded implementation, or the one ``--impl`` names;
    exit 0 when that implementation now passes."""
    from harness.pipeline import repro

    if args.out is not None:
        raise UsageError("give either a repro FILE to replay or --out FILE, not both")
    if len(args.impl) > 1:
        raise UsageError("replay takes at most one --impl (the implementation to replay)")
    from harness.pipeline.support_scan import is_scan_repro, read_scan_repro

    data = repro.read_repro_json(args.file)
    if is_scan_repro(data):
        return _replay_scan(args, read_scan_repro(data, path=args.file))
    recorded = repro.read_repro(args.file)
    spec = args.impl[0] if args.impl else recorded.spec
    implementation = repro.resolve_implementation(spec)
    options = run_options(args)
    case = recorded.case.with_changes(device=options.device)
    now = repro.outcome_of(case, implementation, options=options)
    identical = now == recorded.outcome
    passes = not now.fails(recorded.check)
    result = {
        "case": case.label(),
        "implementation": spec,
        "check": recorded.check,
        "identical": identical,
        "failing": now.failing,
        "passes": passes,
        "outcome": now.to_json(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"replayed {spec} on {case.label()}")
        same = "IDENTICAL to the recorded one" if identical else "DIFFERS from the recorded one"
        print(f"result: {same}")
        for failure in now.failures:
            print(f"  FAIL {failure.name}: {failure.detail}")
        if passes:
            what = f"the {recorded.check} check" if recorded.check else "every check"
            print(f"  the implementation passes {what} on this case now")
    return ExitCode.OK if passes else ExitCode.FAIL


def _replay_scan(args: argparse.Namespace, recorded: ScanRepro) -> ExitCode:
    """Replay a support-scan hit: the same call at the same counter; exit 0 when it no
    longer drafts outside the support."""
    from harness.pipeline import repro
    from harness.pipeline.support_scan import replay_scan_repro

    spec = args.impl[0] if args.impl else recorded.spec
    now = replay_scan_repro(recorded, repro.resolve_implementation(spec))
    hit = recorded.hit
    result = {
        "point": recorded.point.to_json(),
        "implementation": spec,
        "hit": hit.__dict__,
        "identical": now.identical,
        "hit_count": now.hit_count,
        "passes": now.passes,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"replayed {spec} on the scan point {recorded.point.label()} at counter {hit.counter}"
        )
        same = "IDENTICAL to the recorded one" if now.identical else "DIFFERS from the recorded one"
        print(f"result: {same}")
        for found in now.hits:
            print(
                f"  FAIL support: row {found.row} step {found.step} drafted token {found.token}; "
                f"only {found.allowed} may be drafted"
            )
        if now.passes:
            print("  the implementation drafts inside the support on this call now")
    return ExitCode.OK if now.passes else ExitCode.FAIL


def command(args: argparse.Namespace) -> ExitCode:
    from harness.pipeline import repro
    from harness.pipeline.checks import CHECK_TIERS
    from harness.pipeline.matrix import standard_matrix
    from harness.plugins.implementations import builtin_implementations

    if args.file is not None:
        return _replay(args)
    if args.out is None:
        raise UsageError("repro needs a FILE to replay or --out FILE to write one")
    if args.check is not None and args.check not in CHECK_TIERS:
        raise UsageError(f"--check must be one of {sorted(CHECK_TIERS)}, got {args.check!r}")
    implementations = selected_implementations(args, [])
    target = args.target or (implementations[0].name if len(implementations) == 1 else LEGACY)
    chosen = [i for i in implementations if i.name == target]
    if not chosen:
        if target not in BUILTIN_NAMES:
            raise UsageError(f"--target {target!r} is neither built in nor given with --impl")
        chosen = builtin_implementations((target,))
    found = repro.find_smallest_failure(
        standard_matrix(seed=args.seed, device=args.device),
        chosen[0],
        check=args.check,
        options=run_options(args),
    )
    if found is None:
        what = f"fails {args.check}" if args.check else "fails"
        print(f"{target}: no case in the standard matrix {what}; nothing written")
        return ExitCode.OK
    case, outcome = found
    repro.write_repro(
        args.out, case=case, implementation=chosen[0], outcome=outcome, check=args.check
    )
    if args.json:
        print(
            json.dumps(
                {"file": str(args.out), "case": case.to_json_dict(), "outcome": outcome.to_json()},
                indent=2,
            )
        )
    else:
        print(f"{target} fails on {case.label()}")
        for failure in outcome.failures:
            print(f"  FAIL {failure.name}: {failure.detail}")
        print(f"written: {args.out} (replay with: python -m harness repro {args.out})")
    return ExitCode.FAIL
