"""The statistical losslessness oracle (docs/statistics.md): does speculative decoding
driven by a sampler under test still follow the target model's distribution?

This module owns the oracle run: decoding every head kind's rows with each
implementation (``harness.oracles.problem``), fitting the family of tests
(``harness.oracles.fits``), Holm's correction over the whole family so the chance
of any false rejection stays at the stated alpha, the per-implementation result,
and the expectations each implementation is held to by its role
(``harness.pipeline.verdicts.Roles``): the buggy side of the pair (default
``legacy``) is rejected, and not on position 0 alone, where the bug cannot show;
every ``expect_fail`` name is rejected; every other implementation passes.

The verifier is a value (``reference.verifier.Verifier``): every run takes a sequence of
them (default: our chain verifier alone) and holds each implementation to its role
under every one; the released server's block-wise rejection is the second
(``harness.upstream.rejection``), vLLM's ``rejection_sample`` a third
(``harness.upstream.vllm_rejection``), whose decodes run at fewer rows.

What one decode runs is its scope (``scope_under``): the config after every cut the
verifier and the implementation's convention declare (``harness.oracles.cut``: an
interpreted part that cannot afford the defaults), without the heads the convention
cannot express (``Convention.outside_contract``). The result states both, and its
rows, family and detection bounds are those of the scope it ran.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.defaults import FIXED, LEGACY
from harness.devices import intra_op_threads
from harness.options import DEFAULT_OPTIONS, Roles, RunOptions
from harness.oracles.cut import DeclaresCut, OracleCut
from harness.oracles.fits import (
    JOINT,
    HeadTables,
    Marginal,
    Statistic,
    family_size,
    head_tables,
    position_name,
    statistics_of,
)
from harness.oracles.gof import holm_rejections
from harness.oracles.power import DetectionBound, PowerCurve, detection_bounds
from harness.oracles.problem import (
    DEFAULT_CONFIG,
    StatsConfig,
    StatsError,
    StatsProblem,
    build_problems,
    cpu_threads,
    decode_rows,
    oracle_case,
)
from harness.pipeline.coverage import BoundRow
from harness.pipeline.runner import RaisedError, guarded_call
from harness.pipeline.verdicts import Statistical
from harness.plugins.implementations import (
    Implementation,
    WorkerOnlySampler,
    builtin_implementations,
)
from harness.upstream.dispatch import convention_of
from reference.verifier import CHAIN_VERIFIER, DecodeResult, Verifier

DEFAULT_ROLES = Roles()


@dataclass(frozen=True)
class Scope:
    """What one implementation's decode under one verifier runs: ``config`` after every
    cut the verifier and the implementation's convention declare (``None``: no head of
    the config is inside the convention's contract, nothing is decoded), the cuts, and
    each head its convention cannot express (head kind -> why), never decoded."""

    config: StatsConfig | None
    cuts: tuple[OracleCut, ...] = ()
    heads_not_run: tuple[tuple[str, str], ...] = ()

    @property
    def narrowed(self) -> bool:
        """Whether it runs less than the config it was asked for."""
        return bool(self.cuts or self.heads_not_run)


def scope_under(
    config: StatsConfig, *, verifier: Verifier, implementation: Implementation | None = None
) -> Scope:
    """The scope of a decode at ``config`` under ``verifier`` (of ``implementation``,
    where one is named): each declared cut applied in turn (``cut_config``), then the
    heads outside the implementation's contract dropped (``heads_outside``)."""
    parts: list[object] = [verifier]
    if implementation is not None:
        parts.append(convention_of(implementation.sampler_class))
    cuts = tuple(
        p.oracle_cut for p in parts if isinstance(p, DeclaresCut) and p.oracle_cut is not None
    )
    cuts = tuple(c for c in cuts if cut_config(config, c) != config)  # only those that cut
    outside = {} if implementation is None else heads_outside(cut_all(config, cuts), implementation)
    return scope_of(config, cuts=cuts, heads_not_run=tuple(outside.items()))


def cut_all(config: StatsConfig, cuts: Sequence[OracleCut]) -> StatsConfig:
    """``config`` under every cut in turn."""
    for cut in cuts:
        config = cut_config(config, cut)
    return config


