"""``judge()``: the one function every entry point calls for a verdict.

It takes the cases, the implementations and the options, runs the implementations' code
where the options say (``RunOptions.isolate``: a worker per trust domain, else in
process; ``harness.executor``), runs the stages (the comparison, the statistical oracle, the
eliminated work) and returns a ``Judgement`` (``harness.judgement``). The command line,
the Python API (``harness.testing``), the pytest plugin and the versions table read
their verdicts from it, so "lossless" means the same on every path. The run's intra-op
threads (``RunOptions.threads``) hold for the whole judgement.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from harness.defaults import LEGACY
from harness.devices import intra_op_threads
from harness.executor import (
    BUILTINS,
    IN_PROCESS,
    Executor,
    ForkedExecutor,
    InProcessExecutor,
    Relayed,
    WorkerFailure,
)
from harness.judgement import Judgement, OracleVerdict, WorkVerdict, judge_records
from harness.options import RunOptions
from harness.progress import Progress, no_progress

T = TypeVar("T")

if TYPE_CHECKING:
    from harness.case import Case
    from harness.oracles.problem import StatsConfig
    from harness.oracles.stats import OracleRun
    from harness.plugins.implementations import Implementation


def judge(
    cases: Sequence[Case],
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    executor: Executor | None = None,
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
    finished cases are kept there and ``options.resume`` reuses them.

    The implementations run on the executor ``options.isolate`` asks for, started here
    and stopped before the verdict; a caller that started it already (to load its
    plug-ins there) passes it as ``executor``, which must be the one the options ask for
    (``ExecutorMismatch`` otherwise).

    The device has one carrier, ``options.device``: every case runs there (a case
    loaded from a file for another device is moved), as do the oracle and the work."""
    from harness.pipeline.isolation import check_executor, make_executor

    if executor is None:
        with make_executor(isolate=options.isolate) as chosen:
            return judge(
                cases,
                implementations,
                options=options,
                executor=chosen,
                power=power,
                work=work,
                oracle_config=oracle_config,
                oracle_on=oracle_on,
                journal=journal,
            )
    check_executor(executor, isolate=options.isolate)
    cases = on_device(cases, options.device)
    timing: dict[str, float] = {}
    decoded = [i for i in implementations if oracle_on is None or i.name in oracle_on]
    with intra_op_threads(options.threads):
        pending = None
        if options.stats:
            pending = start_oracle(
                decoded,
                options=options,
                executor=executor,
                power=power,
                config=oracle_config,
                alone=not cases and not work,
            )
        try:
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
            eliminated = None
            if work:
                eliminated = judge_work(implementations, options=options, executor=executor)
            oracle = pending.verdict() if pending is not None else None
        finally:
            if pending is not None:
                pending.stop()
        if oracle is not None:
            timing["stats_s"] = round(oracle.wall_s, 3)
        if eliminated is not None:
            timing["work_s"] = round(eliminated.wall_s, 3)
    return judge_records(records, options=options, oracle=oracle, work=eliminated, timing=timing)


def on_device(cases: Sequence[Case], device: str) -> list[Case]:
    """``cases``, each on ``device`` (the run's, ``RunOptions.device``)."""
    return [case if case.device == device else case.with_changes(device=device) for case in cases]


def start_oracle(
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    executor: Executor,
    power: bool,
    config: StatsConfig | None,
    alone: bool = False,
) -> OracleLater | OracleBeside:
    """The oracle stage, started: in processes forked beside this one where
    ``_oracle_beside`` allows, the shares fit in ``options.jobs`` and something runs
    beside it (the matrix or the work, or another share: ``alone``, nothing else runs),
    else run when its verdict is asked for (``judge_oracle``, after the matrix and the
    work). The verdict is the same."""
    shares = oracle_shares(implementations, jobs=options.jobs, power=power)
    beside = _oracle_beside(options, executor=executor) and len(shares) <= options.jobs
    if beside and (len(shares) > 1 or not alone):
        order = [i.name for i in implementations]
        return OracleBeside(shares, order=order, options=options, power=power, config=config)
    return OracleLater(
        partial(
            judge_oracle,
            implementations,
            options=options,
            executor=executor,
            power=power,
            config=config,
        )
    )


class OracleLater:
    """The oracle's verdict, computed in this process when asked for."""

    def __init__(self, compute: Callable[[], OracleVerdict]) -> None:
        self.compute = compute

    def verdict(self) -> OracleVerdict:
        return self.compute()

    def stop(self) -> None:
        """Nothing runs until ``verdict()``."""


def _oracle_beside(options: RunOptions, *, executor: Executor) -> bool:
    """Whether the oracle's decodes run in processes forked beside this one
    (``options.jobs`` > 1): only where the implementations run in this process, on the
    CPU, with one intra-op thread (what a fork carries)."""
    return (
        options.jobs > 1
        and isinstance(executor, InProcessExecutor)
        and options.device == "cpu"
        and options.threads == 1
    )


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
    options.progress("statistical oracle ...")
    started = time.perf_counter()
    run = _oracle_run(
        implementations, options=options, executor=executor, power=power, config=config
    )
    return _oracle_verdict(run, options=options, wall_s=time.perf_counter() - started)


