"""The options of a run are built once from the command line, with one default each:
the command line's defaults are ``RunOptions``' own, and every run option given on the
command line lands in the one value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import case as case_module
from harness.cli import build_parser, main
from harness.cli.emit import UsageError
from harness.cli.options import run_options
from harness.judge import judge
from harness.options import DEFAULT_OPTIONS, Roles, RunOptions
from harness.pipeline import repro
from harness.pipeline.check_result import Tier
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import builtin_implementations


def _options(*argv: str, command: str = "compare") -> RunOptions:
    args = build_parser(with_options=[command]).parse_args([command, *argv])
    return run_options(args)


@pytest.mark.parametrize("command", ["report", "compare", "stats", "repro"])
def test_the_command_line_defaults_are_the_run_options_defaults(command: str) -> None:
    assert _options(command=command) == DEFAULT_OPTIONS


def test_every_run_option_on_the_command_line_lands_in_the_one_value() -> None:
    given = _options(
        "--seed=7",
        "--time-limit=5",
        "--isolate",
        "--pair=old,new",
        "--expect-fail=old",
        "--require=lossless",
        "--max-memory=1G",
        "--no-stats",
        "--resume",
        "--verifiers=chain",
        "--jobs=3",
        "--rows=300",
        "--thorough",
    )
    assert given == RunOptions(
        seed=7,
        time_limit_s=5.0,
        isolate=True,
        roles=Roles(pair=("old", "new"), expect_fail=("old",), require=Tier.LOSSLESS),
        max_memory_bytes=1 << 30,
        stats=False,
        verifiers=("chain",),
        resume=True,
        jobs=3,
        oracle_rows=300,
        thorough=True,
    )


@pytest.mark.parametrize("command", ["stats", "compare"])
@pytest.mark.parametrize(
    ("rows", "message"),
    [("0", "--rows must be a positive integer, got 0"), (str(10**12), "oracle run needs")],
)
def test_the_oracles_rows_are_one_option_checked_alike_before_any_work(
    command: str, rows: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _options("--rows", "300", command=command).oracle_rows == 300
    assert main([command, "--rows", rows, "--out-dir", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_bad_memory_limit_is_refused_with_the_option_named() -> None:
    with pytest.raises(UsageError, match="--max-memory"):
        _options("--max-memory=lots")


def test_the_progress_sink_is_no_option_of_the_outcome() -> None:
    lines: list[str] = []
    assert RunOptions(time_limit_s=3.0, progress=lines.append) == RunOptions(time_limit_s=3.0)


def test_a_case_file_for_another_device_runs_on_the_runs_one_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--device`` is the one carrier: a case file naming CUDA runs, with the oracle,
    on the CPU ``--device cpu`` asks for (not the matrix on CUDA, the oracle on the CPU).
    The file loads as on a machine with a GPU; without one here, any work sent to CUDA
    would fail."""
    monkeypatch.setattr(case_module, "check_device", lambda device, **_: None)
    case = next(c for c in standard_matrix() if c.name == "folded-sampled/vanilla")
    path = tmp_path / "case.json"
    case.with_changes(device="cuda").save(path)
    argv = ["compare", "--case", str(path), "--only", "fixed", "--verifiers", "chain"]
    argv += ["--device", "cpu", "--json", "--quiet", "--out-dir", str(tmp_path / "out")]
    assert main(argv) == 0
    body = json.loads(capsys.readouterr().out)
    assert [record["case"]["device"] for record in body["cases"]] == ["cpu"]
    oracle = next(s for s in body["sections"] if s["title"].startswith("Statistical"))
    assert oracle["data"]["config"]["device"] == "cpu"


def test_a_repro_file_for_another_device_replays_on_the_runs_one_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finding recorded on CUDA replays where ``--device`` says (here the CPU), as
    ``compare`` runs a case file: identical, since the case is the same but its device."""
    case = next(c for c in standard_matrix() if c.name == "folded-sampled/vanilla")
    legacy = builtin_implementations(("legacy",))[0]
    outcome = repro.outcome_of(case, legacy)
    path = tmp_path / "legacy.json"
    recorded = case.with_changes(device="cuda")
    repro.write_repro(path, case=recorded, implementation=legacy, outcome=outcome)
    monkeypatch.setattr(case_module, "check_device", lambda device, **_: None)
    argv = ["repro", str(path), "--device", "cpu", "--json", "--quiet"]
    assert main([*argv, "--out-dir", str(tmp_path / "out")]) == 1  # legacy still fails
    assert json.loads(capsys.readouterr().out)["identical"] is True


def test_judge_runs_every_case_on_the_options_device() -> None:
    case = next(c for c in standard_matrix() if c.name == "folded-sampled/vanilla")
    judgement = judge(
        [case.with_changes(device="cuda")],
        builtin_implementations(("fixed",)),
        options=RunOptions(stats=False),
    )
    assert judgement.ok and [r["case"]["device"] for r in judgement.records] == ["cpu"]