def scope_of(
    config: StatsConfig,
    *,
    cuts: tuple[OracleCut, ...],
    heads_not_run: tuple[tuple[str, str], ...],
) -> Scope:
    """The scope of a decode at ``config`` under ``cuts`` without ``heads_not_run``:
    ``scope_under``'s, or the one an implementation's worker states (``--isolate``,
    where only the worker can read a plug-in's convention)."""
    ran = cut_all(config, cuts)
    left_out = {kind for kind, _ in heads_not_run}
    inside = tuple(k for k in ran.head_kinds if k not in left_out)
    return Scope(
        config=replace(ran, head_kinds=inside) if inside else None,
        cuts=cuts,
        heads_not_run=heads_not_run,
    )


def cut_config(config: StatsConfig, cut: OracleCut) -> StatsConfig:
    """``config`` under one cut: at most ``cut.rows`` rows per head, only the targets the
    cut keeps, the cut's rounds where it names them; ``config`` itself when the cut
    changes nothing. ``StatsError`` when it keeps none of the config's targets."""
    targets = tuple(t for t in config.targets if cut.targets is None or t.name in cut.targets)
    if not targets:
        raise StatsError(
            f"{cut.by}: the oracle's cut keeps the targets {list(cut.targets or ())}, "
            f"the config has {[t.name for t in config.targets]}"
        )
    ran = replace(
        config,
        rows=min(config.rows, cut.rows),
        targets=targets,
        rounds=config.rounds if cut.rounds is None else cut.rounds,
    )
    return config if ran == config else ran


def heads_outside(config: StatsConfig, implementation: Implementation) -> dict[str, str]:
    """Each head kind of ``config`` whose rows the implementation's convention cannot
    express (``Convention.outside_contract`` on the oracle's case of that head), and why."""
    sampler_class = implementation.sampler_class
    convention = convention_of(sampler_class)
    reasons = {
        kind: convention.outside_contract(
            oracle_case(config, head_kind=kind, seed=config.seed), sampler_class=sampler_class
        )
        for kind in config.head_kinds
    }
    return {kind: why for kind, why in reasons.items() if why is not None}


