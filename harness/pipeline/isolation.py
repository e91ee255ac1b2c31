"""The isolated executor (``--isolate``): every trust domain's tasks in its own worker
process, so a crash is a result and no plug-in code runs in the judging process.

``make_executor(isolate=...)`` is how an entry point chooses where implementation code
runs (``harness.executor``): in process, or here. Each trust domain gets its own
persistent worker, forked from ``multiprocessing``'s fork server where the platform
has one (``spawn`` elsewhere): a clean process the judge started once, which has
imported torch and this module and nothing else, so a worker starts without paying
torch's import again and still shares no threads, CUDA context, locks or plug-in code
with the judge. A worker takes the judge's environment as it is when the worker
starts (the fork server's own is the one of its first start). One worker for the
built-ins and one per plug-in, so a plug-in never shares a process with the code it is
compared against.

A worker is generic: it runs one task at a time, a function named by its importable
module-level name, with the arguments the judge pickled (an implementation crosses by
reference and is loaded there once: ``harness.plugins.implementations``), and imports
nothing of the harness's stages but what that name and those arguments import. The
answer crosses back through ``harness.wire``: ``torch.save`` there, ``torch.load(...,
weights_only=True)`` here, so nothing a worker sends can run code in the judge; a tensor
subclass in an answer is refused. A task that gives no answer is a ``WorkerFailure``
inside its ``Future``, which the stage records as the implementation's failure: the
worker died (segfault, abort, ``os._exit``, CUDA error, OOM kill: ``WorkerDied``, with
its signal or exit status), did not answer within the task's time limit plus
``ANSWER_GRACE_S`` (``CallTimeout``; it is killed), or answered what cannot cross
(``BadAnswer``; it is killed). The next task starts a fresh worker. The worker is not
told ``--out-dir``.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import multiprocessing
import os
import pickle
import signal
import sys
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from typing import Any, TypeVar

from harness.executor import (
    BUILTINS,
    IN_PROCESS,
    Executor,
    TimeLimited,
    WorkerFailure,
    ended,
)
from harness.interrupts import stop_on_signals
from harness.wire import WireError, read_answer, write_answer

T = TypeVar("T")
ANSWER_GRACE_S = 10.0  # beyond the in-task limit: clean-up, the answer, a busy machine
START_LIMIT_S = 600.0  # a worker's start
DEFAULT_LIMIT_S = 600.0  # a task that states no limit of its own


class ExecutorMismatch(ValueError):
    """An executor that is not the one the options ask for (``RunOptions.isolate``)."""


def make_executor(*, isolate: bool) -> Executor:
    """Where the implementations of a run execute: one worker per trust domain with
    ``isolate``, else this process. The one place the executor follows from the options:
    ``harness.judge.judge`` starts it, or checks the one it is given (``check_executor``)."""
    return IsolatedExecutor() if isolate else IN_PROCESS


def check_executor(executor: Executor, *, isolate: bool) -> None:
    """Refuse an executor that ``make_executor(isolate=isolate)`` would not give: code
    asked to run isolated never runs in this process, and the reverse."""
    if isinstance(executor, IsolatedExecutor) != isolate:
        where = "in its trust domain's worker" if isinstance(executor, IsolatedExecutor) else "here"
        raise ExecutorMismatch(
            f"the options say isolate={isolate}, but the executor runs the code {where}; "
            "pass no executor and judge() starts the one the options ask for"
        )


def task_name(fn: Callable[..., Any]) -> str:
    """``module:qualified.name`` of a module-level function; ``TypeError`` for any other."""
    name = f"{fn.__module__}:{fn.__qualname__}"
    if "<" in fn.__qualname__ or _named(name) is not fn:
        raise TypeError(f"a task must be a module-level function, got {fn!r}")
    return name


def _named(name: str) -> Any:
    module_name, _, qualified = name.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in qualified.split("."):
        found = getattr(found, part)
    return found


# -- the worker ----------------------------------------------------------------------------
def _worker_main(connection: Connection, threads: int | None, environ: dict[str, str]) -> None:
    """Serve tasks until the judge closes the connection, in the judge's environment and
    on its intra-op thread count; the worker's stdout is its stderr, so nothing it prints
    lands in the judge's report (``--json``)."""
    os.environ.clear()
    os.environ.update(environ)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with stop_on_signals():  # so a KeyboardInterrupt the implementation raises is its own
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the judge decides what Ctrl-C stops
        _serve(connection)


def _serve(connection: Connection) -> None:
    while True:
        try:
            request = connection.recv_bytes()
        except EOFError:  # the judge is gone
            return
        connection.send_bytes(b"ready")
        try:
            name, args, kwargs = pickle.loads(request)
            answer: dict[str, Any] = {"answer": _named(name)(*args, **kwargs)}
        except BaseException as error:  # the task's own failure: the stage records it
            answer = {"raised": (type(error).__name__, str(error))}
        try:
            payload = write_answer(answer)
        except WireError as error:  # a tensor subclass: the implementation's failure
            payload = write_answer({"raised": ("OutputError", str(error))})
        except Exception as error:  # anything else that cannot be written
            payload = write_answer({"raised": ("BadAnswer", f"{type(error).__name__}: {error}")})
        connection.send_bytes(payload)


