"""The versions table: the bug's era and today's release side by side (docs/upstream.md,
"Versions").

For each version (the before-fix module, the after-fix module, the installed sglang
0.5.23) it gathers, in one run: the two verdicts over the standard matrix with the
statistical oracle under both verifiers folded in and the support scan's hits, the work
of one sampled call (Markov walks, torch random-number launches, counter advances), the
A/B time per call against ``fixed`` on one shape, and the findings (the support scan's
hits, the non-finite rule's violations, what the adapter works around).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness.defaults import FIXED
from harness.measure.timing import ab_timing
from harness.options import RunOptions
from harness.oracles.part import combined_statistical
from harness.oracles.problem import DEFAULT_CONFIG
from harness.oracles.stats import StatsResult, run_oracle
from harness.pipeline.case import Case, make_case
from harness.pipeline.check_result import Tier
from harness.pipeline.runner import run_case
from harness.pipeline.support_scan import (
    PointResult,
    full_plan,
    nonfinite_behaviour,
    scan_point,
)
from harness.plugins.implementations import (
    Implementation,
    builtin_implementations,
    parse_impl_spec,
)
from harness.progress import Progress, no_progress
from harness.render.sections import Section
from harness.render.tables import table
from harness.testing import check_sampler
from harness.upstream.rejection import BLOCKWISE_REJECTION
from reference.verifier import CHAIN_VERIFIER

VERSIONS: dict[str, str] = {
    "before-fix": "before-fix=tests/plugins/upstream/dspark_before_fix.py",
    "after-fix": "after-fix=tests/plugins/upstream/dspark_after_fix.py",
    "sglang-0.5.23": "sglang-0_5_23=sglang",
}
TITLE = "Versions (docs/upstream.md, 'Versions')"


def work_case(*, seed: int) -> Case:
    """One sampled call: vanilla head, folded sampling, every row sampled."""
    return make_case(
        bs=4,
        gamma=4,
        vocab_size=64,
        hidden_size=16,
        markov_rank=8,
        seed=seed,
        name="bs=4 gamma=4 V=64 H=16 r=8 vanilla folded",
    )


def timing_case(*, seed: int) -> Case:
    """The A/B shape, the same for every version: bs=8, gamma=7, V=32768, r=64, H=64."""
    return make_case(
        bs=8,
        gamma=7,
        vocab_size=32768,
        hidden_size=64,
        markov_rank=64,
        seed=seed,
        name="timing bs=8 gamma=7 V=32768 H=64 r=64 vanilla folded",
    )


@dataclass(frozen=True)
class CallWork:
    walks: int
    torch_launches: int  # random-number operators run in the call
    counter_advances: int | None  # None: no counter-based noise


@dataclass(frozen=True)
class VersionRow:
    """One version, everything the table says of it."""

    name: str
    spec: str
    lossless: bool
    drop_in: bool
    why: str
    work: CallWork | None
    time_ratio: float | None  # median of per-repetition ratios, this version / fixed
    statistics: dict[str, StatsResult]  # by verifier
    scan: tuple[PointResult, ...]
    findings: tuple[str, ...]


def call_work(implementation: Implementation, *, seed: int) -> CallWork | None:
    run = run_case(work_case(seed=seed), [implementation])
    result = run.results[implementation.name]
    if result.error is not None:
        return None
    return CallWork(
        walks=result.work.walks,
        torch_launches=sum(1 for d in result.random_draws if d.phase == "call"),
        counter_advances=None if result.noise_counter is None else result.noise_counter.advances,
    )


def time_ratio(implementation: Implementation, *, seed: int, repeats: int) -> float:
    fixed = builtin_implementations((FIXED,))[0]
    timing = ab_timing(
        timing_case(seed=seed),
        repeats=repeats,
        threads=1,
        modes=("whole_call",),
        pair=(implementation, fixed),
    )
    return statistics.median(timing.times["whole_call"]["wall"].ratios)


def scan_findings(results: Sequence[PointResult]) -> list[str]:
    hits = [r for r in results if r.hit_count]
    if not hits:
        return []
    first = hits[0].hits[0]
    total = sum(r.hit_count for r in results)
    covered = sum(r.triples for r in results)
    return [
        f"support scan: {total} drafts outside the support in {covered:.3g} triples (first: "
        f"{hits[0].point.head_kind}/{hits[0].point.dtype}/{hits[0].point.pattern.value}, "
        f"counter {first.counter} row {first.row} step {first.step}: token {first.token}, "
        f"only {first.allowed} may be)"
    ]


def collect_versions(
    *,
    seed: int = 0,
    scan_triples_per_point: int = 1 << 16,
    repeats: int = 5,
    progress: Progress = no_progress,
) -> list[VersionRow]:
    """Every version's row, measured in this one run."""
    implementations = {name: parse_impl_spec(spec) for name, spec in VERSIONS.items()}
    progress("versions: statistical oracle under both verifiers ...")
    oracle = run_oracle(
        replace(DEFAULT_CONFIG, seed=seed),
        implementations=list(implementations.values()),
        verifiers=(CHAIN_VERIFIER, BLOCKWISE_REJECTION),
        options=RunOptions(progress=progress, time_limit_s=None),
    )
    plan = full_plan(triples_per_point=scan_triples_per_point, seed=seed)
    rows = []
    for name, impl in implementations.items():
        progress(f"versions: {name}: standard matrix, work, timing, scan ...")
        statistical = combined_statistical(oracle.results_of(impl.name))
        verdict = check_sampler(impl.spec, require=Tier.LOSSLESS).with_statistical(statistical)
        scan = tuple(scan_point(impl, point) for point in plan.points())
        rules = nonfinite_behaviour(impl)
        findings = scan_findings(scan)
        findings += [
            f"non-finite rule: {o.rule.value}: {o.violations} of {o.draws} draws break it"
            for o in rules
            if not o.holds
        ]
        findings += list(impl.provenance().get("adaptations", []))
        lossless = verdict.lossless and not any(r.hit_count for r in scan)
        why = verdict.summary()
        if verdict.lossless and not lossless:  # the checks pass; the scan does not
            why = f"NOT lossless: {findings[0]} (the checks alone: {why})"
        rows.append(
            VersionRow(
                name=name,
                spec=impl.spec,
                lossless=lossless,
                drop_in=verdict.drop_in and lossless,
                why=why,
                work=call_work(impl, seed=seed),
                time_ratio=time_ratio(impl, seed=seed, repeats=repeats),
                statistics={v: results[impl.name] for v, results in oracle.by_verifier.items()},
                scan=scan,
                findings=tuple(findings),
            )
        )
    return rows


