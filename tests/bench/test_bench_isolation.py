"""Benchmark: what ``--isolate`` costs per case, against in-process runs.

Both run one case for the three built-in implementations (``run_case``: inputs,
three guarded calls, results). The isolated run sends each implementation to the
warm worker process, which rebuilds the case's inputs from the seed and sends the
results back as tensors; the worker's start-up (an import of torch, once per run
and after each crash) is measured separately. Groups: one per shape, so
``--benchmark-group-by=group`` puts in-process and isolated side by side.

Shapes: the standard matrix's size (bs=4, gamma=5, V=1028, H=64, r=16) and a
production-like vocabulary (bs=8, gamma=7, V=32768, H=256, r=256); vanilla head,
folded sampling, float32, CPU.
"""

from __future__ import annotations

import time

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from harness.case import Case, make_case
from harness.options import RunOptions
from harness.pipeline.isolation import WorkerExecutor, make_executor
from harness.pipeline.runner import run_case, run_in_domain
from harness.plugins.implementations import builtin_implementations

SHAPES: dict[str, Case] = {
    "matrix-sized": make_case(bs=4, gamma=5, vocab_size=1028, hidden_size=64, markov_rank=16),
    "V=32768": make_case(bs=8, gamma=7, vocab_size=32768, hidden_size=256, markov_rank=256),
}
ROUNDS = 5


@pytest.mark.bench
@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_bench_case_run(benchmark: BenchmarkFixture, shape: str, isolate: bool) -> None:
    case = SHAPES[shape]
    implementations = builtin_implementations()
    with make_executor(isolate=isolate) as executor:
        run_case(case, implementations, executor=executor)  # warm: the worker is up
        benchmark.group = f"case run: {shape}"
        run = benchmark.pedantic(
            run_case,
            args=(case, implementations),
            kwargs={"executor": executor},
            rounds=ROUNDS,
            iterations=1,
        )
    assert all(result.ok for name, result in run.results.items() if name != "legacy")


@pytest.mark.bench
def test_bench_worker_start(benchmark: BenchmarkFixture) -> None:
    """A fresh worker's first case: the price of each crash under ``--isolate``."""
    case = SHAPES["matrix-sized"]
    implementations = builtin_implementations(("fixed",))

    def first_case_on_a_fresh_worker() -> float:
        started = time.perf_counter()
        with WorkerExecutor() as worker:
            result = run_in_domain(
                implementations[0], case=case, options=RunOptions(), executor=worker
            )
        assert result.ok
        return time.perf_counter() - started

    benchmark.group = "worker start"
    benchmark.pedantic(first_case_on_a_fresh_worker, rounds=3, iterations=1)
