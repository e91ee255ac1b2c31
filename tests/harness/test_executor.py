"""Where implementation code runs: an executor of ``concurrent.futures``' shape, in process
or one worker per trust domain, with answers that cross as plain data only."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import harness
from harness.executor import (
    BUILTINS,
    IN_PROCESS,
    DomainExecutor,
    Executor,
    ForkedExecutor,
    InProcessExecutor,
    Relayed,
    TimeLimited,
    WorkerFailure,
    for_domain,
)
from harness.interrupts import stop_on_signals
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


def test_a_forked_task_sends_its_progress_and_its_answer_home() -> None:
    said: list[str] = []
    with ForkedExecutor() as forked:
        future = forked.submit(Relayed(answers_with_progress, said.append))
        assert torch.equal(future.result(), torch.arange(4)) and said == ["half way", "done"]
        assert forked.submit(doubled, 21).result() == 42


def sleeps() -> None:
    import time

    time.sleep(600)


@pytest.mark.parametrize(
    "ending, died",
    [
        (lambda pid: None, "exited with status 3"),  # the task's os._exit
        (lambda pid: os.kill(pid, signal.SIGKILL), "died from signal SIGKILL"),
        (lambda pid: os.kill(pid, signal.SIGTERM), "died from signal SIGTERM"),
    ],
)
def test_a_forked_task_that_exits_or_is_killed_or_stopped_is_a_worker_failure(
    ending: Callable[[int], None], died: str
) -> None:
    forked = ForkedExecutor()
    try:
        with stop_on_signals():  # the judge's own handlers do not follow into the fork
            future = forked.submit(exits if "status" in died else sleeps)
            ending(forked._running[0]._process.pid)  # type: ignore[arg-type]
            with pytest.raises(WorkerFailure, match=f"WorkerDied: the worker process {died}"):
                future.result()
    finally:
        forked.shutdown(cancel_futures=True)


def test_a_forked_task_that_raises_or_answers_what_cannot_cross_raises_here() -> None:
    with ForkedExecutor() as forked:
        with pytest.raises(ValueError, match="planted"):
            forked.submit(raises_planted).result()
        with pytest.raises(WorkerFailure, match="BadAnswer: the answer could not cross"):
            forked.submit(Relayed(answers_what_cannot_cross, print)).result()


def test_a_forked_task_given_up_on_is_killed() -> None:
    forked = ForkedExecutor()
    future = forked.submit(sleeps)
    process = forked._running[0]._process
    forked.shutdown(cancel_futures=True)
    assert process.exitcode is not None and process.exitcode < 0
    assert isinstance(future.exception(), WorkerFailure)


def test_the_harness_runs_code_in_another_process_three_ways_at_most() -> None:
    """Every process the harness starts for its own code is a task on an executor: the
    forked one, the isolated one's workers and the releases' pool of fresh processes."""
    starts = re.compile(r"get_context\(|ProcessPoolExecutor\(|os\.fork\(|\.Process\(|Popen\(")
    root = Path(harness.__file__).parent
    starting = {
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if starts.search(path.read_text())
    }
    assert starting == {"executor.py", "pipeline/isolation.py", "releases/run.py"}