@dataclass(frozen=True)
class StatsResult:
    """The oracle's verdict on one implementation over the whole family of tests."""

    name: str
    rows: dict[str, int]  # per head kind, by target
    alpha: float  # family-wise level
    family_size: int
    statistics: tuple[Statistic, ...]  # Holm's verdict in each ``rejected``
    marginals: tuple[Marginal, ...]
    mean_accepted_length: dict[str, dict[str, float]]  # by target, then head kind
    error: str | None = None  # the implementation raised: no verdict on the distribution
    bounds: tuple[DetectionBound, ...] = ()  # per target and position, at this run's rows
    verifier: str = CHAIN_VERIFIER.name  # whose verification committed the tokens
    not_judged: str | None = None  # why it was not judged (the time limit): never a defect
    cuts: tuple[OracleCut, ...] = ()  # what cut the config it ran (``scope_under``)
    heads_not_run: tuple[tuple[str, str], ...] = ()  # outside its contract: (head kind, why)
    wall_s: float = field(default=0.0, compare=False)

    @property
    def rejected(self) -> bool:
        return any(s.rejected for s in self.statistics)

    @property
    def ran(self) -> bool:
        """Whether any row was decoded and judged (not when every head is outside its
        contract)."""
        return bool(self.statistics) or self.error is not None or self.not_judged is not None

    @property
    def passed(self) -> bool:
        return self.ran and self.error is None and self.not_judged is None and not self.rejected

    def scope(self) -> str:
        """What it ran short of the config it was asked for, as one clause ("" when
        nothing was cut or left out)."""
        parts = [f"{kind} head not run ({why})" for kind, why in self.heads_not_run]
        cuts = self.cuts if self.rows else ()  # nothing ran: no rows were cut
        for cut in cuts:  # each as it declares itself: the fewest rows of them all ran
            rounds = "" if cut.rounds is None else f", {cut.rounds} rounds per row"
            only = "" if cut.targets is None else f"{', '.join(cut.targets)} target only, "
            parts.append(f"cut by {cut.by}: {only}at most {cut.rows} rows per head{rounds}")
        if cuts:
            ran = ", ".join(f"{target} {rows}" for target, rows in self.rows.items())
            parts.append(f"ran {ran} rows per head")
        return "; ".join(parts)

    @property
    def p_value(self) -> float:
        """The family's adjusted p-value: rejected exactly when it is below alpha."""
        if not self.statistics:
            return math.nan
        return min(1.0, self.family_size * min(s.p_value for s in self.statistics))

    @property
    def test_level(self) -> float:
        """Holm's first threshold: what the smallest p-value is compared with."""
        return self.alpha / max(1, self.family_size)

    @property
    def impossible(self) -> int:
        return sum(s.impossible for s in self.statistics if s.test == JOINT)

    def rejections(self) -> list[Statistic]:
        return [s for s in self.statistics if s.rejected]

    def rejected_at_position(self, position: int) -> bool:
        """Whether a test confined to one position rejects: its transition test, or its
        marginal at the family's first threshold."""
        return any(s.rejected for s in self.statistics if s.test == position_name(position)) or any(
            m.p_value < self.test_level for m in self.marginals if m.position == position
        )

    def carrier_names(self) -> tuple[str, ...]:
        """``target/head/group/test`` of each rejection, strongest first."""
        return tuple(where(s) for s in sorted(self.rejections(), key=_by_p))

    def statistical(self) -> Statistical:
        """This result as the lossless verdict takes it (what it ran short of the config
        in ``scope``; not run at all when no head was inside its contract)."""
        scope = self.scope()
        if not self.ran:
            return Statistical(ran=False, scope=scope)
        if self.not_judged is not None:
            return Statistical(ran=True, not_judged=self.not_judged, scope=scope)
        if self.error is not None:
            return Statistical(ran=True, error=self.error, scope=scope)
        p = None if math.isnan(self.p_value) else self.p_value
        return Statistical(
            ran=True,
            rejected=self.rejected,
            p_value=p,
            carried_by=self.carrier_names(),
            not_ruled_out="" if self.rejected else not_ruled_out(best_bounds(self.bounds)),
            scope=scope,
        )

    def to_json_dict(self) -> dict[str, Any]:
        """Everything but the wall time, so a report's JSON is the same on every run."""
        body = asdict(self)
        del body["wall_s"]
        body.update(
            ran=self.ran,
            rejected=self.rejected,
            passed=self.passed,
            scope=self.scope(),
            p_value=self.p_value,
            test_level=self.test_level,
        )
        return body


def best_bounds(bounds: Sequence[DetectionBound]) -> tuple[BoundRow, ...]:
    """Per committed position, the bound at the target that sees the most there."""
    by_position: dict[int, DetectionBound] = {}
    for bound in bounds:
        held = by_position.get(bound.position)
        if held is None or _fraction_key(bound) < _fraction_key(held):
            by_position[bound.position] = bound
    return tuple(
        BoundRow(
            position=b.position,
            fraction=b.fraction,
            confined_fraction=b.confined_fraction,
            target=b.target,
            rows=b.rows,
        )
        for _, b in sorted(by_position.items())
    )


def _fraction_key(bound: DetectionBound) -> float:
    return math.inf if bound.fraction is None else bound.fraction


def not_ruled_out(bounds: Sequence[BoundRow]) -> str:
    """What a pass leaves open: defects smaller than the bound at each position."""
    if not bounds:
        return ""
    parts = ", ".join(
        f"pos {b.position} " + ("any" if b.fraction is None else f"{b.fraction:.2g}")
        for b in bounds
    )
    return (
        "not ruled out: a defect committing a fixed token on fewer than this fraction of "
        f"the rows at a committed position: {parts}"
    )


def _by_p(statistic: Statistic) -> float:
    return statistic.p_value


def where(statistic: Statistic) -> str:
    """``target/head/group/test``: where one test looked."""
    return f"{statistic.target}/{statistic.head}/{statistic.group}/{statistic.test}"


Decoded = dict[str, dict[str, DecodeResult]]  # by target, then head kind


