"""The verdict of a run as one value: ``Judgement``, computed once by ``harness.judge``
and read by every entry point (each command, the Python API, the pytest plugin, the
versions table). ``render/`` formats it and decides nothing; the exit code is
``Judgement.ok``.

A judgement holds, per implementation, its two verdicts (the statistical oracle's part
inside the lossless one, the support scan's where it ran, ``ScanVerdict``, and the
parts a command judges beside the checks, ``PartVerdict``) held to its role
(``HeldVerdict``); the divergence ledger between the pair (``LedgerVerdict``); the
oracle's run with whether each implementation met its expectation there
(``OracleVerdict``); the eliminated work (``WorkVerdict``); the parts a command adds
where it runs them (CUDA graphs' redraws, ``RedrawVerdict``, and host syncs,
``SyncVerdict``; the pair's time ratio); and what each covered. A command adds a part to
the judgement (``Judgement.with_scans``, ``Judgement.with_parts``,
``dataclasses.replace``); it never ands a predicate onto ``ok``. ``Judgement.to_json()``
is its serialisation in the report (docs/verdicts.md, "The report's JSON").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from harness.options import Roles, RunOptions
from harness.pipeline.check_result import Tier
from harness.pipeline.coverage import MatrixCoverage, StatisticalCoverage
from harness.pipeline.ledger import LEDGER_CLASSES
from harness.pipeline.records import CaseRecord
from harness.pipeline.verdicts import NOT_RUN, Statistical, Verdict, implementation_verdict

if TYPE_CHECKING:
    from harness.gpu.graphs import GraphCaseResult
    from harness.gpu.host_sync import SyncCheck
    from harness.measure.sweep import SweepSummary
    from harness.measure.time_ratio import TimeRatio
    from harness.measure.word_sweep import WordSweep
    from harness.measure.work import CaseWork
    from harness.oracles.stats import OracleRun

JUDGEMENT_SCHEMA_VERSION = 2  # 1: sections only; 2: the judgement beside them


@dataclass(frozen=True)
class ScanVerdict:
    """One implementation's support scan (``harness.pipeline.support_scan``): ``ok`` when
    no draft fell outside the support; ``finding`` is the first hit in words."""

    name: str
    finding: str = ""  # empty: no draft outside the support

    @property
    def ok(self) -> bool:
        return not self.finding

    def meets(self, roles: Roles) -> bool:
        """Held to its role alone (the ``scan`` command): an implementation expected to
        fail must hit, every other one must not."""
        return self.ok != (self.name in roles.expect_fail)


@dataclass(frozen=True)
class PartVerdict:
    """A part a command judges beside the checks and holds in one implementation's
    verdict (``Judgement.with_parts``): a release's life across the junction, its
    verify target against its server's sampler (``harness.releases``). ``ok`` when it
    found nothing; ``finding`` is what it found, in words."""

    name: str  # the implementation it is held in
    part: str  # what it judged, in words
    finding: str = ""  # empty: nothing found

    @property
    def ok(self) -> bool:
        return not self.finding


@dataclass(frozen=True)
class HeldVerdict:
    """One implementation's verdicts held to its role: ``ok`` when it meets what the
    role asks (an implementation expected to fail must fail a lossless check on a case
    that ran; every other one must meet ``held_to``). With its support ``scan``, a hit
    makes it not lossless, so not drop-in either: the one rule every table reads
    (``lossless``, ``drop_in``)."""

    verdict: Verdict
    role: str  # in words: judged, the buggy or fixed side of the pair, expected to fail
    held_to: str  # what it must meet, in words
    expected_to_fail: bool
    ok: bool
    scan: ScanVerdict | None = None  # None: no support scan ran
    parts: tuple[PartVerdict, ...] = ()  # judged beside the checks and held here

    @property
    def name(self) -> str:
        return self.verdict.name

    @property
    def lossless_beside(self) -> bool:
        """Whether what is judged beside the checks holds: its scan and its parts."""
        return (self.scan is None or self.scan.ok) and all(p.ok for p in self.parts)

    @property
    def lossless(self) -> bool:
        return self.verdict.lossless and self.lossless_beside

    @property
    def drop_in(self) -> bool:
        return self.verdict.drop_in and self.lossless

    def summary(self) -> str:
        """The verdict's summary, led by the first hit beside the checks (the scan's, a
        part's) where only those fail it."""
        why = self.verdict.summary()
        beside = [self.scan.finding] if self.scan is not None and not self.scan.ok else []
        beside += [f"{p.part}: {p.finding}" for p in self.parts if not p.ok]
        if self.verdict.lossless and beside:
            return f"NOT lossless: {beside[0]} (the checks alone: {why})"
        return why

    def to_json(self) -> dict[str, Any]:
        scan: dict[str, Any] = {}
        if self.scan is not None or self.parts:
            scan = {"lossless": self.lossless, "drop_in": self.drop_in, "summary": self.summary()}
        if self.scan is not None:
            scan["scan"] = self.scan.finding or None
        if self.parts:
            scan["parts"] = {p.part: p.finding or None for p in self.parts}
        return {
            **self.verdict.to_json(),
            **scan,
            "role": self.role,
            "held_to": self.held_to,
            "expected_to_fail": self.expected_to_fail,
            "ok": self.ok,
        }