def _stats_word(result: StatsResult) -> str:
    if result.error:
        return "raised"
    return f"{'REJECTED' if result.rejected else 'pass'} (p={result.p_value:.3g})"


def versions_section(rows: Sequence[VersionRow]) -> Section:
    """The table; holds when the before-fix module is not lossless and the after-fix one is."""
    by_name = {row.name: row for row in rows}
    ok = not by_name["before-fix"].lossless and by_name["after-fix"].lossless
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
    scanned = rows[0].scan
    text = "\n".join(
        [
            table(header, body),
            "",
            f"work: one sampled call ({work_case(seed=0).label()}); time: the median of "
            f"per-repetition wall ratios against fixed, whole call, one thread, "
            f"{timing_case(seed=0).label()}; scan: {sum(r.triples for r in scanned):.3g} "
            "triples per version (every head kind x float32, bfloat16 x both patterns)",
            "findings:" if findings else "findings: none",
            *findings,
        ]
    )
    verdict = "; ".join(
        f"{row.name} {'lossless' if row.lossless else 'NOT lossless'}"
        f"{' and drop-in' if row.drop_in else ''}"
        for row in rows
    )
    return Section(title=TITLE, ok=ok, verdict=verdict, text=text, data=_json(rows, ok=ok))


def _json(rows: Sequence[VersionRow], *, ok: bool) -> dict[str, Any]:
    return {
        "ok": ok,
        "versions": [
            {
                "name": row.name,
                "spec": row.spec,
                "lossless": row.lossless,
                "drop_in": row.drop_in,
                "why": row.why,
                "work": None if row.work is None else row.work.__dict__,
                "time_ratio_vs_fixed": row.time_ratio,
                "statistics": {
                    verifier: {"rejected": r.rejected, "p_value": r.p_value, "error": r.error}
                    for verifier, r in row.statistics.items()
                },
                "scan_triples": sum(r.triples for r in row.scan),
                "scan_hits": sum(r.hit_count for r in row.scan),
                "findings": list(row.findings),
            }
            for row in rows
        ],
    }