def fit_decoded(
    name: str,
    *,
    decoded: Decoded,
    problems: Sequence[StatsProblem],
    wall_s: float = 0.0,
    verifier: str = CHAIN_VERIFIER.name,
) -> StatsResult:
    """The family of tests on every target's and head kind's decoded rows, Holm-corrected
    over all of them."""
    statistics: list[Statistic] = []
    marginals: list[Marginal] = []
    tables: list[HeadTables] = []
    for problem in problems:
        for head_kind, run in decoded[problem.target.name].items():
            tables.append(
                head_tables(run, problem=problem, head_kind=head_kind, row_group=problem.row_group)
            )
            head_tests, head_marginals = statistics_of(tables[-1])
            statistics += head_tests
            marginals += head_marginals
    # the stated family size is what the report promises: every test, once
    size = sum(family_size(problem.config) for problem in problems)
    assert len(statistics) == size, (len(statistics), size)
    alpha = problems[0].config.alpha
    verdicts = holm_rejections([s.p_value for s in statistics], alpha=alpha)
    bounds = detection_bounds(tables, gamma=problems[0].config.gamma, level=alpha / size)
    return StatsResult(
        name=name,
        rows=target_rows(problems),
        alpha=alpha,
        family_size=len(statistics),
        statistics=tuple(replace(s, rejected=r) for s, r in zip(statistics, verdicts, strict=True)),
        marginals=tuple(marginals),
        mean_accepted_length={
            target: {h: run.mean_accepted_length for h, run in runs.items()}
            for target, runs in decoded.items()
        },
        bounds=bounds,
        verifier=verifier,
        wall_s=wall_s,
    )


def target_rows(problems: Sequence[StatsProblem]) -> dict[str, int]:
    return {problem.target.name: problem.config.rows for problem in problems}


def failed_result(
    name: str,
    *,
    config: StatsConfig,
    error: RaisedError,
    wall_s: float = 0.0,
    verifier: str = CHAIN_VERIFIER.name,
) -> StatsResult:
    """No verdict on the distribution at ``config`` (every target): ``error`` is the
    implementation's failure, or, when the time limit stopped it, the reason it was not
    judged."""
    return StatsResult(
        name=name,
        rows={t.name: config.target_rows(t) for t in config.targets},
        alpha=config.alpha,
        family_size=family_size(config),
        statistics=(),
        marginals=(),
        mean_accepted_length={},
        error=None if error.timed_out else error.summary(),
        not_judged=f"time limit reached ({error.message})" if error.timed_out else None,
        verifier=verifier,
        wall_s=wall_s,
    )


def oracle_config(problems: Sequence[StatsProblem]) -> StatsConfig:
    """The config the problems were built from (``build_problems``)."""
    return problems[0].oracle_config


def decode_and_fit(
    implementation: Implementation,
    *,
    problems: Sequence[StatsProblem],
    time_limit_s: float | None,
    verifier: Verifier = CHAIN_VERIFIER,
) -> tuple[StatsResult, Decoded | None]:
    """Decode every target's and head kind's rows with one implementation, verified by
    ``verifier``, and fit them (the decoded rows come back too, ``None`` when it raised
    or ran past ``time_limit_s``: a recorded result, never a crash)."""
    config = problems[0].config
    with intra_op_threads(cpu_threads(config.device)):
        return _decode_and_fit(
            implementation, problems=problems, time_limit_s=time_limit_s, verifier=verifier
        )


def _decode_and_fit(
    implementation: Implementation,
    *,
    problems: Sequence[StatsProblem],
    time_limit_s: float | None,
    verifier: Verifier,
) -> tuple[StatsResult, Decoded | None]:
    config = problems[0].config
    started = time.perf_counter()
    outcome = guarded_call(
        lambda: {
            problem.target.name: {
                kind: decode_rows(
                    implementation.sampler_class,
                    problem=problem,
                    head_kind=kind,
                    seed=config.seed,
                    verifier=verifier,
                )
                for kind in config.head_kinds
            }
            for problem in problems
        },
        time_limit_s=time_limit_s,
        owner=implementation.name,
    )
    if outcome.error is not None:
        wall_s = time.perf_counter() - started
        return failed_result(
            implementation.name,
            config=oracle_config(problems),
            error=outcome.error,
            wall_s=wall_s,
            verifier=verifier.name,
        ), None
    decoded = outcome.returned()
    result = fit_decoded(
        implementation.name,
        decoded=decoded,
        problems=problems,
        wall_s=time.perf_counter() - started,
        verifier=verifier.name,
    )
    return result, decoded