def hold_to_role(
    verdict: Verdict,
    *,
    roles: Roles,
    scan: ScanVerdict | None = None,
    parts: tuple[PartVerdict, ...] = (),
) -> HeldVerdict:
    """``verdict`` (with its support ``scan`` where one ran, and the ``parts`` judged
    beside the checks) held to what ``roles`` ask of its implementation."""
    name = verdict.name
    role, held_to = roles.describe(name)
    held = HeldVerdict(
        verdict, role, held_to, expected_to_fail=False, ok=False, scan=scan, parts=parts
    )
    if name in roles.expect_fail:
        ok = not held.lossless and verdict.judged > 0  # nothing that ran shows nothing
        return replace(held, expected_to_fail=True, ok=ok)
    drop_in = roles.requirement(name) is Tier.DROP_IN
    return replace(held, ok=held.drop_in if drop_in else held.lossless)


@dataclass(frozen=True)
class LedgerVerdict:
    """The divergence ledger between the pair over a comparison's records: ``ok`` when
    it holds on every case that ran both, and (on the standard matrix) every class it
    knows was observed somewhere."""

    pair: tuple[str, str]
    cases: int  # cases that ran both sides
    broken: tuple[str, ...]  # labels of the cases where it does not hold
    never_observed: tuple[str, ...]  # classes no case showed (standard matrix only)
    ok: bool

    @classmethod
    def of(
        cls, records: Sequence[CaseRecord], *, roles: Roles, require_coverage: bool
    ) -> LedgerVerdict:
        entries = [(r["label"], r["ledger"]) for r in records if r["ledger"] is not None]
        broken = tuple(label for label, entry in entries if not entry["holds"])
        seen = {name for _, entry in entries for name in entry["observed"]}
        never = tuple(sorted(set(LEDGER_CLASSES) - seen)) if require_coverage else ()
        ok = not broken and not never and bool(entries)
        return cls(roles.pair, len(entries), broken, never, ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "pair": list(self.pair),
            "cases": self.cases,
            "broken": list(self.broken),
            "never_observed": list(self.never_observed),
            "ok": self.ok,
        }


@dataclass(frozen=True)
class OracleVerdict:
    """The statistical oracle's run: ``ok`` when every implementation met its
    expectation under every verifier (``expectations``, by verifier then implementation:
    ``harness.oracles.stats.meets_expectation``)."""

    run: OracleRun
    coverage: StatisticalCoverage | None
    statisticals: Mapping[str, Statistical]
    expectations: Mapping[str, Mapping[str, bool]]
    ok: bool
    wall_s: float

    @classmethod
    def of(cls, run: OracleRun, *, roles: Roles, wall_s: float = 0.0) -> OracleVerdict:
        """The run held to ``roles``: each result to its role's expectation."""
        from harness.oracles.part import statistical_coverage, statistical_verdicts
        from harness.oracles.stats import meets_expectation

        expectations = {
            verifier: {name: meets_expectation(result, roles) for name, result in results.items()}
            for verifier, results in run.by_verifier.items()
        }
        return cls(
            run=run,
            coverage=statistical_coverage(run, roles=roles),
            statisticals=statistical_verdicts(run),
            expectations=expectations,
            ok=all(all(by_name.values()) for by_name in expectations.values()),
            wall_s=wall_s,
        )

    def met(self, name: str) -> bool:
        """Whether ``name`` met its role's expectation under every verifier."""
        return all(by_name[name] for by_name in self.expectations.values() if name in by_name)


@dataclass(frozen=True)
class WorkVerdict:
    """The eliminated work: ``ok`` when a case with sampled rows compared the pair, the
    counts agree with the work model on every case kind, and no plug-in outside the
    pair (not expected to fail) raised."""

    works: tuple[CaseWork, ...]
    agreeing: int  # case kinds whose counts agree with the model
    unmeasured: tuple[tuple[str, int], ...]  # (plug-in, case kinds it raised on)
    compared: bool  # some case with sampled rows compared the pair
    ok: bool
    wall_s: float

    @classmethod
    def of(
        cls,
        works: Sequence[CaseWork],
        *,
        expect_fail: frozenset[str] = frozenset(),
        wall_s: float = 0.0,
    ) -> WorkVerdict:
        from harness.measure.work import unmeasured_plugins

        agreeing = sum(w.agrees for w in works)
        compared = any(w.comparison is not None and w.case.has_sampled_rows for w in works)
        unmeasured = tuple(unmeasured_plugins(works, expect_fail=expect_fail))
        ok = compared and agreeing == len(works) and not unmeasured
        return cls(tuple(works), agreeing, unmeasured, compared, ok, wall_s)


