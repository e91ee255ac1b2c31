"""Where implementation code runs: an executor, chosen once by the caller.

A stage never decides where an implementation's code runs. It takes an ``executor``
and hands it *tasks*: module-level functions with plain arguments (cases, options,
configs, implementations, which cross a process line by reference) whose answer is
plain data. ``Executor`` is the shape of ``concurrent.futures.Executor``, so a
``ProcessPoolExecutor`` (or a cluster's executor) fits it for sweeps of independent
tasks:

- ``submit(fn, /, *args, **kwargs) -> Future``, ``shutdown(wait=True)``, and use as a
  context manager (``with make_executor(...) as executor:``), which shuts it down;
- ``for_domain(executor, name)``: the executor for one *trust domain*, the built-ins
  (``BUILTINS``) or one plug-in (its ``--impl`` spec). An executor that keeps domains
  apart answers ``executor.for_domain(name)`` (the isolated one: one worker process per
  domain, ``harness.pipeline.isolation``); any other runs every domain's tasks alike.
- ``TimeLimited(fn, time_limit_s)``: a task whose answer is due within that many
  seconds. An executor that can stop a task past it does so (the isolated one kills
  its worker); calling it just calls ``fn``.
- ``WorkerFailure``: why a task submitted elsewhere gave no answer (the worker died, did
  not answer in time, answered what cannot cross, or the task raised there); it is the
  exception inside the ``Future``, and the stage records it as the implementation's
  failure.

``InProcessExecutor`` runs each task at once, in this process, and returns a completed
``Future`` (an exception the task raised is inside it); ``for_domain`` answers itself.
"""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar, runtime_checkable

T = TypeVar("T")

BUILTINS = "builtin"  # the trust domain of the built-in implementations


@runtime_checkable
class Executor(Protocol):
    """Runs tasks, as ``concurrent.futures.Executor`` does."""

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]: ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
        /,
    ) -> bool | None: ...


@runtime_checkable
class DomainExecutor(Executor, Protocol):
    """An executor that keeps trust domains apart."""

    def for_domain(self, name: str) -> Executor: ...


def for_domain(executor: Executor, name: str) -> Executor:
    """The executor that runs the tasks of trust domain ``name``: its own where
    ``executor`` keeps domains apart, else ``executor`` itself."""
    return executor.for_domain(name) if isinstance(executor, DomainExecutor) else executor


@dataclass(frozen=True)
class TimeLimited(Generic[T]):
    """``fn``, whose answer is due within ``time_limit_s`` seconds (``None``: no limit);
    the task applies the limit to the implementation code it runs, and an executor that
    can stop a task that does not answer (a worker process) stops it a little later."""

    fn: Callable[..., T]
    time_limit_s: float | None

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        return self.fn(*args, **kwargs)


class WorkerFailure(Exception):
    """A task gave no answer: ``type`` is ``WorkerDied``, ``CallTimeout``, ``BadAnswer``
    or, when the task raised where it ran, the exception's class name."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message

    def __reduce__(self) -> tuple[type[WorkerFailure], tuple[str, str]]:
        return (WorkerFailure, (self.type, self.message))


class InProcessExecutor(concurrent.futures.Executor):
    """Runs each task at once in this process; every trust domain is this process."""

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # the caller's ``result()`` raises it
            future.set_exception(error)
        return future

    def for_domain(self, name: str) -> InProcessExecutor:
        return self


IN_PROCESS = InProcessExecutor()  # stateless: one serves every caller


class Beside(Generic[T]):
    """A task running in a process forked beside this one (``start_beside``): its
    progress lines reach this process's ``progress`` as they come, and ``result()``
    waits for its answer (or raises what it raised there)."""

    def __init__(self, task: Callable[[Callable[[str], None]], T], progress: Callable[[str], None]):
        import multiprocessing
        import threading

        context = multiprocessing.get_context("fork")
        receiving, sending = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_run_beside, args=(task, sending, os.getpid()), daemon=True
        )
        self._process.start()
        sending.close()
        self._answer: tuple[str, Any] | None = None
        self._reader = threading.Thread(
            target=self._read, args=(receiving, progress), name="beside", daemon=True
        )
        self._reader.start()

    def _read(self, receiving: Any, progress: Callable[[str], None]) -> None:
        with receiving:
            while True:
                try:
                    kind, value = pickle.loads(receiving.recv_bytes())
                except (EOFError, OSError):
                    return
                except Exception as error:  # what came could not be read here
                    self._answer = ("raised", WorkerFailure("BadAnswer", repr(error)))
                    return
                if kind == "progress":
                    progress(value)
                else:
                    self._answer = (kind, value)
                    return

    def result(self) -> T:
        self._reader.join()
        self._process.join()
        if self._answer is None:
            raise WorkerFailure(
                "WorkerDied",
                f"the process beside this one ended without an answer "
                f"(exit code {self._process.exitcode})",
            )
        kind, value = self._answer
        if kind == "raised":
            raise value
        return value

    def stop(self) -> None:
        """Stop the task if it still runs (the caller gave up on it)."""
        if self._process.is_alive():
            self._process.kill()
        self._process.join()
        self._reader.join()


def start_beside(
    task: Callable[[Callable[[str], None]], T], *, progress: Callable[[str], None]
) -> Beside[T]:
    """Run ``task(progress)`` in a process forked from this one (it inherits everything
    loaded here: no import, no pickled input), while this process goes on. Only for
    tasks that touch no CUDA device and read no intra-op thread pool of more than one
    thread: a fork does not carry either."""
    return Beside(task, progress)


def _run_beside(task: Callable[[Callable[[str], None]], Any], sending: Any, parent: int) -> None:
    """The forked process: run ``task``, send its progress and its answer home."""
    if sys.platform == "linux":  # die with the parent rather than run on as an orphan
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)

    def send(message: tuple[str, Any]) -> None:  # plain pickle: tensors travel as bytes
        sending.send_bytes(pickle.dumps(message))

    def progress(message: str) -> None:
        send(("progress", message))

    try:
        answer: tuple[str, Any] = ("done", task(progress))
    except BaseException as error:
        answer = ("raised", error)
    try:
        send(answer)
    except Exception:  # the answer or the exception cannot be pickled: say what it was
        import traceback

        text = "".join(traceback.format_exception(answer[1])) if answer[0] == "raised" else ""
        send(("raised", WorkerFailure("BadAnswer", f"the answer could not cross: {text}")))
    sending.close()
