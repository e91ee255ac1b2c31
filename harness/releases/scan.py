"""A release row's support scan, run in a process beside the row's matrix: its first hit
and what it did not cover, in words (docs/upstream.md, "The scan")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.pipeline.support_scan import PointResult, ScanPlan
    from harness.plugins.implementations import Implementation

SCAN_CLASS = "support scan"  # a draft outside the support (docs/upstream.md, "The scan")


def support_scan(
    implementation: Implementation, *, seed: int, triples: int
) -> tuple[str, list[str]]:
    """The support scan at ``triples`` a point (0: none) and ``seed``: its first hit in
    words (empty: none, or no scan asked for), and
    what it did not cover: points that did not run (by reason) and a batch cut by the
    implementation's convention (``Convention.scan_batch``)."""
    if not triples:
        return "", []
    from harness.pipeline.support_scan import full_plan, scan_point
    from harness.releases.versions import scan_findings
    from harness.upstream.dispatch import convention_of

    batch = convention_of(implementation.sampler_class).scan_batch
    asked = full_plan(triples_per_point=triples, seed=seed)
    plan = asked if batch is None else replace(asked, bs=batch)
    results = [scan_point(implementation, point) for point in plan.points()]
    found = scan_findings(results)
    hit = found[0].removeprefix(f"{SCAN_CLASS}: ") if found else ""
    return hit, scan_not_covered(results, plan=plan, default=asked)


def scan_not_covered(
    results: Sequence[PointResult], *, plan: ScanPlan, default: ScanPlan
) -> list[str]:
    """The support scan's gaps in words: the points that did not run, by reason, and
    the triples a point covered where its batch is smaller than the default plan's."""
    lines = []
    reasons: dict[str, int] = {}
    for result in results:
        if result.error is not None:
            reasons[result.error] = reasons.get(result.error, 0) + 1
    lines += [
        f"the support scan: {n} of {len(results)} points not run ({why})"
        for why, n in reasons.items()
    ]
    ran, full = plan.triples // len(results), default.triples // len(results)
    if plan.bs < default.bs and ran < full:
        lines.append(
            f"the support scan at {ran} triples per point (bs={plan.bs}, gamma={plan.gamma}, "
            f"{ran // (plan.bs * plan.gamma)} call(s) a point; the default batch, "
            f"bs={default.bs}, covers {full}): the sampler's scan batch here "
            "(its kernels under Triton's interpreter, a program per triple)"
        )
    return lines