@dataclass(frozen=True)
class RedrawVerdict:
    """CUDA graphs' noise: ``ok`` when every graph checked (at least one) redraws its
    noise on replay (``harness.gpu.graphs.redraws_hold``)."""

    results: tuple[GraphCaseResult, ...]
    ok: bool

    @classmethod
    def of(cls, results: Sequence[GraphCaseResult]) -> RedrawVerdict:
        from harness.gpu.graphs import redraws_hold

        return cls(tuple(results), redraws_hold(results))


@dataclass(frozen=True)
class SyncVerdict:
    """Host synchronisation in ``__call__``: ``ok`` when every call that must be
    sync-free (at least one) was (``harness.gpu.host_sync.syncs_hold``); ``failed``, the
    calls that must be and were not."""

    checks: tuple[SyncCheck, ...]
    failed: tuple[SyncCheck, ...]
    ok: bool

    @classmethod
    def of(cls, checks: Sequence[SyncCheck]) -> SyncVerdict:
        from harness.gpu.host_sync import sync_failed, syncs_hold

        failed = tuple(check for check in checks if sync_failed(check))
        return cls(tuple(checks), failed, syncs_hold(checks))


@dataclass(frozen=True)
class WordsVerdict:
    """Each server's word-to-noise conversions over the words swept: ``ok`` when none
    gives a non-finite noise value (``harness.measure.word_sweep.sweeps_ok``)."""

    sweeps: tuple[WordSweep, ...]
    ok: bool

    @classmethod
    def of(cls, sweeps: Sequence[WordSweep]) -> WordsVerdict:
        from harness.measure.word_sweep import sweeps_ok

        return cls(tuple(sweeps), sweeps_ok(list(sweeps)))


