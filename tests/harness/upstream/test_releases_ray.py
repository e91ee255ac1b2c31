"""The releases sweep on a local Ray cluster of 2 CPUs gives the rows the local
processes give, timings apart, and the executor behaves as local processes do: a task's
own exception, one run of a task whose process died, a new local cluster whatever
``RAY_ADDRESS`` says, and nothing of the cluster left after it shuts down (skipped, with
the reason, where Ray is not installed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from harness.releases.run import release_executor, run_sweep
from harness.releases.sweep import ReleaseRow, ReleaseTask
from tests.harness.upstream.fake_wheels import AFTER_FIX, BEFORE_FIX, sampler_wheel

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]'")

# A task that records that it ran, then kills its own process (``exec`` is a builtin:
# the worker needs nothing of the tests to run it).
RECORD_AND_DIE = "open({path!r}, 'a').write('ran\\n'); import os; os._exit(3)"


def _timeless(rows: tuple[ReleaseRow, ...]) -> list[dict[str, object]]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def _descendants() -> set[int]:
    """This process's descendants, read from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # "pid (name) state ppid ...": the name may hold spaces, so split after ")"
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # the process ended while being read
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


@pytest.mark.e2e
@pytest.mark.ray
def test_ray_and_local_processes_give_the_same_rows(tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    sampler_wheel(cache, version="0.5.18", source=BEFORE_FIX)
    sampler_wheel(cache, version="0.5.19", source=AFTER_FIX)
    tasks = [
        ReleaseTask(package="sglang", version=v, cache=str(cache), offline=True, scan_triples=256)
        for v in ("0.5.18", "0.5.19", "0.5.99")
    ]
    local = run_sweep(tasks, jobs=2, out_dir=tmp_path / "local")
    on_ray = run_sweep(tasks, jobs=2, executor="ray", out_dir=tmp_path / "ray")
    assert not ray.is_initialized()  # the sweep shut its cluster down
    assert local.ok and on_ray.ok
    assert _timeless(on_ray.rows) == _timeless(local.rows)
    assert [r["judged"] for r in local.rows] == [True, True, False]


@pytest.mark.e2e
@pytest.mark.ray
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
def test_the_ray_executor_runs_tasks_as_local_processes_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with release_executor(jobs=2, executor="local", ray_address=None) as pool:
        local_error = pool.submit(int, "x").exception()
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # nothing listens: a new cluster must start
    environment, before = dict(os.environ), _descendants()
    ran = tmp_path / "ran"
    with release_executor(jobs=2, executor="ray", ray_address=None) as pool:
        assert ray.cluster_resources()["CPU"] == 2
        ray_error = pool.submit(int, "x").exception()
        with pytest.raises(ray.exceptions.WorkerCrashedError):
            pool.submit(exec, RECORD_AND_DIE.format(path=str(ran))).result(timeout=120)
    assert (type(ray_error), str(ray_error)) == (type(local_error), str(local_error))
    assert ran.read_text() == "ran\n"  # run once: a dead worker's task is not retried
    assert not ray.is_initialized()
    assert dict(os.environ) == environment
    deadline = time.monotonic() + 30
    while _descendants() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _descendants() - before, "the cluster's processes outlived its shutdown"
