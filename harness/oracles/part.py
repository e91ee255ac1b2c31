"""The statistical oracle's part of a run, as data: the oracle run (with legacy's power
curves when asked), each implementation's ``Statistical`` (its part in the lossless
verdict), and what the oracle covered. ``harness.judge`` runs it for every entry point;
``harness.render.statistics`` presents the run."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace

from harness.defaults import LEGACY, VerifierNoise
from harness.executor import IN_PROCESS, Executor
from harness.options import DEFAULT_OPTIONS, Roles, RunOptions
from harness.oracles.decode import life_batches
from harness.oracles.power import TARGET_POWER, run_power_curves
from harness.oracles.problem import StatsConfig, group_label
from harness.oracles.stats import (
    DEFAULT_ROLES,
    OracleRun,
    StatsResult,
    best_bounds,
    run_oracle,
)
from harness.pipeline.coverage import StatisticalCoverage
from harness.pipeline.verdicts import Statistical
from harness.plugins.implementations import Implementation, builtin_implementations
from reference.verifier import CHAIN_VERIFIER, Verifier


def statistical_coverage(
    oracle: OracleRun, *, roles: Roles = DEFAULT_ROLES
) -> StatisticalCoverage | None:
    """What the oracle exercised, from its run: rows per group and target, the life of
    one instance (from the far target's rounds), and the detection bound at the rows of
    the fixed side's run (else the first implementation that passed, else the first
    that ran), with the calls and positions of that run held to each per-call check."""
    ran = [r for r in oracle.results.values() if r.error is None and r.name in oracle.decoded]
    if not ran:
        return None
    chosen = next(
        (r for r in ran if r.name == roles.fixed and r.passed),
        next((r for r in ran if r.passed), ran[0]),
    )
    problem = oracle.problem
    rounds = max(run.rounds for run in oracle.decoded[chosen.name][problem.target.name].values())
    calls = [batch for r in range(rounds) for batch in life_batches(problem, r)]
    restaged = sum(
        1
        for before, after in itertools.pairwise(calls)
        if before.shape != after.shape or not bool((before == after).all())
    )
    first = chosen.bounds[0] if chosen.bounds else None
    return StatisticalCoverage(
        implementation=chosen.name,
        targets={t.name: t.draft_weight for t in oracle.config.targets},
        rows_per_group={
            p.target.name: {
                group_label(g): int((p.row_group == i).sum()) for i, g in enumerate(p.config.groups)
            }
            for p in oracle.problems
        },
        rounds=rounds,
        calls_per_instance=len(calls),
        restagings_per_instance=restaged,
        batch_sizes=tuple(sorted({int(batch.shape[0]) for batch in calls})),
        power=first.power if first else TARGET_POWER,
        level=chosen.test_level,
        bounds=best_bounds(chosen.bounds),
        calls_held=chosen.held_calls.calls,
        positions_held=dict(chosen.held_calls.positions),
    )


def statistical_verdicts(oracle: OracleRun) -> dict[str, Statistical]:
    """Each implementation's statistical part, as its lossless verdict takes it: passed
    only when it passes under every verifier; otherwise the first verifier's failure,
    its carriers named with that verifier when the run had more than one."""
    independent = oracle.config.verifier_noise is VerifierNoise.INDEPENDENT
    return {
        name: replace(combined_statistical(oracle.results_of(name)), independent=independent)
        for name in oracle.results
    }


def combined_statistical(results: Sequence[StatsResult]) -> Statistical:
    """One verdict from one implementation's results under several verifiers."""
    several = len(results) > 1
    for result in results:
        verdict = result.statistical()
        if not verdict.failed:
            continue
        if several and verdict.carried_by:
            named = tuple(f"{result.verifier}:{c}" for c in verdict.carried_by)
            return replace(verdict, carried_by=named)
        if several and verdict.error is not None:
            return replace(verdict, error=f"under {result.verifier}: {verdict.error}")
        if several and verdict.not_judged is not None:
            return replace(verdict, not_judged=f"under {result.verifier}: {verdict.not_judged}")
        return verdict
    ran = [r for r in results if r.ran]
    if not ran:  # every head outside its contract: nothing decoded
        return results[0].statistical()
    p_values = [r.p_value for r in ran if not math.isnan(r.p_value)]
    scopes = [f"under {r.verifier}: {r.scope()}" if several else r.scope() for r in ran]
    return Statistical(
        ran=True,
        rejected=False,
        p_value=min(p_values) if p_values else None,
        scope="; ".join(s for s, r in zip(scopes, ran, strict=True) if r.scope()),
        randomness=next((r.randomness() for r in ran if r.randomness()), ""),
        stages="; ".join(
            f"under {r.verifier}: {r.stages_note()}" if several else r.stages_note()
            for r in ran
            if r.stages
        ),
    )


def run_statistics(
    config: StatsConfig,
    *,
    implementations: Sequence[Implementation] | None = None,
    power: bool,
    options: RunOptions = DEFAULT_OPTIONS,
    verifiers: Sequence[Verifier] = (CHAIN_VERIFIER,),
    executor: Executor = IN_PROCESS,
) -> OracleRun:
    """Run the oracle on ``implementations`` (default: fixed and legacy) under every
    verifier (each on ``executor`` in its trust domain), with ``power`` also legacy's
    power curve per head kind (first verifier)."""
    oracle = run_oracle(
        config,
        implementations=implementations,
        options=options,
        verifiers=verifiers,
        executor=executor,
    )
    legacy = oracle.results.get(LEGACY)
    if power and legacy is not None and legacy.error is None and legacy.not_judged is None:
        oracle.curves = run_power_curves(
            builtin_implementations((LEGACY,))[0],
            problem=oracle.problem,
            level=legacy.test_level,
            decoded=oracle.decoded.get(LEGACY, {}).get(oracle.problem.target.name),
            progress=options.progress,
        )
    return oracle