@dataclass(frozen=True)
class Judgement:
    """The verdict of one run: every implementation held to its role, the ledger, the
    oracle, the eliminated work, the graphs' redraws and host syncs and the pair's time
    ratio where they ran, and what they covered. ``ok`` is the run's exit status (0 when
    it holds): every part that ran holds."""

    options: RunOptions
    records: tuple[CaseRecord, ...]
    held: tuple[HeldVerdict, ...]
    ledger: LedgerVerdict | None = None
    oracle: OracleVerdict | None = None
    work: WorkVerdict | None = None
    redraws: RedrawVerdict | None = None
    syncs: SyncVerdict | None = None
    time_ratio: TimeRatio | None = None
    scaling: SweepSummary | None = None  # the scaling sweep's exponent
    words: WordsVerdict | None = None
    scans: tuple[ScanVerdict, ...] = ()  # support scans, each in its held verdict where one is
    timing: dict[str, float] = field(default_factory=dict, compare=False)

    @classmethod
    def of_parts(cls, options: RunOptions, **parts: Any) -> Judgement:
        """The judgement of a command that judges no case, only ``parts`` (each a field)."""
        return cls(options=options, records=(), held=(), **parts)

    @property
    def ok(self) -> bool:
        """Every held verdict judged by its checks, every part that ran, and every support
        scan of an implementation without a held verdict, held to its role."""
        parts = [h.ok for h in self.held if self.judged_by_checks(h.name)]
        parts += [p.ok for p in self.parts() if p is not None]
        held = set(self.names)
        parts += [s.meets(self.options.roles) for s in self.scans if s.name not in held]
        return all(parts)

    def parts(self) -> tuple[Any, ...]:
        """Every part beside the held verdicts (``None``: it did not run), each with its ``ok``."""
        return (
            *(self.ledger, self.oracle, self.work, self.redraws, self.syncs),
            *(self.time_ratio, self.scaling, self.words),
        )

    def of_implementations(self, names: Sequence[str]) -> Judgement:
        """The judgement of ``names``' held verdicts alone, their scans in them: the
        other verdicts and the parts are reported beside it, not held (the versions
        table holds two of its rows)."""
        held = tuple(h for h in self.held if h.name in names)
        return Judgement(options=self.options, records=self.records, held=held)

    def with_scans(self, scans: Sequence[ScanVerdict]) -> Judgement:
        """This judgement with each implementation's support scan held in its verdicts
        (where it has one) and beside them; a scan held before, of an implementation
        ``scans`` does not name, stays held."""
        return replace(self, held=self._held_with(scans=scans), scans=(*self.scans, *scans))

    def with_parts(self, parts: Sequence[PartVerdict]) -> Judgement:
        """This judgement with each part held in the verdict of the implementation it
        names (beside what it holds already)."""
        return replace(self, held=self._held_with(parts=parts))

    def _held_with(
        self, *, scans: Sequence[ScanVerdict] = (), parts: Sequence[PartVerdict] = ()
    ) -> tuple[HeldVerdict, ...]:
        """Every verdict held to its role again, with the scans and parts named for it
        (a scan replaces its implementation's; parts join what it holds)."""
        by_name = {scan.name: scan for scan in scans}
        roles = self.options.roles
        return tuple(
            hold_to_role(
                h.verdict,
                roles=roles,
                scan=by_name.get(h.name, h.scan),
                parts=(*h.parts, *(p for p in parts if p.name == h.name)),
            )
            for h in self.held
        )

    def judged_by_checks(self, name: str) -> bool:
        """The pair's buggy side is judged by the ledger (and by ``expect_fail``)."""
        return self.options.roles.judged_by_checks(name)

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.held]

    def held_verdict(self, name: str) -> HeldVerdict:
        return next(h for h in self.held if h.name == name)

    def verdict(self, name: str) -> Verdict:
        """``name``'s verdicts, the statistical oracle's part in them when it ran."""
        return self.held_verdict(name).verdict

    def matrix_coverage(self) -> MatrixCoverage:
        return MatrixCoverage.of_records(self.records)

    def to_json(self) -> dict[str, Any]:
        """The judgement as JSON: the roles, every implementation's verdicts, the
        ledger, whether the oracle and the work held, and what was covered."""
        statistical = None if self.oracle is None else self.oracle.coverage
        return {
            "schema_version": JUDGEMENT_SCHEMA_VERSION,
            "ok": self.ok,
            "roles": self.options.roles.to_json(),
            "implementations": {h.name: h.to_json() for h in self.held},
            "ledger": None if self.ledger is None else self.ledger.to_json(),
            "oracle": None
            if self.oracle is None
            else {
                "ok": self.oracle.ok,
                "verifiers": list(self.oracle.run.by_verifier),
                "verifier_noise": self.oracle.run.config.verifier_noise.value,
                "shared_noise": {
                    f"{r.name} under {r.verifier}": r.shared_noise
                    for r in self.oracle.run.every_result()
                },
            },
            "work": None
            if self.work is None
            else {
                "ok": self.work.ok,
                "agreeing": self.work.agreeing,
                "case_kinds": len(self.work.works),
                "unmeasured": [list(u) for u in self.work.unmeasured],
            },
            "redraws": None if self.redraws is None else {"ok": self.redraws.ok},
            "syncs": None if self.syncs is None else {"ok": self.syncs.ok},
            "time_ratio": None if self.time_ratio is None else {"ok": self.time_ratio.ok},
            "scaling": None if self.scaling is None else {"ok": self.scaling.ok},
            "words": None if self.words is None else {"ok": self.words.ok},
            "scans": {s.name: {"ok": s.ok, "finding": s.finding or None} for s in self.scans},
            "coverage": {
                "matrix": self.matrix_coverage().to_json(),
                "statistical": None if statistical is None else statistical.to_json(),
            },
        }


def held_verdicts(
    records: Sequence[CaseRecord],
    *,
    roles: Roles,
    statisticals: Mapping[str, Statistical] | None = None,
) -> tuple[HeldVerdict, ...]:
    """Every implementation of ``records`` held to its role, the statistical oracle's
    part in its lossless verdict when the oracle ran (``statisticals``, by name)."""
    names = list(records[0]["implementations"]) if records else []
    held = []
    for name in names:
        verdict = implementation_verdict(records, name)
        if statisticals is not None:
            verdict = verdict.with_statistical(statisticals.get(name, NOT_RUN))
        held.append(hold_to_role(verdict, roles=roles))
    return tuple(held)


def judge_records(
    records: Sequence[CaseRecord],
    *,
    options: RunOptions,
    oracle: OracleVerdict | None = None,
    work: WorkVerdict | None = None,
    timing: dict[str, float] | None = None,
) -> Judgement:
    """The judgement of a comparison's records (with the oracle's and the work's parts
    when they ran): every implementation held to its role, and the ledger between the
    pair when both sides ran (every class required on the standard matrix,
    ``options.require_observable``)."""
    roles = options.roles
    names = list(records[0]["implementations"]) if records else []
    ledger = None
    if roles.buggy in names and roles.fixed in names:
        ledger = LedgerVerdict.of(records, roles=roles, require_coverage=options.require_observable)
    return Judgement(
        options=options,
        records=tuple(records),
        held=held_verdicts(
            records,
            roles=roles,
            statisticals=None if oracle is None else oracle.statisticals,
        ),
        ledger=ledger,
        oracle=oracle,
        work=work,
        timing=dict(timing or {}),
    )
