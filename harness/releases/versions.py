"""The versions table: the bug's era and today's releases side by side (docs/upstream.md,
"Versions"), as data; ``harness.render.versions`` presents it.

For each version (the before-fix module, the after-fix module, the installed sglang
0.5.23 and, where the vllm package loads, vLLM 0.33's dense and top-k speculators) it
gathers, in one run: the two verdicts over the standard matrix with the
statistical oracle under both verifiers folded in and the support scan's hits, the work
of one sampled call (Markov walks, torch random-number launches, counter advances), the
A/B time per call against ``fixed`` on one shape, and the findings (the support scan's
hits, the non-finite rule's violations, what the adapter works around).

A version whose convention declares an oracle cut (``Convention.oracle_cut``: vLLM's,
under Triton's interpreter) runs every part in that cut, and its row says so
(``VersionRow.cut``): the oracle in its scope (``harness.oracles.stats.scope_under``),
the scan and the non-finite rule at no more rows a call than the cut's and on the
points inside its contract only, the timing at one repetition.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from harness.case import Case, make_case
from harness.defaults import DEFAULT_VERIFIER_NOISE, FIXED, REFERENCE, VerifierNoise
from harness.executor import IN_PROCESS
from harness.judge import judge
from harness.judgement import Judgement, PartVerdict, ScanVerdict
from harness.measure.timing import ab_timing
from harness.options import Roles, RunOptions
from harness.oracles.stats import StatsResult
from harness.pipeline.check_result import Tier
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.runner import run_case
from harness.pipeline.support_scan import (
    PointResult,
    ScanPlan,
    ScanPoint,
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
from harness.releases.laws import LAW_CLASS, LawsOfRow, installed_laws
from harness.upstream.dispatch import convention_of, provenance
from harness.upstream.loaders import sglang_loader, vllm_loader

VERSIONS_VERIFIERS = ("chain", "sglang-blockwise")  # each version under ours and sglang's
# The rows the table's verdict holds, by role: the bug's module must fail, its fix must be
# lossless; every other row is reported beside them.
BEFORE_FIX, AFTER_FIX = SHOWS_THE_BUG = ("before-fix", "after-fix")
# The installed packages' rows are named after the versions their loaders support.
_SGLANG = f"sglang-{sglang_loader.SUPPORTED_VERSION}"
_VLLM = "vllm-" + ".".join(vllm_loader.SUPPORTED_VERSION.split(".")[:2])
VERSIONS: dict[str, str] = {
    "before-fix": "before-fix=tests/plugins/upstream/dspark_before_fix.py",
    "after-fix": "after-fix=tests/plugins/upstream/dspark_after_fix.py",
    _SGLANG: f"{_SGLANG.replace('.', '_')}=sglang",
}
VLLM_VERSIONS: dict[str, str] = {
    f"{_VLLM}-dense": f"{_VLLM.replace('.', '_')}-dense=vllm:dense",
    f"{_VLLM}-topk4": f"{_VLLM.replace('.', '_')}-topk4=vllm:topk=4",
}
INTERPRETED_REPEATS = 1  # A/B repetitions of a version whose convention declares a cut


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
    cut: tuple[str, ...] = ()  # what of each part it ran short of the others (interpreted)


@dataclass(frozen=True)
class Versions:
    """Every version's row, one line per version left out and why, and the judgement
    the table holds: the before-fix module (expected to fail) is not lossless, the
    after-fix one is (``SHOWS_THE_BUG``)."""

    rows: tuple[VersionRow, ...]
    absent: tuple[str, ...]
    judgement: Judgement

    @property
    def ok(self) -> bool:
        return self.judgement.ok


def versions_to_run() -> tuple[dict[str, str], tuple[str, ...]]:
    """The versions this machine can run (name -> ``--impl`` spec), and a line for the
    vLLM rows when its package does not load here."""
    missing = vllm_loader.unavailable_reason()
    if missing is None:
        return {**VERSIONS, **VLLM_VERSIONS}, ()
    return dict(VERSIONS), (f"{', '.join(VLLM_VERSIONS)}: not run here: {missing}",)


@dataclass(frozen=True)
class VersionPlan:
    """What one version's row runs: the scan's points, the non-finite rule's batch and
    calls, the timing's repetitions, and what of that is cut (one line each)."""

    scan_points: tuple[ScanPoint, ...]
    nonfinite_bs: int
    nonfinite_calls: int
    repeats: int
    cut: tuple[str, ...]


NONFINITE_BS, NONFINITE_CALLS = 1024, 4  # the non-finite rule's batch and calls


