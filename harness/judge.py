"""``judge()``: the one function every entry point calls for a verdict.

It takes the cases, the implementations, the options and the executor that runs the
implementations' code (``harness.executor``: in process, or a worker per trust domain,
chosen once by the caller), runs the stages (the comparison, the statistical oracle, the
eliminated work) and returns a ``Judgement`` (``harness.judgement``). The command line,
the Python API (``harness.testing``), the pytest plugin and the versions table read
their verdicts from it, so "lossless" means the same on every path. The run's intra-op
threads (``RunOptions.threads``) hold for the whole judgement.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from harness.devices import intra_op_threads
from harness.executor import IN_PROCESS, Executor
from harness.judgement import Judgement, OracleVerdict, WorkVerdict, judge_records
from harness.options import RunOptions

if TYPE_CHECKING:
    from harness.case import Case
    from harness.oracles.problem import StatsConfig
    from harness.plugins.implementations import Implementation


def judge(
    cases: Sequence[Case],
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    executor: Executor = IN_PROCESS,
    power: bool = False,
    work: bool = False,
    oracle_config: StatsConfig | None = None,
    oracle_on: Sequence[str] | None = None,
    journal: Path | None = None,
) -> Judgement:
    """Judge ``implementations`` on ``cases`` under ``options``: each case's per-call
    checks and the ledger between the pair (no cases: none), the statistical oracle
    when ``options.stats`` (at ``oracle_config``, default the report's configuration on
    the options' seed and device; ``power`` adds legacy's power curves), and with
    ``work`` the work the fix eliminates, on the options' device. ``oracle_on`` names
    the implementations the oracle decodes (default: all; the Python API leaves out the
    reference it compares against). With a ``journal``,
    finished cases are kept there and ``options.resume`` reuses them."""
    timing: dict[str, float] = {}
    with intra_op_threads(options.threads):
        records = []
        if cases:
            from harness.pipeline.compare import compare

            started = time.perf_counter()
            records = compare(
                list(cases),
                list(implementations),
                options=options,
                journal=journal,
                executor=executor,
            )
            timing["matrix_s"] = round(time.perf_counter() - started, 3)
        oracle = None
        if options.stats:
            decoded = [i for i in implementations if oracle_on is None or i.name in oracle_on]
            oracle = judge_oracle(
                decoded, options=options, executor=executor, power=power, config=oracle_config
            )
            timing["stats_s"] = round(oracle.wall_s, 3)
        eliminated = None
        if work:
            eliminated = judge_work(implementations, options=options, executor=executor)
            timing["work_s"] = round(eliminated.wall_s, 3)
    return judge_records(records, options=options, oracle=oracle, work=eliminated, timing=timing)


def judge_oracle(
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    executor: Executor = IN_PROCESS,
    power: bool,
    config: StatsConfig | None = None,
) -> OracleVerdict:
    """The statistical oracle on ``implementations``: at ``config`` (default: the
    report's, on the options' seed and device) under the verifiers ``options.verifiers``
    names (default: every one available here), each held to its role."""
    from harness.oracles.part import run_statistics, statistical_coverage, statistical_verdicts
    from harness.oracles.problem import DEFAULT_CONFIG
    from harness.oracles.stats import expectations_hold
    from harness.oracles.verifiers import available_verifiers, verifiers_named

    options.progress("statistical oracle ...")
    started = time.perf_counter()
    chosen = config or replace(
        DEFAULT_CONFIG,
        seed=options.seed,
        device=options.device,
        verifier_noise=options.verifier_noise,
    )
    verifiers = (
        available_verifiers() if options.verifiers is None else verifiers_named(options.verifiers)
    )
    run = run_statistics(
        chosen,
        implementations=implementations,
        power=power,
        options=options,
        verifiers=verifiers,
        executor=executor,
    )
    roles = options.roles
    return OracleVerdict(
        run=run,
        coverage=statistical_coverage(run, roles=roles),
        statisticals=statistical_verdicts(run),
        ok=all(expectations_hold(results, roles) for results in run.by_verifier.values()),
        wall_s=time.perf_counter() - started,
    )


def judge_work(
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    executor: Executor = IN_PROCESS,
) -> WorkVerdict:
    """The work the fix eliminates, counted on the options' device for every
    implementation, the pair compared."""
    from harness.measure.work import collect_work

    options.progress("eliminated work ...")
    started = time.perf_counter()
    works = collect_work(
        seed=options.seed,
        device=options.device,
        progress=options.progress,
        implementations=implementations,
        pair=options.roles.pair,
        executor=executor,
    )
    return WorkVerdict.of(
        works,
        expect_fail=frozenset(options.roles.expect_fail),
        wall_s=time.perf_counter() - started,
    )
