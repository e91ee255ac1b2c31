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
    start_beside,
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


@pytest.mark.e2e
def test_a_process_pool_fits_the_interface_and_runs_every_domain_alike() -> None:
    with concurrent.futures.ProcessPoolExecutor(max_workers=1) as pool:
        assert isinstance(pool, Executor) and not isinstance(pool, DomainExecutor)
        assert for_domain(pool, "p=plugin.py") is pool
        assert pool.submit(TimeLimited(doubled, None), 5).result() == 10


@pytest.mark.e2e
def test_a_worker_starts_in_the_judges_environment_as_it_is_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Workers fork from one fork server, started once: each still takes the judge's
    environment of the moment it starts, never the server's."""
    with make_executor(isolate=True) as executor:
        worker = for_domain(executor, "p=plugin.py")
        monkeypatch.setenv("DSPARK_PROBE", "first")
        first = worker.submit(process_id).result()
        assert worker.submit(os.getenv, "DSPARK_PROBE").result() == "first"
        worker.shutdown()
        monkeypatch.setenv("DSPARK_PROBE", "second")
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        assert worker.submit(os.getenv, "DSPARK_PROBE").result() == "second"
        assert worker.submit(os.getenv, "TRITON_INTERPRET").result() is None
        assert worker.submit(process_id).result() not in (first, os.getpid())


def test_a_task_must_be_named_by_its_module_level_name() -> None:
    assert task_name(doubled) == f"{__name__}:doubled"
    with pytest.raises(TypeError, match="module-level"):
        task_name(lambda: None)


@pytest.mark.e2e
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


def test_a_result_of_every_declared_type_crosses_the_wire_unchanged() -> None:
    from harness import wire
    from harness.pipeline.results import (
        GreedyMix,
        ImplResult,
        Life,
        LifeReplay,
        LifeStep,
        RaisedError,
    )
    from harness.plugins.conventions import NoiseCounter, StagedParams

    staged = StagedParams(torch.tensor([0.5, 1.0]), torch.tensor([False, True]), None)
    step = LifeStep(0, 2, GreedyMix.MIXED, (0.5, 1.0), (False, True), 17)
    replay = ImplResult(name="fixed", tokens=torch.arange(6).reshape(2, 3), staged=staged)
    result = ImplResult(
        name="fixed",
        tokens=torch.arange(6).reshape(2, 3),
        noise_counter=NoiseCounter(key=7, start=1, end=3),
        life=Life(replays=[LifeReplay(step=step, result=replay)], planned=1, out_passed=True),
        second_call=ImplResult(name="fixed", error=RaisedError("CallTimeout", "late", "x:1")),
    )
    back = wire.read_answer(wire.write_answer(result))
    assert type(back) is ImplResult and back.noise_counter == result.noise_counter
    assert back.life is not None and back.life.replays[0].step == step
    assert torch.equal(back.life.replays[0].result.staged.greedy_mask, staged.greedy_mask)
    assert back.second_call is not None and back.second_call.error == RaisedError(
        "CallTimeout", "late", "x:1"
    )
    assert back.second_call.error.timed_out


def answers_with_progress(progress) -> torch.Tensor:
    progress("half way")
    progress("done")
    return torch.arange(4)


def answers_what_cannot_cross(progress) -> object:
    return lambda: None


def test_a_task_beside_sends_its_progress_and_its_answer_home() -> None:
    said: list[str] = []
    answer = start_beside(answers_with_progress, progress=said.append).result()
    assert torch.equal(answer, torch.arange(4)) and said == ["half way", "done"]


def test_a_task_beside_that_raises_dies_or_answers_what_cannot_cross_raises_here() -> None:
    with pytest.raises(ValueError, match="planted"):
        start_beside(lambda progress: raises_planted(), progress=print).result()
    with pytest.raises(WorkerFailure, match=r"WorkerDied: .*exit code 3"):
        start_beside(lambda progress: exits(), progress=print).result()
    with pytest.raises(WorkerFailure, match="BadAnswer: the answer could not cross"):
        start_beside(answers_what_cannot_cross, progress=print).result()


def test_a_task_beside_that_is_stopped_is_killed() -> None:
    import time

    beside = start_beside(lambda progress: time.sleep(600), progress=print)
    beside.stop()
    assert beside._process.exitcode is not None and beside._process.exitcode < 0