def _oracle_run(
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    executor: Executor = IN_PROCESS,
    power: bool,
    config: StatsConfig | None,
) -> OracleRun:
    """The oracle's decodes and fits (``judge_oracle``), without the verdict."""
    from harness.oracles.part import run_statistics
    from harness.oracles.problem import DEFAULT_CONFIG
    from harness.oracles.verifiers import available_verifiers, verifiers_named

    chosen = config or replace(
        DEFAULT_CONFIG,
        rows=options.oracle_rows,
        seed=options.seed,
        device=options.device,
        verifier_noise=options.verifier_noise,
    )
    verifiers = (
        available_verifiers() if options.verifiers is None else verifiers_named(options.verifiers)
    )
    return run_statistics(
        chosen,
        implementations=implementations,
        power=power,
        options=options,
        verifiers=verifiers,
        executor=executor,
    )


def _oracle_verdict(run: OracleRun, *, options: RunOptions, wall_s: float) -> OracleVerdict:
    return OracleVerdict.of(run, roles=options.roles, wall_s=wall_s)


class OracleBeside:
    """The oracle's decodes in processes forked beside this one (``ForkedExecutor``), one
    per share of the implementations (``oracle_shares``; legacy's share draws its power
    curves, since ``run_statistics`` draws them where legacy is decoded), while this
    process goes on; ``verdict()`` joins their runs in ``order``. A share's process that
    gives no answer (it died, was killed or stopped, or answered what cannot cross) is
    the failure of the implementations whose code ran there, as a worker's is under
    ``--isolate``: each gets the failed result the isolated executor's would give."""

    def __init__(
        self,
        shares: Sequence[Sequence[Implementation]],
        *,
        order: Sequence[str],
        options: RunOptions,
        power: bool,
        config: StatsConfig | None,
    ) -> None:
        options.progress("statistical oracle ...")
        self.started = time.perf_counter()
        self.options, self.power, self.config = options, power, config
        self.order = list(order)
        self.executor = ForkedExecutor()
        self.shares = [
            (
                share,
                self.executor.submit(
                    Relayed(_share_task, options.progress),
                    share,
                    options=options,
                    power=power,
                    config=config,
                ),
            )
            for share in shares
        ]

    def verdict(self) -> OracleVerdict:
        from harness.oracles.stats import merged_runs

        runs = []
        for share, future in self.shares:
            try:
                runs.append(future.result())
            except WorkerFailure as failure:
                runs.append(self._failed_share(share, failure))
        run = merged_runs(runs, order=self.order)
        return _oracle_verdict(run, options=self.options, wall_s=time.perf_counter() - self.started)

    def _failed_share(self, share: Sequence[Implementation], failure: WorkerFailure) -> OracleRun:
        """The share's run as the isolated executor gives it when every task of its
        implementations ends in ``failure``: their failed results, no decode, no curve."""
        names = ", ".join(i.name for i in share)
        self.options.progress(f"statistical oracle: {names}: {failure}")
        return _oracle_run(
            share,
            options=replace(self.options, progress=no_progress),
            executor=_NoAnswer(failure),
            power=self.power,
            config=self.config,
        )

    def stop(self) -> None:
        self.executor.shutdown(cancel_futures=True)


class _NoAnswer(InProcessExecutor):
    """Every task ends in ``failure``, as the tasks of a process that died."""

    def __init__(self, failure: WorkerFailure) -> None:
        self.failure = failure

    def submit(
        self, fn: Callable[..., T], /, *args: object, **kwargs: object
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        future.set_exception(self.failure)
        return future


def _share_task(
    progress: Progress,
    implementations: Sequence[Implementation],
    *,
    options: RunOptions,
    power: bool,
    config: StatsConfig | None,
) -> OracleRun:
    """One process's share of the oracle: its implementations' decodes and fits."""
    return _oracle_run(
        implementations,
        options=replace(options, progress=progress),
        power=power,
        config=config,
    )


def oracle_shares(
    implementations: Sequence[Implementation], *, jobs: int, power: bool
) -> list[list[Implementation]]:
    """``implementations`` dealt into shares that never mix trust domains (a plug-in's
    process runs no other code, so its death blames it alone, as under ``--isolate``):
    each plug-in a share of its own (more than ``jobs`` shares where the plug-ins are
    ``jobs`` or more: ``start_oracle`` then runs the oracle here); the built-ins into
    the shares left of ``jobs`` (at least one) of about equal work, the longest first
    (legacy with its power curves counts three decodes); each share in the given order;
    an empty share is left out."""

    def weight(implementation: Implementation) -> int:
        return 3 if power and implementation.name == LEGACY else 1

    builtins = [i for i in implementations if i.trust_domain == BUILTINS]
    plugins = [[i] for i in implementations if i.trust_domain != BUILTINS]
    shares: list[list[Implementation]] = [
        [] for _ in range(min(max(1, jobs - len(plugins)), len(builtins)))
    ]
    for implementation in sorted(builtins, key=weight, reverse=True):
        lightest = min(shares, key=lambda share: sum(weight(i) for i in share))
        lightest.append(implementation)
    index = {i.name: n for n, i in enumerate(implementations)}
    dealt = [*shares, *plugins]
    return [sorted(share, key=lambda i: index[i.name]) for share in dealt if share]


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
