"""Roles in the statistical oracle: the pair's buggy side must be rejected (and not on
position 0 alone), every ``--expect-fail`` name must be rejected, every other
implementation must pass; ``stats --pair`` and ``--expect-fail`` say so, as ``report``
does.

Fixed seeds throughout. The upstream-shaped modules under ``tests/plugins/upstream``
are the before/after pair; ``ReusedNoiseSampler`` (a planted defect the oracle
rejects) stands in for a planted bug that a CI guard expects to fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.exit_codes import ExitCode
from harness.options import Roles
from harness.oracles import stats
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins.stats_defects import ReusedNoiseSampler
from tests.session_share import computed_once

UPSTREAM = Path("tests/plugins/upstream")
BEFORE = f"before={UPSTREAM}/dspark_before_fix.py"
AFTER = f"after={UPSTREAM}/dspark_after_fix.py"
REUSED = "reused=tests.plugins.stats_defects:ReusedNoiseSampler"

FIXED, LEGACY = builtin_implementations(("fixed", "legacy"))
VANILLA = ("--heads", "vanilla")  # where a test's subject is the roles, not the heads


def _stats(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main(["stats", *argv, "--quiet", "--json", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    return code, (json.loads(out)["sections"][0] if code != ExitCode.USAGE else {})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, stats.StatsResult]:
    """Fixed, legacy and the reused-noise defect at the default config, seed 0 (once a
    session)."""
    return computed_once(tmp_path_factory, "stats-roles-results", _results)


def _results() -> dict[str, stats.StatsResult]:
    reused = Implementation("reused", ReusedNoiseSampler, "test:ReusedNoiseSampler")
    return stats.run_oracle(stats.DEFAULT_CONFIG, implementations=[FIXED, LEGACY, reused]).results


def test_each_role_holds_its_implementation_to_its_own_expectation(
    results: dict[str, stats.StatsResult],
) -> None:
    assert stats.expectations_hold({n: results[n] for n in ("fixed", "legacy")})
    # with another pair, legacy has no role that expects rejection: it must pass, and fails
    other_pair = Roles(pair=("reused", "fixed"))
    assert not stats.meets_expectation(results["legacy"], other_pair)
    assert stats.meets_expectation(results["reused"], other_pair)
    assert not stats.meets_expectation(results["reused"])  # judged: must pass
    assert stats.meets_expectation(results["reused"], Roles(expect_fail=("reused",)))
    assert not stats.meets_expectation(results["fixed"], Roles(expect_fail=("fixed",)))


def test_the_buggy_side_must_not_be_rejected_on_position_0_alone(
    results: dict[str, stats.StatsResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = results["legacy"]
    assert legacy.rejected and not legacy.rejected_at_position(0)
    monkeypatch.setattr(stats.StatsResult, "rejected_at_position", lambda self, j: True)
    assert not stats.meets_expectation(legacy)  # the buggy side: position 0 must pass
    # an expect-fail name only needs a rejection
    assert stats.meets_expectation(legacy, Roles(pair=("x", "fixed"), expect_fail=("legacy",)))


def test_default_implementations_include_legacy_only_where_a_role_expects_its_rejection() -> None:
    names = lambda roles: [i.name for i in stats.default_implementations(roles)]  # noqa: E731
    assert names(Roles()) == ["fixed", "legacy"]
    assert names(Roles(pair=("before", "after"))) == ["fixed"]
    assert names(Roles(pair=("before", "after"), expect_fail=("legacy",))) == ["fixed", "legacy"]


def test_stats_pair_rejects_the_before_fix_module_and_passes_the_after_fix_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("--impl", BEFORE, "--impl", AFTER, "--pair", "before,after")
    code, section = _stats(tmp_path, capsys, *argv)
    data = section["data"]
    assert code == ExitCode.OK, section["verdict"]
    assert set(data["by_verifier"]["chain"]) == {"fixed", "before", "after"}
    assert (
        data["by_verifier"]["chain"]["before"]["rejected"]
        and not data["by_verifier"]["chain"]["after"]["rejected"]
    )
    assert data["expectations"] == {"fixed": True, "before": True, "after": True}
    assert data["roles"]["pair"] == ["before", "after"]
    assert "before REJECTED" in section["verdict"] and "(expected)" in section["verdict"]
    assert "before on position 0 alone passes" in section["verdict"]
    # the same modules the other way round: after must now be rejected, and is not
    code, section = _stats(tmp_path, capsys, *argv[:4], "--pair", "after,before", *VANILLA)
    assert code == ExitCode.FAIL
    assert section["data"]["expectations"] == {"fixed": True, "before": False, "after": False}
    assert "UNEXPECTED" in section["verdict"]


def test_stats_expect_fail_passes_only_when_the_name_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, section = _stats(tmp_path, capsys, "--impl", REUSED, *VANILLA)
    assert code == ExitCode.FAIL and section["data"]["expectations"]["reused"] is False
    code, section = _stats(tmp_path, capsys, "--impl", REUSED, "--expect-fail", "reused", *VANILLA)
    assert code == ExitCode.OK
    assert section["data"]["expectations"] == {"fixed": True, "legacy": True, "reused": True}
    assert section["data"]["roles"]["expect_fail"] == ["reused"]
    code, section = _stats(tmp_path, capsys, *VANILLA, "--expect-fail", "fixed")
    assert code == ExitCode.FAIL and section["data"]["expectations"]["fixed"] is False


@pytest.mark.parametrize(
    "argv",
    [
        ("--expect-fail", "nope"),
        ("--pair", "before,after"),
        ("--pair", "legacy"),
        ("--impl", "fixed=fixed:DsparkDraftSampler"),
    ],
)
def test_stats_roles_naming_absent_implementations_are_bad_usage(
    tmp_path: Path, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats", *argv, "--quiet", "--out-dir", str(tmp_path)]) == ExitCode.USAGE
    assert "error:" in capsys.readouterr().err
