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
``ForkedExecutor`` runs each task in a process forked from this one while this one goes
on (the statistical oracle beside the matrix, ``--jobs``; the releases' support scan);
``Relayed(fn, progress)`` is a task whose progress lines come home as they are said.
With the isolated executor (``harness.pipeline.isolation``) and the releases' pool of
fresh processes (``harness.releases.run``), these are the only ways the
harness runs code in another process (``tests/harness/test_executor.py`` holds it).
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
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


@dataclass(frozen=True)
class Relayed(Generic[T]):
    """``fn``, whose first argument is where its progress lines go: calling it hands it
    ``progress``; an executor that runs it in another process (``ForkedExecutor``) hands
    it a sink there that sends each line home to ``progress`` as it comes."""

    fn: Callable[..., T]
    progress: Callable[[str], None]

    def __call__(self, *args: Any, **kwargs: Any) -> T:
        return self.fn(self.progress, *args, **kwargs)


def ended(exitcode: int | None) -> str:
    """How a worker process that gave no answer ended, in words."""
    if exitcode is None:
        return "the worker process stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "an unknown signal"
        return f"the worker process died from signal {name} ({exitcode})"
    return f"the worker process exited with status {exitcode} before returning a result"


class ForkedExecutor(concurrent.futures.Executor):
    """Each task in a process forked from this one while this process goes on: it
    inherits everything loaded here (no import, no pickled input), and its answer comes
    back pickled. ``submit`` returns at once. Only for tasks that touch no CUDA device
    and read no intra-op thread pool of more than one thread: a fork carries neither.

    A task that gives no answer is a ``WorkerFailure`` in its ``Future``, as on the
    isolated executor: the process died (a signal: SIGKILL, SIGTERM, a segfault; or
    ``os._exit``: ``WorkerDied``, with the signal or the status) or answered what cannot
    cross (``BadAnswer``); an exception the task raised is raised here. The process
    ignores SIGINT (the caller decides what Ctrl-C stops) and dies of SIGTERM, and dies
    with this one. ``shutdown(cancel_futures=True)`` kills the tasks still running."""

    def __init__(self) -> None:
        self._running: list[_Forked] = []

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        forked: _Forked = _Forked(fn, args, kwargs)
        self._running.append(forked)
        return forked.future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Wait for the tasks still running (``cancel_futures``: kill them first)."""
        for forked in self._running:
            forked.end(kill=cancel_futures or not wait)
        self._running.clear()


class _Forked:
    """One task in its forked process, and the thread that reads what it sends."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]):
        import multiprocessing
        import threading

        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        progress = fn.progress if isinstance(fn, Relayed) else None
        context = multiprocessing.get_context("fork")
        receiving, sending = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_run_forked, args=(fn, args, kwargs, sending, os.getpid()), daemon=True
        )
        # The process starts with this one's signal handlers: SIGTERM and SIGINT wait,
        # blocked, until it has put its own in place (``_run_forked``).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sending.close()
        self._reader = threading.Thread(
            target=self._read, args=(receiving, progress), name="forked", daemon=True
        )
        self._reader.start()

    def _read(self, receiving: Any, progress: Callable[[str], None] | None) -> None:
        answer: tuple[str, Any] | None = None
        with receiving:
            while answer is None:
                try:
                    kind, value = pickle.loads(receiving.recv_bytes())
                except (EOFError, OSError):
                    break
                except Exception as error:  # what came cannot be read here
                    answer = ("raised", WorkerFailure("BadAnswer", repr(error)))
                    self._process.kill()
                    break
                if kind == "progress":
                    if progress is not None:
                        progress(value)
                else:
                    answer = (kind, value)
        self._process.join()
        if answer is None:
            answer = ("raised", WorkerFailure("WorkerDied", ended(self._process.exitcode)))
        kind, value = answer
        if kind == "raised":
            self.future.set_exception(value)
        else:
            self.future.set_result(value)

    def end(self, *, kill: bool) -> None:
        if kill and self._process.is_alive():
            self._process.kill()
        self._reader.join()


def _run_forked(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    sending: Any,
    parent: int,
) -> None:
    """The forked process: run the task, send its progress and its answer home."""
    if sys.platform == "linux":  # die with the parent rather than run on as an orphan
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's stop handlers stay there
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def send(message: tuple[str, Any]) -> None:  # plain pickle: tensors travel as bytes
        sending.send_bytes(pickle.dumps(message))

    def progress(message: str) -> None:
        send(("progress", message))

    try:
        if isinstance(fn, Relayed):
            answer: tuple[str, Any] = ("done", fn.fn(progress, *args, **kwargs))
        else:
            answer = ("done", fn(*args, **kwargs))
    except BaseException as error:
        answer = ("raised", error)
    try:
        send(answer)
    except Exception:  # the answer or the exception cannot be pickled: say what it was
        import traceback

        text = "".join(traceback.format_exception(answer[1])) if answer[0] == "raised" else ""
        send(("raised", WorkerFailure("BadAnswer", f"the answer could not cross: {text}")))
    sending.close()
