"""Implementations in worker processes (``--isolate``): a crash is a result.

A persistent worker process (started with ``spawn``, so it shares no threads, CUDA
context or locks with the harness) receives one ``(implementation, case)`` request
at a time, builds the case's inputs from its seed (exact: they are generated on the
CPU; kept for the next implementation of the same case while unchanged), runs the
implementation under the same guards as in-process runs, and sends the
``ImplResult`` back, tensors included. A worker that dies (segfault, abort,
``os._exit``, CUDA error, OOM kill) or does not answer within the time limit
becomes that implementation's recorded failure with its signal or exit status, and
the next request starts a fresh worker.
"""

from __future__ import annotations

import atexit
import multiprocessing
import pickle
import signal
from dataclasses import fields, replace
from multiprocessing.connection import Connection
from typing import Any

import torch

from harness.pipeline.case import Case, CaseInputs, build_inputs
from harness.pipeline.interrupts import stop_on_signals
from harness.pipeline.life import Life
from harness.pipeline.observe import RandomDraw
from harness.pipeline.runner import (
    DEFAULT_TIME_LIMIT_S,
    ImplResult,
    RaisedError,
    run_guarded,
)
from harness.plugins.implementations import Implementation, parse_impl_spec

ANSWER_GRACE_S = 10.0  # beyond the in-worker limit: clean-up, pickling, a busy machine
START_LIMIT_S = 600.0  # a worker's start and the inputs of one case


def _on_device(result: ImplResult, device: torch.device) -> ImplResult:
    """Every tensor of ``result`` moved to ``device`` (CPU to cross the process line)."""
    for item in fields(result):
        value = getattr(result, item.name)
        if isinstance(value, torch.Tensor):
            setattr(result, item.name, value.to(device))
        elif isinstance(value, ImplResult):  # the second call
            _on_device(value, device)
        elif isinstance(value, Life):
            for replay in value.replays:
                _on_device(replay.result, device)
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            setattr(result, item.name, [t.to(device) for t in value])
        elif isinstance(value, list) and value and isinstance(value[0], RandomDraw):
            setattr(result, item.name, [_draw_on_device(d, device) for d in value])
    return result


def _draw_on_device(draw: RandomDraw, device: torch.device) -> RandomDraw:
    values = None if draw.values is None else draw.values.to(device)
    return replace(draw, values=values)


def _worker_main(connection: Connection) -> None:
    """Serve requests until the harness closes the connection."""
    with stop_on_signals():  # so a KeyboardInterrupt the implementation raises is its own
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the harness decides what Ctrl-C stops
        _serve(connection)


def _serve(connection: Connection) -> None:
    cached: tuple[Case, CaseInputs] | None = None  # the last case's inputs, while pristine
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the harness is gone
            return
        implementation, case, record_noise, time_limit_s = request
        if isinstance(implementation, str):  # not picklable: resolve its spec here
            implementation = parse_impl_spec(implementation)
        if cached is None or cached[0] != case:
            cached = (case, build_inputs(case))
        connection.send("ready")
        result = run_guarded(
            implementation,
            case=case,
            inputs=cached[1],
            record_noise=record_noise,
            time_limit_s=time_limit_s,
        )
        if result.mutated_inputs:  # the next implementation gets rebuilt inputs
            cached = None
        connection.send(_on_device(result, torch.device("cpu")))


def _death(process: multiprocessing.process.BaseProcess) -> str:
    process.join(timeout=5)
    code = process.exitcode
    if code is None:
        return "the worker process stopped answering"
    if code < 0:
        return f"the worker process died from signal {signal.Signals(-code).name} ({code})"
    return f"the worker process exited with status {code} before returning a result"


class WorkerPool:
    """One persistent worker, replaced after it dies or hangs."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None

    def _ensure_worker(self) -> Connection:
        if self._process is None or not self._process.is_alive() or self._connection is None:
            self.shutdown()
            parent, child = self._context.Pipe()
            self._process = self._context.Process(
                target=_worker_main, args=(child,), daemon=True, name="harness-worker"
            )
            self._process.start()
            child.close()
            self._connection = parent
        return self._connection

    def shutdown(self) -> None:
        """Stop the worker, if any (killed: it may be hung)."""
        if self._connection is not None:
            self._connection.close()
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)
        self._process, self._connection = None, None

    def _failure(self, name: str, error_type: str, message: str) -> ImplResult:
        assert self._process is not None
        if error_type == "WorkerDied":
            message = _death(self._process)
        self.shutdown()
        return ImplResult(
            name=name, error=RaisedError(type=error_type, message=message, where="worker")
        )

    def run(
        self,
        implementation: Implementation,
        *,
        case: Case,
        record_noise: bool = True,
        time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    ) -> ImplResult:
        """``run_guarded`` of one implementation in the worker; a crash or hang of the
        worker is the implementation's recorded failure."""
        connection = self._ensure_worker()
        sent: Any = implementation
        try:
            pickle.dumps(implementation)
        except Exception:  # a class loaded from a file: the worker loads it by its spec
            sent = implementation.spec
        name = implementation.name
        try:
            connection.send((sent, case, record_noise, time_limit_s))
            if not connection.poll(START_LIMIT_S):
                return self._failure(name, "CallTimeout", "the worker did not start in time")
            connection.recv()  # "ready": the inputs are built, the implementation starts
            limit = None if time_limit_s is None else time_limit_s + ANSWER_GRACE_S
            if not connection.poll(limit):
                return self._failure(
                    name,
                    "CallTimeout",
                    f"no result within the time limit of {time_limit_s:g} s "
                    f"(+{ANSWER_GRACE_S:g} s); the worker process was killed",
                )
            result: ImplResult = connection.recv()
        except (EOFError, ConnectionError):
            return self._failure(name, "WorkerDied", "")
        return _on_device(result, torch.device(case.device))


_pool: WorkerPool | None = None


def worker_pool() -> WorkerPool:
    """The process's worker pool, started on first use and stopped at exit."""
    global _pool
    if _pool is None:
        _pool = WorkerPool()
        atexit.register(_pool.shutdown)
    return _pool


def shutdown_workers() -> None:
    """Stop the worker now (on an interrupted run)."""
    if _pool is not None:
        _pool.shutdown()
