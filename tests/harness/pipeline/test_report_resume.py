"""Comparison and report runs journal each finished case and resume after a kill."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from harness.case import make_case
from harness.cli import main
from tests.helpers import run_harness, start_harness

JOURNAL = "compare.cases.jsonl"


def _case_files(tmp_path: Path) -> list[str]:
    paths = []
    for seed in range(3):
        path = tmp_path / f"case{seed}.json"
        make_case(bs=2, gamma=3, vocab_size=33, hidden_size=8, markov_rank=4, seed=seed).save(path)
        paths += ["--case", str(path)]
    return paths


def _cases_of(out_dir: Path) -> list[dict]:
    return json.loads((out_dir / "compare.json").read_text())["cases"]


def test_a_torn_last_journal_line_is_dropped_and_its_case_rerun(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _case_files(tmp_path)
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    assert main(["compare", "--no-stats", *cases, "--quiet", "--out-dir", str(fresh)]) == 0
    lines = (fresh / JOURNAL).read_text().splitlines(keepends=True)
    assert len(lines) == 3
    resumed.mkdir()
    (resumed / JOURNAL).write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # killed mid-write
    capsys.readouterr()
    assert main(["compare", "--no-stats", *cases, "--resume", "--out-dir", str(resumed)]) == 0
    progress = capsys.readouterr().err
    assert progress.count("(finished earlier)") == 1
    assert _cases_of(resumed) == _cases_of(fresh)
    assert (resumed / JOURNAL).read_text() == (fresh / JOURNAL).read_text()


def test_without_resume_the_journal_starts_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _case_files(tmp_path)
    assert main(["compare", "--no-stats", *cases, "--quiet", "--out-dir", str(tmp_path)]) == 0
    assert main(["compare", "--no-stats", *cases, "--out-dir", str(tmp_path)]) == 0
    assert "(finished earlier)" not in capsys.readouterr().err
    assert len((tmp_path / JOURNAL).read_text().splitlines()) == 3


def test_a_damaged_journal_line_before_the_last_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _case_files(tmp_path)
    assert main(["compare", "--no-stats", *cases, "--quiet", "--out-dir", str(tmp_path)]) == 0
    lines = (tmp_path / JOURNAL).read_text().splitlines(keepends=True)
    (tmp_path / JOURNAL).write_text("garbage\n" + "".join(lines[1:]))
    assert (
        main(["compare", "--no-stats", *cases, "--resume", "--quiet", "--out-dir", str(tmp_path)])
        == 2
    )
    assert "not a case record" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_killed_report_resumes_without_recomputing_finished_cases(tmp_path: Path) -> None:
    command = ["compare", "--no-stats", "--out-dir", str(tmp_path)]  # the journal: cases
    process = start_harness(*command)
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("[6/"):  # five cases are finished and journaled
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL
    finished = len((tmp_path / JOURNAL).read_text().splitlines())
    assert finished >= 5
    resumed = run_harness(*command, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("(finished earlier)") == finished
    fresh_dir = tmp_path / "fresh"
    fresh = run_harness("compare", "--no-stats", "--quiet", "--out-dir", str(fresh_dir))
    assert fresh.returncode == 0, fresh.stderr
    assert _cases_of(tmp_path) == _cases_of(fresh_dir)


def test_sweep_points_measured_by_other_code_are_recomputed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.measure import sweep
    from tests.harness.measure.test_sweep import TINY, fake_measure

    calls: list[tuple[int, int, int]] = []
    first = sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    monkeypatch.setattr(sweep, "code_fingerprint", lambda: "other-code")
    messages: list[str] = []
    again = sweep.run_sweep(
        TINY, out_dir=tmp_path, measure=fake_measure(calls), progress=messages.append
    )
    assert len(calls) == 6  # every point measured again
    assert "3 finished point(s) will be recomputed" in messages[0]
    assert again == first  # the fake measure is deterministic
    unchanged = sweep.run_sweep(TINY, out_dir=tmp_path, measure=fake_measure(calls))
    assert len(calls) == 6 and unchanged == first


def test_a_journal_keeps_only_records_of_the_same_fingerprint(tmp_path: Path) -> None:
    from harness.io.journal import Journal

    path = tmp_path / "j.jsonl"
    old = Journal(path, schema="s", fingerprint="old", what="unit")
    old.finished(resume=False)
    old.append({"schema": "s", "key": "a", "value": 1})
    old.append({"schema": "s", "key": "b", "value": 2})
    new = Journal(path, schema="s", fingerprint="new", what="unit")
    finished, notes = new.finished(resume=True)
    assert finished == {} and "2 finished unit(s) will be recomputed" in notes[0]
    new.append({"schema": "s", "key": "a", "value": 3})
    again, _ = Journal(path, schema="s", fingerprint="new", what="unit").finished(resume=True)
    assert again == {"a": {"schema": "s", "key": "a", "value": 3}}
    fresh = Journal(path, schema="s", fingerprint="new", what="unit")
    fresh.finished(resume=False)
    assert path.read_text().count("\n") == 3  # not touched until the first new record
    fresh.append({"schema": "s", "key": "c", "value": 4})
    assert path.read_text().count("\n") == 1
