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

What one decode runs is its scope (``harness.oracles.scope``); the result
(``harness.oracles.result``) states it, and its rows, family and detection bounds are
those of the scope it ran. Each decode is a task (``decode_task``) run on the caller's
executor in the implementation's trust domain (``harness.executor``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness.defaults import FIXED, LEGACY
from harness.devices import intra_op_threads
from harness.executor import IN_PROCESS, Executor, TimeLimited, WorkerFailure, for_domain
from harness.options import DEFAULT_OPTIONS, Roles, RunOptions
from harness.oracles.decode import cpu_threads
from harness.oracles.fits import (
    HeadTables,
    Marginal,
    Statistic,
    family_size,
    head_tables,
    statistics_of,
)
from harness.oracles.gof import holm_rejections
from harness.oracles.percall import held_decode
from harness.oracles.power import PowerCurve, detection_bounds
from harness.oracles.problem import (
    DEFAULT_CONFIG,
    StatsConfig,
    StatsError,
    StatsProblem,
    build_problems,
)
from harness.oracles.result import StatsResult as StatsResult
from harness.oracles.result import best_bounds as best_bounds
from harness.oracles.result import not_ruled_out as not_ruled_out
from harness.oracles.result import where as where
from harness.oracles.scope import Scope as Scope
from harness.oracles.scope import cut_all as cut_all
from harness.oracles.scope import cut_config as cut_config
from harness.oracles.scope import heads_outside as heads_outside
from harness.oracles.scope import scope_in_domain
from harness.oracles.scope import scope_label as scope_label
from harness.oracles.scope import scope_of as scope_of
from harness.oracles.scope import scope_under as scope_under
from harness.oracles.sequential import first_stage_alpha, run_stages, stage_decoder, wants_stages
from harness.pipeline.call import failed_in_worker, guarded_call
from harness.pipeline.call_findings import HeldCalls
from harness.pipeline.results import RaisedError
from harness.plugins.implementations import Implementation, builtin_implementations
from reference.decode import DecodeResult
from reference.verifier import CHAIN_VERIFIER, Verifier