def run_stats(
    implementation: Implementation,
    *,
    config: StatsConfig = DEFAULT_CONFIG,
    problems: Sequence[StatsProblem] | None = None,
    verifier: Verifier = CHAIN_VERIFIER,
) -> StatsResult:
    """The oracle's verdict on one implementation at ``config`` (every target, in the
    scope ``scope_under`` gives it), under ``verifier``, without a time limit; given
    ``problems``, those are decoded as they are."""
    if problems is not None:
        result, _ = decode_and_fit(
            implementation, problems=problems, time_limit_s=None, verifier=verifier
        )
        return result
    scope = scope_under(config, verifier=verifier, implementation=implementation)
    if scope.config is None:
        return not_run_result(implementation.name, scope=scope, verifier=verifier)
    result, _ = decode_and_fit(
        implementation,
        problems=build_problems(scope.config),
        time_limit_s=None,
        verifier=verifier,
    )
    return with_scope(result, scope)


def with_scope(result: StatsResult, scope: Scope) -> StatsResult:
    """``result`` stating what its decode was cut to and which heads it left out."""
    return replace(result, cuts=scope.cuts, heads_not_run=scope.heads_not_run)


def not_run_result(name: str, *, scope: Scope, verifier: Verifier) -> StatsResult:
    """No row decoded: every head of the config is outside the implementation's contract."""
    return StatsResult(
        name=name,
        rows={},
        alpha=DEFAULT_CONFIG.alpha,
        family_size=0,
        statistics=(),
        marginals=(),
        mean_accepted_length={},
        verifier=verifier.name,
        cuts=scope.cuts,
        heads_not_run=scope.heads_not_run,
    )


# -- the expectations -------------------------------------------------------------------------
def expected_rejected(name: str, roles: Roles = DEFAULT_ROLES) -> bool:
    """Whether ``name``'s role expects the oracle to reject it."""
    return name == roles.buggy or name in roles.expect_fail


def meets_expectation(result: StatsResult, roles: Roles = DEFAULT_ROLES) -> bool:
    """The pair's buggy side: rejected, and not by anything confined to position 0 (both
    walks condition the first token on the same anchor). An ``expect_fail`` name:
    rejected. Everything else: passes."""
    if not expected_rejected(result.name, roles):
        return result.passed
    if result.error is not None or not result.rejected:
        return False
    return result.name != roles.buggy or not result.rejected_at_position(0)


def expectations_hold(results: dict[str, StatsResult], roles: Roles = DEFAULT_ROLES) -> bool:
    return all(meets_expectation(r, roles) for r in results.values())


@dataclass
class OracleRun:
    """Every implementation at one config under every verifier (each in the scope it
    ran, ``scope_under``: the rows cut for a slow verifier or an interpreted sampler,
    the heads outside its contract left out), the first verifier's decoded rows of the
    implementations it ran at ``problems``, and the power curves."""

    config: StatsConfig
    by_verifier: dict[str, dict[str, StatsResult]]  # verifier, then implementation
    decoded: dict[str, Decoded]  # first verifier's, at ``problems``: implementation, target, head
    problems: tuple[StatsProblem, ...]  # the first verifier's: one per target, in order
    curves: list[PowerCurve] = field(default_factory=list)  # filled by the report, per head
    scopes: dict[str, dict[str, Scope]] = field(default_factory=dict)  # verifier, implementation

    @property
    def problem(self) -> StatsProblem:
        """The first target's problem: the one power is drawn at."""
        return self.problems[0]

    @property
    def results(self) -> dict[str, StatsResult]:
        """Each implementation's result under the first verifier."""
        return next(iter(self.by_verifier.values()))

    def every_result(self) -> list[StatsResult]:
        return [r for results in self.by_verifier.values() for r in results.values()]

    def results_of(self, name: str) -> list[StatsResult]:
        """One implementation's results, one per verifier, in the run's order."""
        return [results[name] for results in self.by_verifier.values() if name in results]


