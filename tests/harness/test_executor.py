"""Where implementation code runs: an executor of ``concurrent.futures``' shape, in process
or one worker per trust domain, with answers that cross as plain data only."""

from __future__ import annotations

import concurrent.futures
import os

import pytest
import torch

from harness.executor import (
    BUILTINS,
    IN_PROCESS,
    DomainExecutor,
    Executor,
    InProcessExecutor,
    TimeLimited,
    WorkerFailure,
    for_domain,
)
from harness.pipeline.isolation import IsolatedExecutor, make_executor, task_name
from tests.plugins import untrusted_samplers


def doubled(value: int) -> int:
    return 2 * value


def raises_planted() -> None:
    raise ValueError("planted")


def subclass_answer() -> list[torch.Tensor]:
    return [torch.zeros(2).as_subclass(untrusted_samplers.AlwaysEqualTensor)]


def exits() -> None:
    os._exit(3)


def process_id() -> int:
    return os.getpid()


def test_in_process_runs_at_once_and_keeps_exceptions_in_the_future() -> None:
    with InProcessExecutor() as executor:
        assert executor.submit(doubled, 21).result() == 42
        failed = executor.submit(raises_planted)
        assert failed.done()
        with pytest.raises(ValueError, match="planted"):
            failed.result()
        assert for_domain(executor, "p=plugin.py") is executor
    assert make_executor(isolate=False) is IN_PROCESS
    assert TimeLimited(doubled, 1.0)(4) == 8


def test_a_process_pool_fits_the_interface_and_runs_every_domain_alike() -> None:
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        assert isinstance(pool, Executor) and not isinstance(pool, DomainExecutor)
        assert for_domain(pool, "p=plugin.py") is pool
        assert pool.submit(TimeLimited(doubled, None), 5).result() == 10


def test_a_task_must_be_named_by_its_module_level_name() -> None:
    assert task_name(doubled) == f"{__name__}:doubled"
    with pytest.raises(TypeError, match="module-level"):
        task_name(lambda: None)


@pytest.mark.slow
def test_isolated_domains_run_apart_and_a_task_without_an_answer_is_a_worker_failure() -> None:
    with make_executor(isolate=True) as executor:
        assert isinstance(executor, IsolatedExecutor)
        builtins, plugin = for_domain(executor, BUILTINS), for_domain(executor, "p=plugin.py")
        assert builtins is not plugin and for_domain(executor, BUILTINS) is builtins
        assert plugin.submit(doubled, 21).result() == 42
        first = plugin.submit(process_id).result()
        assert first != os.getpid() and builtins.submit(process_id).result() != first
        with pytest.raises(WorkerFailure, match="ValueError: planted"):
            plugin.submit(raises_planted).result()
        with pytest.raises(WorkerFailure, match=r"OutputError: .*not a plain torch\.Tensor"):
            plugin.submit(subclass_answer).result()
        assert plugin.submit(process_id).result() == first  # the task's failure, not a crash
        with pytest.raises(WorkerFailure, match=r"WorkerDied: .*exited with status 3"):
            plugin.submit(exits).result()
        assert plugin.submit(process_id).result() != first  # a fresh worker
