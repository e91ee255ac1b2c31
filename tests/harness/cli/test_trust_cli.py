"""Trust at the command line: a sampler that exits still gets a complete report, a
changed plug-in is recomputed on resume, a resumed report equals a fresh one byte for
byte, one run per --out-dir, and a stop is one line with exit 130 or 143."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from harness.case import make_case
from harness.cli import main
from tests.helpers import REPO_ROOT, run_harness, start_harness, subprocess_env

JOURNAL = "compare.cases.jsonl"
PLANTED = "tests.plugins.untrusted_samplers"
FIXED_PLUGIN = "from fixed import DsparkDraftSampler as Mine\n"
BROKEN_PLUGIN = """from fixed import DsparkDraftSampler


class Mine(DsparkDraftSampler):
    def __call__(self, hidden_states, input_ids):
        super().__call__(hidden_states, input_ids)
        self.out.fill_(0)
"""


def _case_args(tmp_path: Path, count: int = 2) -> list[str]:
    paths = []
    for seed in range(count):
        path = tmp_path / f"case{seed}.json"
        make_case(bs=2, gamma=3, vocab_size=33, hidden_size=8, markov_rank=4, seed=seed).save(path)
        paths += ["--case", str(path)]
    return paths


def _harness(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, env=env or subprocess_env())


def _report(out_dir: Path) -> dict:
    return json.loads((out_dir / "compare.json").read_text())


def test_a_sampler_raising_system_exit_zero_gets_exit_1_and_a_complete_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    impl = f"planted={PLANTED}:SystemExitSampler"
    out = tmp_path / "out"
    assert (
        main(
            ["compare", "--no-stats", *_case_args(tmp_path), "--impl", impl, "--out-dir", str(out)]
        )
        == 1
    )
    stdout = capsys.readouterr().out
    assert "planted: FAILS 2 lossless check(s) on 2 of 2 cases" in stdout
    assert "raised SystemExit: 0" in stdout
    report = _report(out)
    assert len(report["cases"]) == 2 and not report["ok"]
    assert [s["ok"] for s in report["sections"] if s["title"] == "Fixed sampler"] == [True]


def test_a_mutating_plugin_is_blamed_alone_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    impl = f"planted={PLANTED}:HiddenStatesMutatingSampler"
    out = tmp_path / "out"
    assert (
        main(
            ["compare", "--no-stats", *_case_args(tmp_path), "--impl", impl, "--out-dir", str(out)]
        )
        == 1
    )
    verdicts = {s["title"]: s for s in _report(out)["sections"]}
    assert verdicts["Fixed sampler"]["ok"] and verdicts["Reference oracle"]["ok"]
    assert verdicts["Divergence ledger: legacy vs fixed"]["ok"]
    planted = verdicts["Implementation planted"]
    assert not planted["ok"] and "mutated its inputs: hidden_states" in planted["text"]
    capsys.readouterr()


@pytest.mark.e2e
def test_a_changed_plugin_is_recomputed_on_resume_and_equals_a_fresh_run(tmp_path: Path) -> None:
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    (plugin_dir / "my_sampler.py").write_text(FIXED_PLUGIN)
    env = subprocess_env(PYTHONPATH=f"{REPO_ROOT}:{plugin_dir}")
    cases = _case_args(tmp_path)
    common = [*cases, "--only", "reference,fixed", "--impl", "mine=my_sampler:Mine", "--no-stats"]
    first = _harness("compare", *common, "--out-dir", str(tmp_path / "run"), env=env)
    assert first.returncode == 0, first.stderr
    (plugin_dir / "my_sampler.py").write_text(BROKEN_PLUGIN)
    resumed = _harness("compare", *common, "--resume", "--out-dir", str(tmp_path / "run"), env=env)
    assert resumed.returncode == 1, resumed.stderr
    assert "2 finished case record(s) will be recomputed" in resumed.stderr
    assert "(finished earlier)" not in resumed.stderr
    fresh = _harness("compare", *common, "--out-dir", str(tmp_path / "fresh"), env=env)
    assert fresh.returncode == 1
    for name in ("compare.txt", "compare.md"):
        assert (tmp_path / "run" / name).read_bytes() == (tmp_path / "fresh" / name).read_bytes()
    resumed_json, fresh_json = _report(tmp_path / "run"), _report(tmp_path / "fresh")
    del resumed_json["timing"], fresh_json["timing"]  # wall times: the only varying part
    assert resumed_json == fresh_json


def test_a_resumed_report_is_byte_identical_to_a_fresh_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _case_args(tmp_path, count=3)
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    assert main(["compare", "--no-stats", *cases, "--quiet", "--out-dir", str(fresh)]) == 0
    lines = (fresh / JOURNAL).read_text().splitlines(keepends=True)
    resumed.mkdir()
    (resumed / JOURNAL).write_text("".join(lines[:2]))  # stopped after two cases
    assert main(["compare", "--no-stats", *cases, "--resume", "--out-dir", str(resumed)]) == 0
    assert capsys.readouterr().err.count("(finished earlier)") == 2
    for name in ("compare.txt", "compare.md"):
        assert (resumed / name).read_bytes() == (fresh / name).read_bytes()
    fresh_text = (fresh / "compare.json").read_text()
    resumed_text = (resumed / "compare.json").read_text()
    cut = fresh_text.index('"timing"')  # wall times come last and may differ
    assert resumed_text[:cut] == fresh_text[:cut]


def test_a_changed_time_limit_recomputes_the_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _case_args(tmp_path)
    assert main(["compare", "--no-stats", *cases, "--quiet", "--out-dir", str(tmp_path)]) == 0
    argv = [
        "compare",
        "--no-stats",
        *cases,
        "--resume",
        "--time-limit",
        "60",
        "--out-dir",
        str(tmp_path),
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "2 finished case record(s) will be recomputed" in err
    assert "(finished earlier)" not in err


def test_a_run_refused_for_bad_input_keeps_the_previous_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _case_args(tmp_path)
    assert main(["compare", "--no-stats", *cases, "--quiet", "--out-dir", str(tmp_path)]) == 0
    before = (tmp_path / JOURNAL).read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert (
        main(["compare", "--no-stats", *cases, "--case", str(bad), "--out-dir", str(tmp_path)]) == 2
    )
    assert (tmp_path / JOURNAL).read_bytes() == before
    capsys.readouterr()


def _start_slow_run(tmp_path: Path, out_dir: Path) -> subprocess.Popen[str]:
    return start_harness(
        "compare",
        *_case_args(tmp_path, count=6),
        "--only",
        "fixed",
        "--impl",
        f"slow={PLANTED}:SlowSampler",
        "--out-dir",
        str(out_dir),
    )


def _wait_for_case(process: subprocess.Popen[str], number: int) -> list[str]:
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.startswith(f"[{number}/"):
            return seen
    raise AssertionError("the run ended early: " + "".join(seen))


@pytest.mark.e2e
def test_a_second_run_on_one_out_dir_is_refused_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "shared"
    holder = _start_slow_run(tmp_path, out_dir)
    try:
        _wait_for_case(holder, 3)  # two cases journaled: the folder is locked
        journal = (out_dir / JOURNAL).read_bytes()
        assert (
            main(["compare", "--no-stats", *_case_args(tmp_path), "--out-dir", str(out_dir)]) == 2
        )
        assert f"in use by another harness run (pid {holder.pid})" in capsys.readouterr().err
        assert (out_dir / JOURNAL).read_bytes()[: len(journal)] == journal  # nothing deleted
    finally:
        holder.kill()
        holder.wait(timeout=60)


@pytest.mark.e2e
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_is_one_line_with_exit_130_or_143_and_a_resumable_journal(
    tmp_path: Path, signum: int, code: int
) -> None:
    out_dir = tmp_path / "out"
    process = _start_slow_run(tmp_path, out_dir)
    _wait_for_case(process, 3)
    process.send_signal(signum)
    assert process.stderr is not None
    rest = process.stderr.read()
    assert process.wait(timeout=60) == code
    assert "Traceback" not in rest
    assert rest.strip().splitlines()[-1].startswith(f"interrupted by {signal.Signals(signum).name}")
    records = [json.loads(line) for line in (out_dir / JOURNAL).read_text().splitlines()]
    assert len(records) >= 2  # every line complete


@pytest.mark.e2e
def test_a_closed_stdout_is_not_a_traceback(tmp_path: Path) -> None:
    """``--json | head``: the reader is gone before the report is printed."""
    process = start_harness(
        "compare",
        *_case_args(tmp_path),
        "--no-stats",
        "--quiet",
        "--json",
        "--out-dir",
        str(tmp_path / "out"),
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # nobody reads: the first print meets a broken pipe
    assert process.stderr.read() == ""
    assert process.wait(timeout=300) == 128 + signal.SIGPIPE
    assert _report(tmp_path / "out")["cases"]  # the files were written before the print


@pytest.mark.e2e
def test_a_run_killed_before_its_first_record_keeps_the_previous_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "out"
    assert (
        main(["compare", "--no-stats", *_case_args(tmp_path), "--quiet", "--out-dir", str(out_dir)])
        == 0
    )
    previous = (out_dir / JOURNAL).read_bytes()
    process = _start_slow_run(tmp_path, out_dir)  # validated, running its first case
    _wait_for_case(process, 1)
    process.kill()
    process.wait(timeout=60)
    assert (out_dir / JOURNAL).read_bytes() == previous
    capsys.readouterr()
