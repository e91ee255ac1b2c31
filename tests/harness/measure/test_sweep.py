"""The scaling sweep: durable points, resume after a kill, a torn last line, outputs.

The kill test runs ``python -m harness sweep`` as a subprocess, kills it with
SIGKILL right after its first finished point, and resumes it: finished points are
kept byte for byte and not recomputed, and the grid completes exactly once.
"""

from __future__ import annotations

import json
import math
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.io.files import load_records
from harness.measure import sweep
from harness.render.sweep import sweep_png
from tests.helpers import run_harness, start_harness

TINY = replace(sweep.QUICK_CONFIG, bs=(1,), gamma=(2,), vocab=(64, 128, 256), repeats=1)


def fake_measure(calls: list[tuple[int, int, int]]) -> Any:
    """A measure function that records its calls and returns a well-formed point."""

    def measure(config: sweep.SweepConfig, point: tuple[int, int, int]) -> dict[str, Any]:
        calls.append(point)
        bs, gamma, vocab = point
        work = bs * gamma * vocab
        times = {
            clock: {
                "legacy_s": [2e-9 * work],
                "fixed_s": [1e-9 * work],
                "legacy_median_s": 2e-9 * work,
                "fixed_median_s": 1e-9 * work,
                "ratio_min": 2.0,
                "ratio_median": 2.0,
                "ratio_max": 2.0,
            }
            for clock in ("wall", "cpu")
        }
        return {
            "schema": sweep.POINT_SCHEMA,
            "key": config.point_key(point),
            "bs": bs,
            "gamma": gamma,
            "vocab_size": vocab,
            "work": work,
            "walk_only": times,
            "whole_call": times,
        }

    return measure


def test_points_are_appended_one_line_each_and_resumed_without_recomputing(
    tmp_path: Path,
) -> None:
    calls: list[tuple[int, int, int]] = []
    records = sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    assert len(calls) == len(records) == 3
    lines = (tmp_path / sweep.POINTS_FILE).read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == [TINY.point_key(p) for p in TINY.points()]
    again = sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    assert len(calls) == 3  # nothing recomputed
    assert again == records


def test_a_torn_last_line_is_dropped_and_its_point_recomputed(tmp_path: Path) -> None:
    calls: list[tuple[int, int, int]] = []
    sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    path = tmp_path / sweep.POINTS_FILE
    good = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(good[:2]) + good[2][: len(good[2]) // 2])  # killed mid-write
    points, dropped = load_records(path, schema=sweep.POINT_SCHEMA, repair=False)
    assert len(points) == 2 and dropped == len(good[2]) // 2
    messages: list[str] = []
    calls.clear()
    sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls), progress=messages.append)
    assert calls == [TINY.points()[2]]
    assert "torn last line" in messages[0]
    assert path.read_bytes().startswith(b"".join(good[:2]))
    assert len(path.read_text().splitlines()) == 3


def test_a_bad_line_before_the_last_is_an_error(tmp_path: Path) -> None:
    calls: list[tuple[int, int, int]] = []
    sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    path = tmp_path / sweep.POINTS_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + "not json\n" + lines[2])
    with pytest.raises(sweep.SweepError, match=":2: not a point"):
        sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))


def test_no_resume_starts_over(tmp_path: Path) -> None:
    calls: list[tuple[int, int, int]] = []
    sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    sweep.run_sweep(TINY, out_dir=tmp_path, resume=False, measure=fake_measure(calls))
    assert len(calls) == 6
    assert len((tmp_path / sweep.POINTS_FILE).read_text().splitlines()) == 3


def test_fit_exponent_recovers_the_power_law() -> None:
    work = [10, 100, 1000, 10_000]
    assert sweep.fit_exponent(work, [3e-6 * w**1.0 for w in work]) == pytest.approx(1.0)
    assert sweep.fit_exponent(work, [3e-6 * w**0.5 for w in work]) == pytest.approx(0.5)
    assert math.isnan(sweep.fit_exponent([5, 5], [1.0, 2.0]))


def test_outputs_hold_every_point_and_the_exponents(tmp_path: Path) -> None:
    calls: list[tuple[int, int, int]] = []
    records = sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    summary = sweep.summarise(records, clock=TINY.clock, checked=True)
    assert summary.fixed_exponent == pytest.approx(1.0)
    assert summary.ok
    png = sweep_png(config=TINY, records=records, summary=summary)
    paths = sweep.write_outputs(
        out_dir=tmp_path, config=TINY, records=records, summary=summary, png=png
    )
    csv_lines = paths[0].read_text().splitlines()
    assert csv_lines[0].split(",") == list(sweep.CSV_COLUMNS)
    assert len(csv_lines) == 1 + 3
    document = json.loads(paths[1].read_text())
    assert len(document["points"]) == 3 and document["ok"] is True
    assert paths[2].read_bytes().startswith(b"\x89PNG")


def test_real_quick_points_time_both_samplers(tmp_path: Path) -> None:
    config = replace(TINY, vocab=(64,))
    (record,) = sweep.run_sweep(config, out_dir=tmp_path)
    for mode in ("walk_only", "whole_call"):
        for clock in ("wall", "cpu"):
            times = record[mode][clock]
            assert times["legacy_median_s"] > 0 and times["fixed_median_s"] > 0


def _sweep_args(out: Path, *extra: str) -> list[str]:
    grid = ["--bs", "4", "--gamma", "2,4", "--vocab", "2048,4096,8192", "--repeats", "2"]
    files = ["--out", str(out), "--out-dir", str(out / "report")]
    return ["sweep", *files, *grid, *extra]


@pytest.mark.e2e
def test_a_killed_sweep_resumes_without_losing_or_recomputing_points(tmp_path: Path) -> None:
    process = start_harness(*_sweep_args(tmp_path))
    assert process.stderr is not None
    try:
        for line in process.stderr:  # progress: one line per finished point
            if line.startswith("[sweep "):
                break
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    path = tmp_path / sweep.POINTS_FILE
    raw = path.read_bytes()
    before = raw[: raw.rfind(b"\n") + 1]  # the finished points (the kill may have torn one)
    finished = before.count(b"\n")
    assert 1 <= finished < 6, "the sweep was not killed midway"
    with path.open("ab") as handle:  # and a write cut short
        handle.write(b'{"schema": "dspark-harness/sweep-po')

    resumed = run_harness(*_sweep_args(tmp_path, "--json"))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{finished} already done" in resumed.stderr
    assert "dropped a torn last line" in resumed.stderr
    after = path.read_bytes()
    assert after.startswith(before)  # finished points kept byte for byte
    keys = [json.loads(line)["key"] for line in after.decode().splitlines()]
    assert len(keys) == len(set(keys)) == 6
    assert resumed.stderr.count("[sweep ") == 6 - finished  # only the missing ones ran
    summary = json.loads(resumed.stdout)["sections"][0]["data"]  # sweep.json's document
    assert len(summary["points"]) == 6
    for name in (sweep.CSV_FILE, sweep.JSON_FILE, sweep.PNG_FILE):
        assert (tmp_path / name).exists()


def test_sweep_command_rejects_a_bad_grid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    assert main(["sweep", "--out", str(tmp_path), "--bs", "0"]) == 2
    assert "--bs" in capsys.readouterr().err
    assert main(["sweep", "--out", str(tmp_path), "--threads", "-1", "--quick"]) == 2
    assert not (tmp_path / sweep.POINTS_FILE).exists()