def default_implementations(roles: Roles = DEFAULT_ROLES) -> list[Implementation]:
    """``fixed``, and ``legacy`` where a role expects it rejected (the default pair, or
    ``expect_fail``): with another pair, legacy has no role in the oracle."""
    wanted = [FIXED, *([LEGACY] if expected_rejected(LEGACY, roles) else [])]
    return builtin_implementations(tuple(wanted))


def _scope(config: StatsConfig, *, verifier: Verifier, implementation: Implementation) -> Scope:
    """``scope_under``, asked of the implementation's worker where the judge holds a
    stand-in for a plug-in loaded there only (which only ``--isolate`` makes)."""
    if issubclass(implementation.sampler_class, WorkerOnlySampler):
        from harness.pipeline.isolation import isolated_scope

        return isolated_scope(implementation, config=config, verifier=verifier)
    return scope_under(config, verifier=verifier, implementation=implementation)


def run_oracle(
    config: StatsConfig,
    *,
    implementations: Sequence[Implementation] | None = None,
    options: RunOptions = DEFAULT_OPTIONS,
    verifiers: Sequence[Verifier] = (CHAIN_VERIFIER,),
) -> OracleRun:
    """Decode and fit every implementation (default: fixed and legacy) at ``config``
    under every verifier (default: ours alone); ``options.time_limit_s`` bounds each
    implementation's decode (every target and head kind) under one verifier; with
    ``options.isolate`` each decodes in its worker."""
    progress, time_limit_s = options.progress, options.time_limit_s
    if not verifiers or len({v.name for v in verifiers}) != len(verifiers):
        raise StatsError(f"verifiers must be distinct and not empty, got {list(verifiers)}")
    chosen = list(implementations) if implementations is not None else default_implementations()
    scopes = {
        v.name: {i.name: _scope(config, verifier=v, implementation=i) for i in chosen}
        for v in verifiers
    }
    first = scope_under(config, verifier=verifiers[0]).config
    assert first is not None  # a verifier alone leaves every head
    ran_at = {s.config for by_impl in scopes.values() for s in by_impl.values()} - {None}
    built = {c: build_problems(c) for c in dict.fromkeys([first, *ran_at]) if c is not None}
    by_verifier: dict[str, dict[str, StatsResult]] = {}
    decoded: dict[str, Decoded] = {}
    for verifier in verifiers:
        results = by_verifier.setdefault(verifier.name, {})
        for impl in chosen:
            scope = scopes[verifier.name][impl.name]
            progress(f"stats: {impl.name} under {verifier.name} ({scope_label(scope)}) ...")
            if scope.config is None:
                results[impl.name] = not_run_result(impl.name, scope=scope, verifier=verifier)
                continue
            if options.isolate:
                from harness.pipeline.isolation import isolated_decode_and_fit

                result, run = isolated_decode_and_fit(
                    impl, config=scope.config, time_limit_s=time_limit_s, verifier=verifier
                )
            else:
                result, run = decode_and_fit(
                    impl, problems=built[scope.config], time_limit_s=time_limit_s, verifier=verifier
                )
            results[impl.name] = with_scope(result, scope)
            if run is not None and verifier is verifiers[0] and scope.config == first:
                decoded[impl.name] = run
    return OracleRun(
        config=config,
        by_verifier=by_verifier,
        decoded=decoded,
        problems=built[first],
        scopes=scopes,
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def scope_label(scope: Scope) -> str:
    """``3 targets x 3 heads``, and what was cut or left out, for the progress line."""
    if scope.config is None:
        return "no head inside its contract: not run"
    ran = scope.config
    rows = ", ".join(f"{t.name} {ran.target_rows(t)}" for t in ran.targets)
    cut = f"; cut by {', '.join(c.by for c in scope.cuts)}" if scope.cuts else ""
    return (
        f"{_count(len(ran.targets), 'target')} x {_count(len(ran.head_kinds), 'head')}, "
        f"rows per head {rows}, "
        f"{_count(ran.rounds, 'round')}{cut}"
    )
