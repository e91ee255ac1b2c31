"""repro: minimise a failure of a chosen check, replay with another implementation,
and exit 0 once the implementation passes."""

from __future__ import annotations

import json
from pathlib import Path

from harness.case import Case
from harness.cli import main


def test_repro_check_minimises_a_failure_of_that_check_and_replay_honours_impl(
    tmp_path: Path, capsys
) -> None:
    repro_file = tmp_path / "tf.json"
    argv = ["repro", "--check", "teacher_forcing", "--out", str(repro_file), "--quiet"]
    assert main(argv) == 1
    written = json.loads(repro_file.read_text())
    assert written["check"] == "teacher_forcing"
    assert "teacher_forcing" in {f["check"] for f in written["outcome"]["failures"]}
    case = Case.from_json_dict(written["case"])
    assert case.folded_sampling and case.has_sampled_rows  # not the no-anchor crash
    assert case.bs * case.gamma * case.vocab_size <= 4 * 5 * 257
    capsys.readouterr()
    assert main(["repro", str(repro_file), "--json", "--quiet"]) == 1
    replay = json.loads(capsys.readouterr().out)
    assert (replay["identical"], replay["passes"]) == (True, False)
    fixed = ["--impl", "patched=fixed:DsparkDraftSampler"]
    assert main(["repro", str(repro_file), *fixed, "--json", "--quiet"]) == 0
    replay = json.loads(capsys.readouterr().out)
    assert (replay["implementation"], replay["passes"]) == (
        "patched=fixed:DsparkDraftSampler",
        True,
    )


def test_repro_check_refuses_an_unknown_check(tmp_path: Path, capsys) -> None:
    argv = ["repro", "--check", "nosuch", "--out", str(tmp_path / "x.json"), "--quiet"]
    assert main(argv) == 2
    assert "--check must be one of" in capsys.readouterr().err


def test_repro_honours_the_time_limit(tmp_path: Path, capsys) -> None:
    hanging = ["--impl", "hang=tests.plugins.broken_samplers:HangingSampler"]
    # every shrinking step hangs for the whole limit: a short one keeps the test short, and
    # the sampler hangs whatever the machine's load
    argv = ["repro", *hanging, "--check", "ran", "--time-limit", "0.1", "--quiet", "--json"]
    assert main([*argv, "--out", str(tmp_path / "hang.json")]) == 1
    written = json.loads(capsys.readouterr().out)
    failures = {f["check"]: f["detail"] for f in written["outcome"]["failures"]}
    assert "time limit of 0.1 s" in failures["ran"]
