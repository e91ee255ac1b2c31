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
(``harness.upstream.rejection``).
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
)
from harness.pipeline.coverage import BoundRow
from harness.pipeline.runner import RaisedError, guarded_call
from harness.pipeline.verdicts import Statistical
from harness.plugins.implementations import Implementation, builtin_implementations
from reference.verifier import CHAIN_VERIFIER, DecodeResult, Verifier

DEFAULT_ROLES = Roles()


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
    wall_s: float = field(default=0.0, compare=False)

    @property
    def rejected(self) -> bool:
        return any(s.rejected for s in self.statistics)

    @property
    def passed(self) -> bool:
        return self.error is None and self.not_judged is None and not self.rejected

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
        """This result as the lossless verdict takes it."""
        if self.not_judged is not None:
            return Statistical(ran=True, not_judged=self.not_judged)
        if self.error is not None:
            return Statistical(ran=True, error=self.error)
        p = None if math.isnan(self.p_value) else self.p_value
        return Statistical(
            ran=True,
            rejected=self.rejected,
            p_value=p,
            carried_by=self.carrier_names(),
            not_ruled_out="" if self.rejected else not_ruled_out(best_bounds(self.bounds)),
        )

    def to_json_dict(self) -> dict[str, Any]:
        """Everything but the wall time, so a report's JSON is the same on every run."""
        body = asdict(self)
        del body["wall_s"]
        body.update(
            rejected=self.rejected,
            passed=self.passed,
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
    """The oracle's verdict on one implementation at ``config`` (every target), under
    ``verifier``, without a time limit."""
    problems = problems if problems is not None else build_problems(config)
    result, _ = decode_and_fit(
        implementation, problems=problems, time_limit_s=None, verifier=verifier
    )
    return result


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


def default_verdict(
    *, config: StatsConfig = DEFAULT_CONFIG
) -> tuple[dict[str, StatsResult], tuple[StatsProblem, ...]]:
    """Fixed and legacy at the config (the default: what the benchmark times)."""
    problems = build_problems(config)
    results = {
        impl.name: run_stats(impl, problems=problems)
        for impl in builtin_implementations((FIXED, LEGACY))
    }
    return results, problems


@dataclass
class OracleRun:
    """Every implementation at one config under every verifier, the first verifier's
    decoded rows, and the power curves."""

    config: StatsConfig
    by_verifier: dict[str, dict[str, StatsResult]]  # verifier, then implementation
    decoded: dict[str, Decoded]  # first verifier's: implementation, target, head kind
    problems: tuple[StatsProblem, ...]  # one per target, in the config's order
    curves: list[PowerCurve] = field(default_factory=list)  # filled by the report, per head

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
    problems = build_problems(config)
    chosen = list(implementations) if implementations is not None else default_implementations()
    by_verifier: dict[str, dict[str, StatsResult]] = {}
    decoded: dict[str, Decoded] = {}
    for verifier in verifiers:
        results = by_verifier.setdefault(verifier.name, {})
        for impl in chosen:
            progress(
                f"stats: {impl.name} under {verifier.name} ({len(config.targets)} targets x "
                f"{len(config.head_kinds)} heads) ..."
            )
            if options.isolate:
                from harness.pipeline.isolation import isolated_decode_and_fit

                results[impl.name], run = isolated_decode_and_fit(
                    impl, config=config, time_limit_s=time_limit_s, verifier=verifier
                )
            else:
                results[impl.name], run = decode_and_fit(
                    impl, problems=problems, time_limit_s=time_limit_s, verifier=verifier
                )
            if run is not None and verifier is verifiers[0]:
                decoded[impl.name] = run
    return OracleRun(config=config, by_verifier=by_verifier, decoded=decoded, problems=problems)
