"""The command line: main job verdict and exit codes, compare, repro write and replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.case import Case, make_case
from harness.cli import main
from harness.io.lock import claim_out_dir
from tests.helpers import DefaultReport

PLUGIN = "tests.plugins.broken_samplers"


def test_main_job_passes_and_states_the_verdict_first(default_report: DefaultReport) -> None:
    out = default_report.stdout
    assert default_report.exit_code == 0, out
    head = out.splitlines()[:8]
    assert any(line.startswith("VERDICT: PASS") for line in head)
    assert any("fixed: clean on" in line for line in head)
    assert any("legacy: reproduces the documented bug" in line for line in head)
    assert default_report.json()["ok"] is True
    assert (default_report.out_dir / "report.md").read_text().startswith("# DSpark")


def test_the_quiet_report_through_a_pipe_fits_100_columns(default_report: DefaultReport) -> None:
    lines = default_report.stdout.splitlines()
    # the files written are named by the paths the user chose (here a long temporary one)
    wide = [line for line in lines if len(line) > 100 and not line.startswith("written: ")]
    assert wide == []
    assert "== Coverage ==" in default_report.stdout  # the tables that were wider are there


def test_main_job_with_the_oracle_writes_the_power_curve_figure(
    default_report: DefaultReport,
) -> None:
    out = default_report.stdout
    assert default_report.exit_code == 0, out
    assert "legacy REJECTED" in out or "legacy on position 0 alone passes" in out
    png = default_report.out_dir / "report-power.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_broken_plugin_is_flagged_with_its_reason(tmp_path: Path, capsys) -> None:
    code = main(
        [
            "compare",
            "--no-stats",  # a failing check decides it
            "--only",
            "reference,fixed",
            "--impl",
            f"stale={PLUGIN}:StaleCorrectedSampler",
            "--quiet",
            "--out-dir",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "stale: FAILS" in out
    assert "teacher_forcing: corrected_out differs" in out
    assert "fixed: clean on" in out


def test_compare_runs_a_case_file(tmp_path: Path, capsys) -> None:
    case_file = tmp_path / "case.json"
    make_case(bs=2, gamma=3, vocab_size=31, hidden_size=8, markov_rank=4, seed=4).save(case_file)
    argv = ["compare", "--no-stats", "--case", str(case_file), "--json", "--quiet"]
    code = main([*argv, "--out-dir", str(tmp_path)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [c["case"]["vocab_size"] for c in data["cases"]] == [31]


def test_repro_writes_a_small_legacy_failure_and_replays_it_identically(
    tmp_path: Path, capsys
) -> None:
    repro_file = tmp_path / "legacy.json"
    assert main(["repro", "--out", str(repro_file), "--quiet"]) == 1
    written = json.loads(repro_file.read_text())
    case = Case.from_json_dict(written["case"])
    assert case.bs * case.gamma * case.vocab_size <= 4 * 5 * 257  # shrunk, never grown
    capsys.readouterr()
    assert main(["repro", str(repro_file), "--json", "--quiet"]) == 1
    replay = json.loads(capsys.readouterr().out)
    assert replay["identical"] is True
    assert replay["outcome"] == written["outcome"]


def test_repro_of_a_plugin_names_the_plugin(tmp_path: Path, capsys) -> None:
    """... and runs while another run holds the --out-dir it names: it writes none there."""
    repro_file = tmp_path / "stale.json"
    spec = f"stale={PLUGIN}:StaleCorrectedSampler"
    held = tmp_path / "held"
    with claim_out_dir(held):
        argv = ["repro", "--impl", spec, "--out", str(repro_file), "--out-dir", str(held)]
        assert main([*argv, "--quiet"]) == 1
    assert json.loads(repro_file.read_text())["implementation"] == spec
    capsys.readouterr()
    assert main(["repro", str(repro_file), "--quiet"]) == 1
    assert "IDENTICAL" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--time-limit", "0"],
        ["repro"],
        ["compare", "--impl", "nope"],
        ["nosuchcommand"],
        ["--seed", "x"],
    ],
)
def test_bad_usage_exits_2(argv: list[str], tmp_path: Path, capsys) -> None:
    assert main([*argv, "--out-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip()


def test_only_none_runs_the_plug_ins_alone_and_without_one_is_bad_usage(tmp_path, capsys) -> None:
    from harness.plugins.implementations import parse_names

    assert parse_names("none") == [] and parse_names(" reference, fixed ") == ["reference", "fixed"]
    case = make_case(bs=2, gamma=3, vocab_size=31, hidden_size=8, markov_rank=4, seed=4)
    case.save(tmp_path / "case.json")
    plug_in = "u=tests/plugins/alternative_samplers.py:UniformGumbelSampler"
    common = ["--case", str(tmp_path / "case.json"), "--no-stats", "--json", "--quiet"]
    code = main(["compare", "--only", "none", *common, "--out-dir", str(tmp_path / "a")])
    assert code == 2 and "nothing to judge" in capsys.readouterr().err
    code = main(
        ["compare", "--only", "none", "--impl", plug_in, *common, "--out-dir", str(tmp_path / "b")]
    )
    report = json.loads(capsys.readouterr().out)
    assert set(report["judgement"]["implementations"]) == {"u"}, report["judgement"]
    assert code == 1  # u is lossless but not drop-in, and drop-in is required by default
