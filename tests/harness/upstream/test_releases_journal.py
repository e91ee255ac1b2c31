"""The releases sweep's journal is the run's journal: a resumed sweep reuses a row only
under the fingerprint of everything that changes it, drops a torn last line and judges
it again, judges a row of the wrong shape again, and refuses a damaged or foreign line
before the last in one line (exit 2). Resumed and fresh sweeps agree on every row. The
releases are judged by a stub (no wheel), in the sweep's own processes."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli import main
from harness.io.files import JournalError
from harness.releases import run
from harness.releases.run import JOURNAL, ROW_FIELDS, ReleaseJournal, run_sweep
from harness.releases.sweep import ReleaseRow, ReleaseTask, not_judged


def stub_judge(task: ReleaseTask) -> ReleaseRow:
    """A release whose defect only the support scan finds (as sglang 0.5.23's): NOT
    lossless with the scan, lossless without it."""
    row = not_judged(task, reason="stub")
    scanned = task.scan_triples > 0
    row.update(judged=True, lossless=not scanned, drop_in=False, not_covered=[], seconds=1.0)
    row["findings"] = [{"class": "support scan", "evidence": "e", "repro": "r"}] if scanned else []
    return row


def tasks(*, scan_triples: int = 4096, seed: int = 0) -> list[ReleaseTask]:
    return [
        ReleaseTask(
            package="sglang",
            version=version,
            cache="unused",
            offline=True,
            seed=seed,
            scan_triples=scan_triples,
        )
        for version in ("0.5.22", "0.5.23")
    ]


def sweep(out: Path, chosen: list[ReleaseTask], *, resume: bool, said: list[str] | None = None):
    return run_sweep(
        chosen,
        jobs=2,
        out_dir=out,
        resume=resume,
        judge=stub_judge,
        progress=(said if said is not None else []).append,
    )


def test_the_row_fields_are_the_rows(tmp_path: Path) -> None:
    assert set(ROW_FIELDS) == set(ReleaseRow.__annotations__)
    assert all(isinstance(row[k], ROW_FIELDS[k]) for row in [stub_judge(tasks()[0])] for k in row)


def test_a_row_judged_without_the_scan_is_judged_again_with_it(tmp_path: Path) -> None:
    said: list[str] = []
    sweep(tmp_path, tasks(scan_triples=0), resume=False)
    resumed = sweep(tmp_path, tasks(), resume=True, said=said)
    fresh = sweep(tmp_path / "fresh", tasks(), resume=False)
    assert resumed.rows == fresh.rows
    assert [row["lossless"] for row in resumed.rows] == [False, False]
    assert any("2 finished release row(s) will be recomputed" in line for line in said)


@pytest.mark.parametrize(
    "changed",
    [
        {"seed": 1},
        {"eras": True},
        {"version": True},
        {"life": True},
        {"life_only": True},
        {"life_rows": 2000},
    ],
    ids=["seed", "eras", "version", "life", "life-only", "life-rows"],
)
def test_the_fingerprint_follows_what_changes_a_row(
    changed: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = run.sweep_fingerprint(tasks())
    if "seed" in changed:
        assert run.sweep_fingerprint(tasks(seed=1)) != before
        return
    if "life_only" in changed or "life_rows" in changed:
        asked = {k: v for k, v in changed.items() if k in ("life_only", "life_rows")}
        chosen = [replace(task, **asked) for task in tasks()]  # type: ignore[arg-type]
        assert run.sweep_fingerprint(chosen) != before
        return
    if "eras" in changed:
        from harness.upstream.releases import eras

        monkeypatch.setattr(eras, "ERAS", eras.ERAS[:-1])
    elif "life" in changed:  # the depth of the life every row lives
        from harness import defaults

        monkeypatch.setattr(defaults, "JUNCTION_ROWS", defaults.JUNCTION_ROWS + 1)
    else:
        monkeypatch.setattr(run, "_harness_version", lambda: "0.0.0-other")
    assert run.sweep_fingerprint(tasks()) != before


def test_a_torn_last_line_is_dropped_and_judged_again(tmp_path: Path) -> None:
    fresh = sweep(tmp_path / "fresh", tasks(), resume=False)
    journal = tmp_path / JOURNAL
    journal.write_bytes((tmp_path / "fresh" / JOURNAL).read_bytes()[:-40])  # killed mid-write
    said: list[str] = []
    resumed = sweep(tmp_path, tasks(), resume=True, said=said)
    assert resumed.rows == fresh.rows
    assert any("dropped a torn last line" in line for line in said)
    assert len(journal.read_text().splitlines()) == 2


def test_binary_garbage_as_the_last_line_is_torn(tmp_path: Path) -> None:
    fresh = sweep(tmp_path / "fresh", tasks(), resume=False)
    (tmp_path / JOURNAL).write_bytes(b"\xff\xfe\x00garbage\x80")
    assert sweep(tmp_path, tasks(), resume=True).rows == fresh.rows


def test_a_row_of_the_wrong_shape_is_judged_again(tmp_path: Path) -> None:
    fresh = sweep(tmp_path / "fresh", tasks(), resume=False)
    ReleaseJournal(tmp_path, tasks()).append({"package": "sglang", "version": "0.5.23"})  # type: ignore[typeddict-item]
    said: list[str] = []
    resumed = sweep(tmp_path, tasks(), resume=True, said=said)
    assert resumed.rows == fresh.rows
    assert any("1 row(s) not of a release row's shape" in line for line in said)


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe\x00\x80binary\n", b'{"schema": "dspark-case-record/1", "key": "k"}\n'],
    ids=["binary", "foreign"],
)
def test_a_damaged_or_foreign_line_before_the_last_is_refused_in_one_line(
    damage: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep(tmp_path, tasks(), resume=False)
    journal = tmp_path / JOURNAL
    journal.write_bytes(damage + journal.read_bytes())
    with pytest.raises(JournalError, match=r":1: not a release row"):
        sweep(tmp_path, tasks(), resume=True)
    argv = ["releases", "--sglang", "0.5.23", "--vllm", "none", "--wheel-dir", str(tmp_path)]
    assert main([*argv, "--out-dir", str(tmp_path), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not a release row" in err[0]


def test_without_resume_the_journal_is_replaced_by_the_first_row(tmp_path: Path) -> None:
    sweep(tmp_path, tasks(scan_triples=0), resume=False)
    again = sweep(tmp_path, tasks(), resume=False)
    rows = [json.loads(line)["row"] for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert sorted(r["version"] for r in rows) == ["0.5.22", "0.5.23"]
    assert [r["lossless"] for r in rows] == [r["lossless"] for r in again.rows] == [False, False]


def dies_on_0_5_23(task: ReleaseTask) -> ReleaseRow:
    if task.version == "0.5.23":
        os._exit(3)
    return stub_judge(task)


def test_a_task_that_gave_no_row_is_not_journalled_and_is_tried_again(tmp_path: Path) -> None:
    # One process at a time: 0.5.22's row is in before 0.5.23's process dies (a pool
    # whose process dies fails every task it still runs, 0.5.22's too when they overlap).
    died = run_sweep(tasks(), jobs=1, out_dir=tmp_path, judge=dies_on_0_5_23)
    assert not died.ok and "the task failed" in died.rows[1]["not_covered"][0]
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 1  # 0.5.22's row alone
    resumed = sweep(tmp_path, tasks(), resume=True)
    assert resumed.ok and resumed.rows == sweep(tmp_path / "fresh", tasks(), resume=False).rows
