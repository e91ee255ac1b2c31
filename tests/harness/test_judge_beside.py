"""The oracle beside the matrix (``--jobs``): its decodes run in processes forked from
the judge's, dealt into shares of about equal work, and the judgement is the one the
judge gives with every stage in one process, timings apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.exit_codes import ExitCode
from harness.judge import judge, oracle_shares
from harness.options import RunOptions
from harness.oracles.problem import FAR, StatsConfig
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import builtin_implementations, parse_impl_spec
from harness.testing import check_sampler

SMALL = StatsConfig(rows=200, rounds=2, head_kinds=("vanilla", "gated"), targets=(FAR,))


def names(shares: list[list[object]]) -> list[list[str]]:
    return [[i.name for i in share] for share in shares]  # type: ignore[attr-defined]


def test_legacy_with_its_power_curves_is_a_share_of_its_own() -> None:
    built = builtin_implementations()  # reference, fixed, legacy
    assert names(oracle_shares(built, jobs=2, power=True)) == [["legacy"], ["reference", "fixed"]]
    assert names(oracle_shares(built, jobs=2, power=False)) == [["reference", "legacy"], ["fixed"]]
    assert names(oracle_shares(built, jobs=8, power=False)) == [
        ["reference"],
        ["fixed"],
        ["legacy"],
    ]
    assert names(oracle_shares(built[:1], jobs=2, power=True)) == [["reference"]]


def without_timings(value: object) -> object:
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if k not in ("timing", "wall_s")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


@pytest.mark.parametrize("power", [False, True])
def test_the_oracle_beside_the_matrix_gives_the_same_judgement(power: bool) -> None:
    cases = [c for c in standard_matrix() if c.name == "folded-sampled/vanilla"]
    implementations = [
        *builtin_implementations(),
        parse_impl_spec("reused=tests.plugins.stats_defects:ReusedNoiseSampler"),
    ]
    progress: dict[int, list[str]] = {1: [], 2: []}
    judgements = {
        jobs: judge(
            cases,
            implementations,
            options=RunOptions(jobs=jobs, progress=progress[jobs].append),
            oracle_config=SMALL,
            power=power,
        )
        for jobs in (1, 2)
    }
    one, two = (judgements[j].to_json() for j in (1, 2))
    assert without_timings(one) == without_timings(two)
    for implementation in implementations:  # every share's verdict came back
        assert judgements[2].verdict(implementation.name).statistical.ran
    assert sorted(progress[1]) == sorted(progress[2])  # every line of the share's progress
    if power:
        assert judgements[2].oracle is not None and judgements[2].oracle.run.curves


FAULTS = {
    "exits": ("ExitsForked", "exited with status 0"),
    "killed": ("KilledForked", "died from signal SIGKILL"),
    "stopped": ("StoppedForked", "died from signal SIGTERM"),
}
ONE_CASE = "folded-sampled/vanilla"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_process_beside_that_ends_without_an_answer_is_its_samplers_failure(
    fault: str,
) -> None:
    """``os._exit``, SIGKILL or SIGTERM in the oracle's process alone: the API's verdict
    fails on the statistical oracle, saying how the process ended, and raises nothing."""
    sampler, died = FAULTS[fault]
    verdict = check_sampler(
        f"tests.plugins.forked_faults:{sampler}",
        cases=[c for c in standard_matrix() if c.name == ONE_CASE],
        jobs=2,
    )
    assert not verdict.ok and not verdict.lossless
    assert verdict.statistical.ran and verdict.statistical.failed
    assert verdict.statistical.error is not None and died in verdict.statistical.error
    assert not verdict.failures  # the matrix ran in the judge, where it is correct


@pytest.mark.e2e
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_compare_blames_the_plugin_whose_process_beside_ended_and_writes_its_report(
    fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sampler, died = FAULTS[fault]
    case = next(c for c in standard_matrix() if c.name == ONE_CASE)
    case.save(tmp_path / "case.json")
    code = main(
        [
            "compare",
            "--case",
            str(tmp_path / "case.json"),
            "--impl",
            f"{fault}=tests.plugins.forked_faults:{sampler}",
            "--jobs",
            "2",
            "--out-dir",
            str(tmp_path),
            "--json",
        ]
    )
    assert code == ExitCode.FAIL
    report = json.loads(capsys.readouterr().out)
    held = report["judgement"]["implementations"]
    assert not held[fault]["ok"] and died in json.dumps(held[fault])
    assert held["reference"]["ok"] and held["fixed"]["ok"]  # it is blamed alone
    assert (tmp_path / "compare.json").is_file()


def test_a_plug_in_never_shares_a_process_beside_with_other_code() -> None:
    built = builtin_implementations()
    plugins = [
        parse_impl_spec(f"p{n}=tests.plugins.stats_defects:ReusedNoiseSampler") for n in (1, 2)
    ]
    assert names(oracle_shares([*built, plugins[0]], jobs=2, power=True)) == [
        ["reference", "fixed", "legacy"],
        ["p1"],
    ]
    assert names(oracle_shares([*built, *plugins], jobs=2, power=False)) == [
        ["reference", "fixed", "legacy"],
        ["p1"],
        ["p2"],
    ]
    assert names(oracle_shares(plugins, jobs=1, power=False)) == [["p1"], ["p2"]]