DEFAULT_ROLES = Roles()


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
    first_alpha = first_stage_alpha(problems[0].config)  # the stages spend the rest
    verdicts = holm_rejections([s.p_value for s in statistics], alpha=first_alpha)
    bounds = detection_bounds(tables, gamma=problems[0].config.gamma, level=first_alpha / size)
    return StatsResult(
        name=name,
        rows=target_rows(problems),
        alpha=alpha,
        first_alpha=first_alpha,
        family_size=len(statistics),
        statistics=tuple(replace(s, rejected=r) for s, r in zip(statistics, verdicts, strict=True)),
        marginals=tuple(marginals),
        mean_accepted_length={
            target: {h: run.mean_accepted_length for h, run in runs.items()}
            for target, runs in decoded.items()
        },
        bounds=bounds,
        verifier=verifier,
        shared_noise=all(run.shared_noise for runs in decoded.values() for run in runs.values()),
        server=next((run.server for runs in decoded.values() for run in runs.values()), None),
        law=problems[0].config.law,
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

    def decode_every_head() -> tuple[Decoded, HeldCalls]:
        decoded: Decoded = {}
        held = []
        for problem in problems:
            for kind in config.head_kinds:
                run, calls = held_decode(
                    implementation.sampler_class,
                    problem=problem,
                    head_kind=kind,
                    seed=config.seed,
                    verifier=verifier,
                )
                decoded.setdefault(problem.target.name, {})[kind] = run
                held.append(calls)
        return decoded, HeldCalls.merged(held)

    outcome = guarded_call(decode_every_head, time_limit_s=time_limit_s, owner=implementation.name)
    if outcome.error is not None:
        wall_s = time.perf_counter() - started
        return failed_result(
            implementation.name,
            config=oracle_config(problems),
            error=outcome.error,
            wall_s=wall_s,
            verifier=verifier.name,
        ), None
    decoded, held = outcome.returned()
    name = implementation.name
    result = fit_decoded(name, decoded=decoded, problems=problems, verifier=verifier.name)
    config = oracle_config(problems)
    if not wants_stages(result, config=config):  # nothing suspicious: nothing to add
        return replace(result, held_calls=held, wall_s=time.perf_counter() - started), decoded
    decode = stage_decoder(implementation.sampler_class, verifier=verifier)
    spent_s = time.perf_counter() - started
    left_s = None if time_limit_s is None else max(time_limit_s - spent_s, 1e-3)
    staged = guarded_call(
        functools.partial(run_stages, result, config=config, decode=decode),
        time_limit_s=left_s,
        owner=name,
    )
    wall_s = time.perf_counter() - started
    if staged.error is not None:  # the implementation failed a stage: no verdict
        failed = failed_result(name, config=config, error=staged.error, verifier=verifier.name)
        failed = replace(result, error=failed.error, not_judged=failed.not_judged)
        return replace(failed, wall_s=wall_s), decoded
    stage_list, stage_calls = staged.returned()
    held = HeldCalls.merged([held, stage_calls])
    return replace(result, held_calls=held, stages=stage_list, wall_s=wall_s), decoded


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


@functools.lru_cache(maxsize=4)
def problems_of(config: StatsConfig) -> tuple[StatsProblem, ...]:
    """The problems of ``config``, built once per process (every implementation decodes
    the same rows)."""
    return tuple(build_problems(config))


def decode_task(
    implementation: Implementation,
    *,
    config: StatsConfig,
    time_limit_s: float | None,
    verifier: Verifier,
) -> tuple[StatsResult, Decoded | None]:
    """A task: ``decode_and_fit`` of one implementation at ``config`` (its problems built
    where it runs) under ``verifier``."""
    return decode_and_fit(
        implementation, problems=problems_of(config), time_limit_s=time_limit_s, verifier=verifier
    )


def decode_in_domain(
    implementation: Implementation,
    *,
    config: StatsConfig,
    time_limit_s: float | None,
    verifier: Verifier,
    executor: Executor,
) -> tuple[StatsResult, Decoded | None]:
    """``decode_task`` on ``executor`` in the implementation's trust domain; a task that
    gives no answer (its worker died or hung), or answers something that is not this
    result, is the implementation's failure."""
    future = for_domain(executor, implementation.trust_domain).submit(
        TimeLimited(decode_task, time_limit_s),
        implementation,
        config=config,
        time_limit_s=time_limit_s,
        verifier=verifier,
    )
    try:
        answer = future.result()
    except WorkerFailure as failure:
        error = failed_in_worker(failure)
        return failed_result(
            implementation.name, config=config, error=error, verifier=verifier.name
        ), None
    stats, decoded = answer if isinstance(answer, tuple) and len(answer) == 2 else (None, None)
    if (
        not isinstance(stats, StatsResult)
        or stats.name != implementation.name
        or stats.verifier != verifier.name
    ):
        not_this = WorkerFailure("BadAnswer", "the worker's answer is not this result")
        failed = failed_result(
            implementation.name,
            config=config,
            error=failed_in_worker(not_this),
            verifier=verifier.name,
        )
        return failed, None
    return stats, decoded


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
    rejected, or one of its calls failed a per-call check. Everything else: passes (no
    rejection and no finding on its calls)."""
    if not expected_rejected(result.name, roles):
        return result.passed
    if result.error is not None:
        return False
    if result.name != roles.buggy:
        return result.rejected or bool(result.held_calls.findings)
    return result.rejected and not result.rejected_at_position(0)


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


def merged_runs(runs: Sequence[OracleRun], *, order: Sequence[str]) -> OracleRun:
    """One run from ``runs`` at one config under the same verifiers, each on its own
    implementations (decoded in processes side by side), listed in ``order``."""
    first = runs[0]

    def in_order(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
        joined = {name: value for part in parts for name, value in part.items()}
        return {name: joined[name] for name in order if name in joined}

    return OracleRun(
        config=first.config,
        by_verifier={
            verifier: in_order([run.by_verifier[verifier] for run in runs])
            for verifier in first.by_verifier
        },
        decoded=in_order([run.decoded for run in runs]),
        problems=first.problems,
        curves=[curve for run in runs for curve in run.curves],
        scopes={
            verifier: in_order([run.scopes[verifier] for run in runs]) for verifier in first.scopes
        },
    )


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
    executor: Executor = IN_PROCESS,
) -> OracleRun:
    """Decode and fit every implementation (default: fixed and legacy) at ``config``
    under every verifier (default: ours alone), each on ``executor`` in its trust domain;
    ``options.time_limit_s`` bounds each implementation's decode (every target and head
    kind) under one verifier."""
    progress, time_limit_s = options.progress, options.time_limit_s
    if not verifiers or len({v.name for v in verifiers}) != len(verifiers):
        raise StatsError(f"verifiers must be distinct and not empty, got {list(verifiers)}")
    chosen = list(implementations) if implementations is not None else default_implementations()
    problems_of.cache_clear()  # built afresh for each run in this process
    scopes = {
        v.name: {
            i.name: scope_in_domain(config, verifier=v, implementation=i, executor=executor)
            for i in chosen
        }
        for v in verifiers
    }
    first = scope_under(config, verifier=verifiers[0]).config
    assert first is not None  # a verifier alone leaves every head
    ran_at = {s.config for by_impl in scopes.values() for s in by_impl.values()} - {None}
    built = {c: problems_of(c) for c in dict.fromkeys([first, *ran_at]) if c is not None}
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
            result, run = decode_in_domain(
                impl,
                config=scope.config,
                time_limit_s=time_limit_s,
                verifier=verifier,
                executor=executor,
            )
            results[impl.name] = with_scope(result, scope)
            if run is not None and verifier is verifiers[0] and scope.config == first:
                decoded[impl.name] = run
    problems_of.cache_clear()  # the run keeps the problems it reports
    return OracleRun(
        config=config,
        by_verifier=by_verifier,
        decoded=decoded,
        problems=built[first],
        scopes=scopes,
    )
