"""Roles on the command line: --require, --expect-fail, --pair, and nothing to judge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.case import make_case
from harness.cli import main
from harness.pipeline.matrix import standard_matrix

ALTERNATIVES = "tests.plugins.alternative_samplers"
PLANTED = "tests.plugins.planted_defects_verdicts"


@pytest.fixture
def case_file(tmp_path: Path) -> Path:
    path = tmp_path / "case.json"
    make_case(bs=2, gamma=3, vocab_size=31, hidden_size=8, markov_rank=4, max_bs=3, seed=4).save(
        path
    )
    return path


def _compare(tmp_path: Path, *args: str) -> list[str]:
    """Roles on the checks' verdicts; the oracle's roles are tests/harness/oracles/'s."""
    return ["compare", *args, "--no-stats", "--quiet", "--out-dir", str(tmp_path)]


def test_other_design_is_lossless_not_drop_in_and_passes_when_lossless_is_required(
    tmp_path: Path, case_file: Path, capsys
) -> None:
    spec = f"pre={ALTERNATIVES}:PrestagedNoiseSampler"
    base = ["--case", str(case_file), "--only", "reference,fixed", "--impl", spec]
    assert main(_compare(tmp_path, *base)) == 1
    out = capsys.readouterr().out
    assert "pre: lossless on 1/1 cases; not drop-in: noise_budget:" in out
    assert main(_compare(tmp_path, *base, "--require", "lossless", "--json")) == 0
    verdicts = json.loads(capsys.readouterr().out)["judgement"]
    assert verdicts["implementations"]["pre"]["lossless"] is True
    assert verdicts["implementations"]["pre"]["drop_in"] is False
    assert verdicts["implementations"]["fixed"]["drop_in"] is True
    assert verdicts["roles"]["require"] == "lossless"


def test_case_records_carry_both_verdicts_and_each_check_its_tier(
    tmp_path: Path, case_file: Path, capsys
) -> None:
    main(_compare(tmp_path, "--case", str(case_file), "--json"))
    record = json.loads(capsys.readouterr().out)["cases"][0]
    legacy, fixed = record["implementations"]["legacy"], record["implementations"]["fixed"]
    assert (fixed["lossless"], fixed["drop_in"]) == (True, True)
    assert (legacy["lossless"], legacy["drop_in"]) == (False, False)
    assert {c["tier"] for c in fixed["checks"]} == {"lossless", "drop_in"}
    assert record["ledger"]["pair"] == ["legacy", "fixed"]


def test_expect_fail_passes_only_when_the_implementation_fails_a_lossless_check(
    tmp_path: Path, case_file: Path, capsys
) -> None:
    frozen = f"frozen={PLANTED}:FrozenNoiseSampler"
    base = ["--case", str(case_file), "--only", "reference,fixed", "--impl", frozen]
    assert main(_compare(tmp_path, *base, "--expect-fail", "frozen")) == 0
    assert "frozen: fails a lossless check, as expected — fresh_noise" in capsys.readouterr().out
    assert main(_compare(tmp_path, *base)) == 1
    capsys.readouterr()
    assert main(_compare(tmp_path, *base, "--expect-fail", "fixed")) == 1
    assert "fixed: expected to fail a lossless check" in capsys.readouterr().out


def test_any_two_implementations_can_be_held_to_the_ledger(tmp_path: Path, capsys) -> None:
    argv = [
        "--only",
        "reference,fixed",
        "--impl",
        "old=legacy:DsparkDraftSampler",
        "--impl",
        "new=fixed:DsparkDraftSampler",
        "--pair",
        "old,new",
    ]
    assert main(_compare(tmp_path, *argv)) == 0
    out = capsys.readouterr().out
    cases = len(standard_matrix())
    assert (
        f"old: reproduces the documented bug — ledger holds on {cases}/{cases} cases (pair " in out
    )
    assert f"new: clean on {cases}/{cases} cases — lossless and drop-in" in out
    report = json.loads((tmp_path / "compare.json").read_text())
    assert report["judgement"]["roles"]["pair"] == ["old", "new"]
    assert report["judgement"]["implementations"]["old"]["held_to"] == "the divergence ledger"
    assert all(case["ledger"]["pair"] == ["old", "new"] for case in report["cases"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--only", ""],
        ["--only", "legacy"],
        ["--only", "reference", "--pair", "reference,nosuch"],
        ["--only", "reference", "--expect-fail", "nosuch"],
        ["--only", "reference", "--pair", "reference"],
        ["--only", "reference", "--require", "perfect"],
    ],
)
def test_nothing_to_judge_or_unknown_roles_exit_2(
    argv: list[str], tmp_path: Path, case_file: Path, capsys
) -> None:
    assert main(_compare(tmp_path, "--case", str(case_file), *argv)) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() and "VERDICT: PASS" not in captured.out
