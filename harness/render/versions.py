"""The versions table as a report section (``harness.releases.versions`` gathers it):
each version's verdicts, work per call, time against ``fixed``, the statistical
verdicts under both verifiers, what an interpreted version ran short of the others,
its findings, and a line for each version not run here."""

from __future__ import annotations

from typing import Any

from harness.oracles.stats import StatsResult
from harness.releases.versions import VersionRow, Versions, timing_case, work_case
from harness.render.sections import Section
from harness.render.tables import table
from harness.upstream.rejection import BLOCKWISE_REJECTION
from reference.verifier import CHAIN_VERIFIER

TITLE = "Versions (docs/upstream.md, 'Versions')"


def _stats_word(result: StatsResult) -> str:
    if result.error:
        return "raised"
    if not result.ran:
        return "not run"
    scope = " [scope cut]" if result.scope() else ""
    return f"{'REJECTED' if result.rejected else 'pass'} (p={result.p_value:.3g}){scope}"


def _randomness(row: VersionRow) -> str:
    """`` (judged on <server>'s own randomness)`` when its oracle ran on its server's plumbing."""
    notes = {r.randomness() for r in row.statistics.values() if r.randomness()}
    return f" ({', '.join(sorted(notes))})" if notes else ""


def versions_section(versions: Versions) -> Section:
    """The table; holds when the before-fix module is not lossless and the after-fix one is."""
    rows, ok = versions.rows, versions.ok
    header = [
        "version", "lossless", "drop-in", "why", "walks/call", "torch RNG launches/call",
        "counter advances/call", "time / fixed", "stats (chain)", "stats (sglang-blockwise)",
    ]  # fmt: skip
    body = []
    for row in rows:
        work = row.work
        body.append(
            [
                row.name,
                "yes" if row.lossless else "NO",
                "yes" if row.drop_in else "no",
                row.why,
                "-" if work is None else str(work.walks),
                "-" if work is None else str(work.torch_launches),
                "-"
                if work is None or work.counter_advances is None
                else str(work.counter_advances),
                "-" if row.time_ratio is None else f"{row.time_ratio:.2f}x",
                _stats_word(row.statistics[CHAIN_VERIFIER.name]),
                _stats_word(row.statistics[BLOCKWISE_REJECTION.name]),
            ]
        )
    findings = [f"  {row.name}: {f}" for row in rows for f in row.findings]
    cuts = [f"  {row.name}: {c}" for row in rows for c in row.cut]
    cuts += [
        f"  {row.name} under {verifier}: {result.scope()}"
        for row in rows
        for verifier, result in row.statistics.items()
        if result.scope()
    ]
    scanned = rows[0].scan
    text = "\n".join(
        [
            table(header, body),
            "",
            f"work: one sampled call ({work_case(seed=0).label()}); time: the median of "
            f"per-repetition wall ratios against fixed, whole call, one thread, "
            f"{timing_case(seed=0).label()}; scan: {sum(r.triples for r in scanned):.3g} "
            "triples per version (every head kind x float32, bfloat16 x both patterns)",
            *(["ran short of that (interpreted):", *cuts] if cuts else []),
            "findings:" if findings else "findings: none",
            *findings,
            *(f"absent: {line}" for line in versions.absent),
        ]
    )
    verdict = "; ".join(
        f"{row.name} {'lossless' if row.lossless else 'NOT lossless'}"
        f"{' and drop-in' if row.drop_in else ''}{_randomness(row)}"
        for row in rows
    )
    return Section(title=TITLE, ok=ok, verdict=verdict, text=text, data=_json(versions, ok=ok))


def _json(versions: Versions, *, ok: bool) -> dict[str, Any]:
    return {
        "ok": ok,
        "versions": [_row_json(row) for row in versions.rows],
        "absent": list(versions.absent),
    }


def _row_json(row: VersionRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "spec": row.spec,
        "lossless": row.lossless,
        "drop_in": row.drop_in,
        "why": row.why,
        "work": None if row.work is None else row.work.__dict__,
        "time_ratio_vs_fixed": row.time_ratio,
        "statistics": {
            verifier: {
                "rejected": r.rejected,
                "p_value": r.p_value,
                "error": r.error,
                "scope": r.scope(),
            }
            for verifier, r in row.statistics.items()
        },
        "scan_triples": sum(r.triples for r in row.scan),
        "scan_hits": sum(r.hit_count for r in row.scan),
        "cut": list(row.cut),
        "findings": list(row.findings),
    }