def version_plan(implementation: Implementation, *, plan: ScanPlan, repeats: int) -> VersionPlan:
    """Every part in full, or, where the implementation's convention declares an oracle
    cut, at most its rows a call, the scan on the points inside its contract, and one
    timing repetition."""
    convention = convention_of(implementation.sampler_class)
    cut = convention.oracle_cut
    if cut is None:
        return VersionPlan(
            scan_points=tuple(plan.points()),
            nonfinite_bs=NONFINITE_BS,
            nonfinite_calls=NONFINITE_CALLS,
            repeats=repeats,
            cut=(),
        )
    narrow = replace(
        plan,
        bs=min(plan.bs, cut.rows),
        triples_per_point=min(plan.triples_per_point, cut.rows * plan.gamma),
    )
    sampler_class = implementation.sampler_class
    inside = tuple(
        p
        for p in narrow.points()
        if convention.outside_contract(p.case(), sampler_class=sampler_class) is None
    )
    left = len(tuple(narrow.points())) - len(inside)
    nonfinite_bs = min(NONFINITE_BS, cut.rows)
    return VersionPlan(
        scan_points=inside,
        nonfinite_bs=nonfinite_bs,
        nonfinite_calls=1,
        repeats=min(repeats, INTERPRETED_REPEATS),
        cut=(
            f"cut by {cut.by}: scan {len(inside)} points inside its contract ({left} outside "
            f"not run) at bs={narrow.bs}, {sum(p.triples for p in inside)} triples; non-finite "
            f"rule at bs={nonfinite_bs}, 1 call; timing {min(repeats, INTERPRETED_REPEATS)} "
            "repetition",
        ),
    )


def call_work(implementation: Implementation, *, seed: int) -> CallWork | None:
    run = run_case(work_case(seed=seed), [implementation], executor=IN_PROCESS)
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


def _installed_laws(name: str) -> LawsOfRow | None:
    """An installed package's row: its verify target against its own sampler
    (``harness.releases.laws``); ``None`` for a row of our own modules."""
    if name == _SGLANG:
        return installed_laws("sglang", sglang_loader.SUPPORTED_VERSION)
    if name in VLLM_VERSIONS:
        return installed_laws("vllm", vllm_loader.SUPPORTED_VERSION)
    return None


def collect_versions(
    *,
    seed: int = 0,
    scan_triples_per_point: int = 1 << 16,
    repeats: int = 5,
    names: Sequence[str] | None = None,
    verifier_noise: VerifierNoise = DEFAULT_VERIFIER_NOISE,
    progress: Progress = no_progress,
) -> Versions:
    """Every version's row (``names``: only those, of the ones this machine runs),
    measured in this one run."""
    runnable, absent = versions_to_run()
    chosen = runnable if names is None else {n: runnable[n] for n in names if n in runnable}
    implementations = {name: parse_impl_spec(spec) for name, spec in chosen.items()}
    progress("versions: standard matrix and statistical oracle under both verifiers ...")
    judgement = judge(
        standard_matrix(seed=seed),
        [*builtin_implementations((REFERENCE,)), *implementations.values()],
        options=RunOptions(
            seed=seed,
            roles=Roles(require=Tier.LOSSLESS, expect_fail=(BEFORE_FIX,)),
            verifiers=VERSIONS_VERIFIERS,
            verifier_noise=verifier_noise,
            time_limit_s=None,
            progress=progress,
        ),
    )
    assert judgement.oracle is not None  # the options ask for it
    oracle = judgement.oracle.run
    plan = full_plan(triples_per_point=scan_triples_per_point, seed=seed)
    rows = []
    for name, impl in implementations.items():
        progress(f"versions: {name}: work, timing, scan ...")
        parts = version_plan(impl, plan=plan, repeats=repeats)
        scan = tuple(scan_point(impl, point) for point in parts.scan_points)
        rules = nonfinite_behaviour(impl, bs=parts.nonfinite_bs, calls=parts.nonfinite_calls)
        hits = scan_findings(scan)
        findings = [*hits]
        findings += [
            f"non-finite rule: {o.rule.value}: {o.violations} of {o.draws} draws break it"
            for o in rules
            if not o.holds
        ]
        findings += list(provenance(impl).get("adaptations", []))
        laws = _installed_laws(name)
        if laws is not None and laws.evidence:
            findings.append(f"{LAW_CLASS}: {laws.evidence}")
            judgement = judgement.with_parts([PartVerdict(impl.name, LAW_CLASS, laws.evidence)])
        judgement = judgement.with_scans([ScanVerdict(impl.name, next(iter(hits), ""))])
        held = judgement.held_verdict(impl.name)
        rows.append(
            VersionRow(
                name=name,
                spec=impl.spec,
                lossless=held.lossless,
                drop_in=held.drop_in,
                why=held.summary(),
                work=call_work(impl, seed=seed),
                time_ratio=time_ratio(impl, seed=seed, repeats=parts.repeats),
                statistics={v: results[impl.name] for v, results in oracle.by_verifier.items()},
                scan=scan,
                findings=tuple(findings),
                cut=parts.cut,
            )
        )
    return Versions(
        rows=tuple(rows), absent=absent, judgement=judgement.of_implementations(SHOWS_THE_BUG)
    )
