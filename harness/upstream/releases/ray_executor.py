"""The releases sweep's tasks on a Ray cluster: a ``concurrent.futures``-shaped executor.

``RayExecutor(address=None, num_cpus=N)`` starts a local cluster of ``N`` CPUs (or
joins the one at ``address``) and runs every submitted task as a Ray task of one CPU in
a worker process used for that task alone (``max_calls=1``), so each release still
runs in a process of its own; ``Future`` s come from Ray's object references. The tasks
are the same module-level functions with the same plain arguments as the local
processes get, so the rows are the same apart from their timings. Ray is an optional
extra (``pip install 'dspark-sampler-harness[ray]'``); a remote cluster's workers need
the harness installed (docs/releases.md, "Ray"). ``ray.init`` sets variables of its
own in ``os.environ``; the executor puts the environment back when it shuts down.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return fn(*args, **kwargs)


class RayExecutor(concurrent.futures.Executor):
    """Runs each task as a one-CPU Ray task in a fresh worker process."""

    def __init__(self, *, address: str | None, num_cpus: int) -> None:
        import ray

        self._ray = ray
        self._environment = dict(os.environ)  # ray.init writes its own; put back at shutdown
        self._owns_cluster = not ray.is_initialized()
        if self._owns_cluster:
            ray.init(
                address=address,
                num_cpus=None if address else num_cpus,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        self._remote = ray.remote(num_cpus=1, max_calls=1)(_call)

    def submit(
        self, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = self._remote.remote(fn, *args, **kwargs).future()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        del wait, cancel_futures  # Ray's shutdown waits for nothing it still runs
        if self._owns_cluster:
            self._ray.shutdown()
            self._owns_cluster = False
            os.environ.clear()
            os.environ.update(self._environment)
