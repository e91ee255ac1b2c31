"""The oracle where it is unsure: when the family is suspicious but not decisive, the
strongest test runs again on fresh rows in stages, under an alpha split that keeps the
family-wise error at alpha; a near-threshold coupling the family misses is rejected by a
stage, a correct design that looks suspicious is decoded again and passes, and nothing
is added when nothing is suspicious."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.exit_codes import ExitCode
from harness.oracles import stats
from harness.oracles.fits import family_size
from harness.oracles.problem import DEFAULT_CONFIG, StatsConfig, StatsError
from harness.oracles.sequential import (
    first_stage_alpha,
    run_stages,
    stage_seeds,
    stage_spend,
    wants_stages,
)
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.statistics import p_text, stage_lines, verdict_word
from tests.plugins.shared_stream_defects import (
    NEAR_THRESHOLD_COUPLINGS,
    SHARED_STREAM_CORRECT,
)

FAMILY = family_size(DEFAULT_CONFIG)  # the tests of the default family
SUSPICIOUS_SEED = 66  # the reserved block's family p at this seed: 1.5e-4 (calibration)


def test_the_family_and_the_stages_spend_alpha_exactly() -> None:
    t, alpha = DEFAULT_CONFIG.suspicious, DEFAULT_CONFIG.alpha
    assert DEFAULT_CONFIG.stage_rows == (20_000, 50_000)
    assert stage_spend(DEFAULT_CONFIG) == t + t**2
    assert math.isclose(first_stage_alpha(DEFAULT_CONFIG) + alpha * (t + t**2), alpha)
    assert first_stage_alpha(replace(DEFAULT_CONFIG, stage_rows=())) == alpha


def test_each_stage_decodes_on_a_seed_of_its_own() -> None:
    seeds = stage_seeds(DEFAULT_CONFIG)
    assert len(set(seeds)) == len(seeds) == 2 and DEFAULT_CONFIG.seed not in seeds
    assert stage_seeds(replace(DEFAULT_CONFIG, seed=1)) != seeds


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"suspicious": 0.0}, "suspicious must be in (0, 0.5), got 0.0"),
        ({"suspicious": 0.5}, "suspicious must be in (0, 0.5), got 0.5"),
        ({"stage_rows": (20_000, 0)}, "stage rows must be positive integers, got (20000, 0)"),
        ({"stage_rows": (1.5,)}, "stage rows must be positive integers, got (1.5,)"),
    ],
)
def test_a_stage_setting_that_cannot_run_is_refused(changes: dict, said: str) -> None:
    with pytest.raises(StatsError, match=f"^{re.escape(said)}$"):
        replace(DEFAULT_CONFIG, **changes)


def never_decoded(*_: object) -> object:
    raise AssertionError("no stage should have been decoded")


@pytest.fixture(scope="module")
def fixed_at_defaults() -> stats.StatsResult:
    return stats.run_stats(builtin_implementations(("fixed",))[0])


def with_smallest_p(result: stats.StatsResult, p_value: float, **changes: object):
    """``result`` with its strongest test's p-value set (its family p: ``FAMILY`` times it)."""
    strongest = min(result.statistics, key=lambda s: s.p_value)
    others = tuple(s for s in result.statistics if s is not strongest)
    return replace(result, statistics=(replace(strongest, p_value=p_value), *others), **changes)


@pytest.mark.parametrize(
    ("family_p", "changes", "config"),
    [
        (0.2, {}, DEFAULT_CONFIG),  # not suspicious
        (DEFAULT_CONFIG.suspicious, {}, DEFAULT_CONFIG),  # on the threshold: not below it
        (1e-4, {}, replace(DEFAULT_CONFIG, stage_rows=())),  # no stage to run
        (1e-4, {"error": "ValueError: raised"}, DEFAULT_CONFIG),  # no verdict to add to
        (1e-9, {}, DEFAULT_CONFIG),  # rejected by the family (below alpha_0 / FAMILY each)
    ],
)
def test_no_stage_runs_unless_the_family_is_suspicious_and_undecided(
    family_p: float, changes: dict, config: StatsConfig, fixed_at_defaults: stats.StatsResult
) -> None:
    family = with_smallest_p(fixed_at_defaults, family_p / FAMILY, **changes)
    if family_p < first_stage_alpha(config):
        family = replace(family, statistics=(replace(family.statistics[0], rejected=True),))
    assert family.p_value == pytest.approx(family_p) or family.rejected
    assert not wants_stages(family, config=config)
    stages, calls = run_stages(family, config=config, decode=never_decoded)  # type: ignore[arg-type]
    assert stages == () and calls.calls == 0


