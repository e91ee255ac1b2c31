"""Where ``judge()`` runs the implementations follows from the options alone: asked for
isolation, it never runs their code in the judging process, and an executor that says
otherwise is refused."""

from __future__ import annotations

import pytest

from harness.executor import IN_PROCESS
from harness.judge import judge
from harness.options import RunOptions
from harness.pipeline.isolation import ExecutorMismatch, IsolatedExecutor
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import parse_impl_spec

EXITS = "exits=tests.plugins.untrusted_samplers:ExitingSampler"  # os._exit(0) on its call


def test_asked_for_isolation_judge_runs_the_code_in_a_worker() -> None:
    judgement = judge(
        [standard_matrix()[0]],
        [parse_impl_spec(EXITS)],
        options=RunOptions(isolate=True, stats=False),
    )  # in process, os._exit(0) would have ended this test's process here
    verdict = judgement.verdict("exits")
    assert not verdict.lossless
    assert any("WorkerDied" in failure.line() for failure in verdict.failures)


def test_an_executor_the_options_do_not_ask_for_is_refused() -> None:
    case = standard_matrix()[0]
    with pytest.raises(ExecutorMismatch, match="isolate=True"):
        judge([case], [], options=RunOptions(isolate=True), executor=IN_PROCESS)
    with IsolatedExecutor() as isolated, pytest.raises(ExecutorMismatch, match="isolate=False"):
        judge([case], [], options=RunOptions(), executor=isolated)