# -- the judge's side ----------------------------------------------------------------------
def _death(process: multiprocessing.process.BaseProcess) -> str:
    process.join(timeout=5)
    return ended(process.exitcode)


_started: weakref.WeakSet[WorkerExecutor] = weakref.WeakSet()


def _stop_every_worker() -> None:
    """At exit, kill every worker left running (one that ignores SIGTERM would keep
    ``multiprocessing``'s own exit hook waiting for it)."""
    for worker in list(_started):
        worker.shutdown()


# What the fork server imports once, before it forks any worker: torch (most of a
# worker's start) and this module, which serves the tasks.
FORK_SERVER_PRELOAD = ("torch", __name__)


def worker_context() -> ForkServerContext | SpawnContext:
    """The fork server where the platform has one, with ``FORK_SERVER_PRELOAD``; else
    ``spawn``."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(FORK_SERVER_PRELOAD))
    return context


class WorkerExecutor(concurrent.futures.Executor):
    """One persistent worker process of one trust domain, replaced after it dies or hangs.
    ``submit`` returns once the answer is in: a worker serves one task at a time."""

    def __init__(self) -> None:
        self._context = worker_context()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None

    def _ensure_worker(self) -> Connection:
        if self._process is None or not self._process.is_alive() or self._connection is None:
            self.shutdown()
            parent, child = self._context.Pipe()
            torch = sys.modules.get("torch")  # the judge's threads, where it set them
            threads = None if torch is None else torch.get_num_threads()
            self._process = self._context.Process(
                target=_worker_main,
                args=(child, threads, dict(os.environ)),
                daemon=True,
                name="harness-worker",
            )
            command_line = sys.argv
            sys.argv = command_line[:1]  # a worker is handed argv: it gets no --out-dir
            try:
                self._process.start()
            finally:
                sys.argv = command_line
            child.close()
            self._connection = parent
            _started.add(self)
            atexit.unregister(_stop_every_worker)  # once, and after multiprocessing's own
            atexit.register(_stop_every_worker)  # exit hook, so that it runs before it
        return self._connection

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the worker, if any (killed: it may be hung)."""
        if self._connection is not None:
            self._connection.close()
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(timeout=5)
        self._process, self._connection = None, None

    def _failed(self, type: str, message: str) -> WorkerFailure:
        if type == "WorkerDied" and self._process is not None:
            message = _death(self._process)
        self.shutdown()
        return WorkerFailure(type, message)

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        limit_s = fn.time_limit_s if isinstance(fn, TimeLimited) else DEFAULT_LIMIT_S
        name = task_name(fn.fn if isinstance(fn, TimeLimited) else fn)
        outcome = self._request(pickle.dumps((name, args, kwargs)), limit_s)
        if isinstance(outcome, WorkerFailure):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
        return future

    def _request(self, request: bytes, limit_s: float | None) -> Any:
        """The answer to one task, or a ``WorkerFailure``."""
        connection = self._ensure_worker()
        try:
            connection.send_bytes(request)
            if not connection.poll(START_LIMIT_S):
                return self._failed("CallTimeout", "the worker did not start in time")
            connection.recv_bytes()  # "ready": the task starts
            wait_s = None if limit_s is None else limit_s + ANSWER_GRACE_S
            if not connection.poll(wait_s):
                assert limit_s is not None
                return self._failed(
                    "CallTimeout",
                    f"no result within the time limit of {limit_s:g} s "
                    f"(+{ANSWER_GRACE_S:g} s); the worker process was killed",
                )
            payload = connection.recv_bytes()
        except (EOFError, ConnectionError):
            return self._failed("WorkerDied", "")
        try:
            envelope = read_answer(payload)
        except WireError as error:
            return self._failed("BadAnswer", f"the worker's answer: {error}")
        if isinstance(envelope, dict) and set(envelope) == {"answer"}:
            return envelope["answer"]
        raised = envelope.get("raised") if isinstance(envelope, dict) else None
        if (
            isinstance(raised, tuple)
            and len(raised) == 2
            and all(isinstance(part, str) for part in raised)
        ):
            return WorkerFailure(*raised)
        return self._failed("BadAnswer", "the worker's answer is not an answer")


class IsolatedExecutor(concurrent.futures.Executor):
    """One ``WorkerExecutor`` per trust domain, each started on first use; a task
    submitted without a domain runs in the built-ins'."""

    def __init__(self) -> None:
        self._domains: dict[str, WorkerExecutor] = {}

    def for_domain(self, name: str) -> WorkerExecutor:
        if name not in self._domains:
            self._domains[name] = WorkerExecutor()
        return self._domains[name]

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        return self.for_domain(BUILTINS).submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop every worker now (before the report is written; on an interrupted run)."""
        for worker in self._domains.values():
            worker.shutdown()