def test_a_suspicious_undecided_family_wants_a_stage(fixed_at_defaults: stats.StatsResult) -> None:
    assert wants_stages(with_smallest_p(fixed_at_defaults, 1e-4 / FAMILY), config=DEFAULT_CONFIG)


def test_nothing_is_added_when_nothing_is_suspicious(
    fixed_at_defaults: stats.StatsResult,
) -> None:
    assert fixed_at_defaults.p_value >= DEFAULT_CONFIG.suspicious
    assert fixed_at_defaults.stages == () and fixed_at_defaults.statistical().stages == ""
    assert fixed_at_defaults.first_alpha == first_stage_alpha(DEFAULT_CONFIG)


@pytest.mark.parametrize("name", list(NEAR_THRESHOLD_COUPLINGS))
def test_a_near_threshold_coupling_is_rejected_by_a_stage(name: str) -> None:
    implementation = Implementation(name, NEAR_THRESHOLD_COUPLINGS[name], f"test:{name}")
    result = stats.run_stats(implementation)
    assert not any(s.rejected for s in result.statistics)  # the family alone misses it
    assert first_stage_alpha(DEFAULT_CONFIG) <= result.p_value < DEFAULT_CONFIG.suspicious
    strongest = min(result.statistics, key=lambda s: s.p_value)
    (stage,) = result.stages
    assert (stage.index, stage.rows, stage.level) == (1, 20_000, DEFAULT_CONFIG.alpha)
    assert stage.where() == stats.where(strongest)  # the strongest test, on fresh rows
    assert stage.rejected and stage.p_value < DEFAULT_CONFIG.alpha
    assert result.rejected and result.carrier_names()[0] == f"{stage.where()} at stage 1"
    said = result.statistical().describe()
    assert said.startswith(f"statistical oracle REJECTED it (family p={result.p_value:.3g}")
    assert f"sequential stage 1: {stage.where()} on 20,000 fresh rows" in said
    assert result.to_json_dict()["stages"][0]["rejected"] is True
    # the oracle's section: the results table's verdict, and a line per stage
    assert verdict_word(result) == (
        f"REJECTED (p={p_text(result.p_value)}; the family: none; stage 1 on 20,000 rows "
        f"p={p_text(stage.p_value)})"
    )
    run = stats.OracleRun(DEFAULT_CONFIG, {"chain": {name: result}}, decoded={}, problems=())
    assert stage_lines(run) == [
        "sequential stages (the family was suspicious, not decisive):",
        f"  {name} (chain): {stage.describe()}",
    ]


def test_a_suspicious_correct_design_is_decoded_again_and_passes() -> None:
    sampler = SHARED_STREAM_CORRECT["reserved-block"]
    result = stats.run_stats(
        Implementation("reserved", sampler, "test:reserved"),
        config=replace(DEFAULT_CONFIG, seed=SUSPICIOUS_SEED),
    )
    assert result.p_value < DEFAULT_CONFIG.suspicious  # suspicious, not decisive
    (stage,) = result.stages  # not suspicious on fresh rows: no second stage
    assert not stage.rejected and stage.p_value >= DEFAULT_CONFIG.suspicious
    assert result.passed
    said = result.statistical().describe()
    assert said.startswith("statistical oracle passed it (family p=")
    assert f"sequential stage 1: {stage.where()} on 20,000 fresh rows" in said
    assert "not decisive" in said


def test_stats_takes_the_stages_rows_and_refuses_a_negative_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = ["stats", "--rows", "40", "--heads", "vanilla", "--out-dir", str(tmp_path)]
    assert main([*small, "--stage-rows", "-1"]) == ExitCode.USAGE
    assert "--stage-rows must be >= 0, got '-1'" in capsys.readouterr().err
    main([*small, "--stage-rows", "0", "--json"])  # 40 rows: legacy's verdict is not the point
    config = json.loads(capsys.readouterr().out)["sections"][0]["data"]["config"]
    assert config["stage_rows"] == [] and config["suspicious"] == DEFAULT_CONFIG.suspicious
