"""The releases sweep's tasks on a Ray cluster: a ``concurrent.futures``-shaped executor.

``RayExecutor(address=None, num_cpus=N)`` starts a local cluster of ``N`` CPUs (always a
new one: never one that ``RAY_ADDRESS`` or an earlier ``ray start`` on this machine
names) or joins the one at ``address``, and runs every submitted task as a Ray task of
one CPU in a worker process used for that task alone (``max_calls=1``), so each release
still runs in a process of its own. A task runs once, as in local processes: Ray's
retries of a task whose worker died are off (``max_retries=0``). A task that raises
gives its own exception, not Ray's wrapper (whose text names the worker's pid), so its
row reads as the local processes' row does. The tasks are the same module-level
functions with the same plain arguments as the local processes get, so the rows are the
same apart from their timings. A local cluster starts without the dashboard and
without usage reporting (``RAY_USAGE_STATS_ENABLED=0`` unless set); Ray still starts
its own helper processes (GCS, raylet, monitors, agents), all stopped at shutdown.
Ray is an optional extra (``pip install 'dspark-sampler-harness[ray]'``); a remote
cluster's workers need the harness installed (docs/releases.md, "Ray"). ``ray.init``
sets variables of its own in ``os.environ``; the executor puts the environment back
when it shuts down.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return fn(*args, **kwargs)


def _settle(answer: concurrent.futures.Future[T], done: concurrent.futures.Future[T]) -> None:
    """Pass Ray's answer on; a task's own exception unwrapped from ``RayTaskError``."""
    error = done.exception()
    if error is None:
        answer.set_result(done.result())
        return
    from ray.exceptions import RayTaskError

    cause = error.cause if isinstance(error, RayTaskError) else None
    answer.set_exception(cause if isinstance(cause, Exception) else error)


class RayExecutor(concurrent.futures.Executor):
    """Runs each task once, as a one-CPU Ray task in a fresh worker process."""

    def __init__(self, *, address: str | None, num_cpus: int) -> None:
        import ray

        self._ray = ray
        self._environment = dict(os.environ)  # ray.init writes its own; put back at shutdown
        self._owns_cluster = not ray.is_initialized()
        if self._owns_cluster:
            if address is None:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(
                address=address or "local",  # "local": a new cluster, whatever RAY_ADDRESS says
                num_cpus=None if address else num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        self._remote = ray.remote(num_cpus=1, max_calls=1, max_retries=0)(_call)

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        answer: concurrent.futures.Future[T] = concurrent.futures.Future()
        done: concurrent.futures.Future[T] = self._remote.remote(fn, *args, **kwargs).future()
        done.add_done_callback(functools.partial(_settle, answer))
        return answer

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        del wait, cancel_futures  # Ray's shutdown waits for nothing it still runs
        if self._owns_cluster:
            self._ray.shutdown()
            self._owns_cluster = False
            os.environ.clear()
            os.environ.update(self._environment)
