"""The releases sweep on a local Ray cluster of 2 CPUs gives the rows the local
processes give, timings apart (skipped, with the reason, where Ray is not installed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.upstream.releases.sweep import ReleaseRow, ReleaseTask, run_sweep
from tests.harness.upstream.fake_wheels import AFTER_FIX, BEFORE_FIX, sampler_wheel

pytest.importorskip("ray", reason="Ray is an optional extra: pip install '.[ray]'")


def _timeless(rows: tuple[ReleaseRow, ...]) -> list[dict[str, object]]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.mark.e2e
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
    assert local.ok and on_ray.ok
    assert _timeless(on_ray.rows) == _timeless(local.rows)
    assert [r["judged"] for r in local.rows] == [True, True, False]
