"""The statistical losslessness oracle on the built-in samplers.

Fixed seeds throughout (never Hypothesis): fixed passes; legacy is rejected, on
every head kind, by tests of committed positions >= 1, never by anything confined
to position 0; greedy-only legacy is lossless; a raising sampler is a recorded
result; the report section and the ``stats`` command. Planted defects are in
``test_stats_kill_table.py``, calibration in ``test_stats_calibration.py``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.cli import stats as stats_cli
from harness.cli.exit_codes import ExitCode
from harness.judge import judge_oracle
from harness.judgement import OracleVerdict
from harness.options import RunOptions
from harness.oracles import stats
from harness.oracles.defaults import DEFAULT_TRUNCATED
from harness.oracles.fits import REPEAT, family_size, position_name
from harness.oracles.problem import DEFAULT_CONFIG, StatsConfig, StatsError, group_label
from harness.oracles.sequential import first_stage_alpha
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.statistics import stats_section
from reference import HEAD_KINDS
from tests.plugins.stats_defects import ReusedNoiseSampler
from tests.session_share import computed_once

ALPHA = 1e-6  # the oracle's default significance level
FIXED_SEEDS = range(4)
MIXES = ((0.5,), (1.0,), (1.5,), (0.0, 0.5, 1.0, 1.5))  # 0: a greedy row

FIXED = builtin_implementations(("fixed",))[0]
LEGACY = builtin_implementations(("legacy",))[0]
REUSED_NOISE = Implementation("reused-noise", ReusedNoiseSampler, "test:ReusedNoiseSampler")


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[OracleVerdict, list[str]]:
    """The built-ins and the reused-noise defect at the default config, with legacy's
    power curves (one oracle run for the module, once a session), and its progress lines."""
    return computed_once(tmp_path_factory, "stats-oracle-judged", _judged)


def _judged() -> tuple[OracleVerdict, list[str]]:
    lines: list[str] = []
    implementations = [*builtin_implementations(), REUSED_NOISE]
    verdict = judge_oracle(implementations, options=RunOptions(progress=lines.append), power=True)
    return verdict, lines


@pytest.fixture(scope="module")
def default_results(judged: tuple[OracleVerdict, list[str]]) -> dict[str, stats.StatsResult]:
    """Fixed and legacy at the default config."""
    results = judged[0].run.results
    return {name: results[name] for name in ("fixed", "legacy")}


# -- what the default covers ------------------------------------------------------------------
def test_the_default_covers_every_head_the_parameter_grid_and_every_committed_position(
    default_results: dict[str, stats.StatsResult],
) -> None:
    config = DEFAULT_CONFIG
    assert config.head_kinds == HEAD_KINDS
    temperature_groups = [g for g in config.groups if g not in config.truncated]
    assert {(g.temperature, g.greedy) for g in temperature_groups} == {
        (0.6, False),
        (1.0, False),
        (1.4, False),
        (0.0, True),
    }
    assert not any(g.top_k > 1 or g.top_p < 1 or g.min_p > 0 for g in temperature_groups)
    assert config.truncated == DEFAULT_TRUNCATED and config.truncated_at() == ("far",)
    assert config.alpha == ALPHA
    tests = {(s.target, s.head, s.group, s.test) for s in default_results["fixed"].statistics}
    # every target's temperature groups, and the far target's truncated sets beside them
    groups = len(config.targets) * 4 + len(DEFAULT_TRUNCATED)
    assert len(tests) == family_size(config) == groups * 3 * (config.gamma + 3)
    ran = {s.group for s in default_results["fixed"].statistics if s.target == "far"}
    assert ran == {group_label(g) for g in config.groups}
    assert {s.target for s in default_results["fixed"].statistics} == {"far", "mid", "near"}
    positions = {s.test for s in default_results["fixed"].statistics}
    assert {position_name(j) for j in range(config.gamma + 1)} <= positions  # gamma: bonus
    # Holm's first level: alpha less the sequential stages' share, over the family
    level = first_stage_alpha(config) / family_size(config)
    assert default_results["fixed"].test_level == pytest.approx(level, rel=1e-12)


# -- fixed passes -------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fixed_follows_the_target_distribution(seed: int) -> None:
    config = replace(DEFAULT_CONFIG, seed=seed, model_seed=seed // 2, temperatures=MIXES[seed])
    result = stats.run_stats(FIXED, config=config)
    assert result.error is None
    assert not result.rejected, f"p = {result.p_value:.3g} under {config.describe()}"
    assert not any(m.p_value < result.test_level for m in result.marginals)
    assert result.impossible == 0


def test_fixed_seeds_cover_every_temperature_mix() -> None:
    assert {MIXES[s] for s in FIXED_SEEDS} == set(MIXES)


# -- legacy is rejected, but not on the first token ---------------------------------------------
def test_legacy_is_rejected_on_the_joint_of_the_first_two_committed_tokens(
    default_results: dict[str, stats.StatsResult],
) -> None:
    legacy = default_results["legacy"]
    assert legacy.rejected and legacy.p_value < ALPHA
    assert any(s.test == "joint" for s in legacy.rejections())
    assert not legacy.rejected_at_position(0)  # position 0 alone cannot see the bug
    assert default_results["fixed"].passed
    assert stats.expectations_hold(default_results)


def test_legacy_is_rejected_in_the_default_run_on_every_head_kind(
    default_results: dict[str, stats.StatsResult],
) -> None:
    rejections = default_results["legacy"].rejections()
    assert {s.head for s in rejections} == set(HEAD_KINDS)
    # carried by committed positions >= 1 and the joint: never position 0, never greedy rows
    assert all(s.test != position_name(0) and s.group != "greedy" for s in rejections)


@pytest.mark.parametrize("head_kind", HEAD_KINDS)
def test_legacy_is_rejected_for_every_head_kind(head_kind: str) -> None:
    config = replace(DEFAULT_CONFIG, head_kinds=(head_kind,), seed=1)
    result = stats.run_stats(LEGACY, config=config)
    assert result.rejected, f"p = {result.p_value:.3g}"
    assert not result.rejected_at_position(0)


def test_legacy_with_only_greedy_rows_is_lossless() -> None:
    """Greedy rows ignore the noise, so the double walk changes nothing there."""
    result = stats.run_stats(
        LEGACY, config=replace(DEFAULT_CONFIG, temperatures=(0.0,), truncated=())
    )
    assert result.passed and result.impossible == 0


def test_a_sampler_that_reuses_one_noise_tensor_for_every_step_is_rejected(
    judged: tuple[OracleVerdict, list[str]],
) -> None:
    result = judged[0].run.results["reused-noise"]
    assert result.rejected, f"p = {result.p_value:.3g}"
    assert not result.rejected_at_position(0)  # step 0 draws fresh noise: exact


def test_an_implementation_that_raises_is_a_recorded_result() -> None:
    class Broken(FixedSampler):
        def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
            raise RuntimeError("kernel launch failed")

    result = stats.run_stats(Implementation("broken", Broken, "test:Broken"))
    assert result.error == "RuntimeError: kernel launch failed"
    assert not result.passed and not stats.meets_expectation(result)


def test_an_implementation_past_the_time_limit_is_not_judged() -> None:
    config = replace(DEFAULT_CONFIG, head_kinds=("vanilla",))
    problems = stats.build_problems(config)
    result, decoded = stats.decode_and_fit(FIXED, problems=problems, time_limit_s=1e-4)
    assert decoded is None and result.error is None and not result.passed
    assert result.not_judged is not None and "time limit" in result.not_judged
    assert result.statistical().failed and not result.statistical().rejected


def test_the_repeat_test_does_not_fire_on_fresh_noise(
    default_results: dict[str, stats.StatsResult],
) -> None:
    for result in default_results.values():
        repeats = [s for s in result.statistics if s.test == REPEAT]
        groups = sum(len(DEFAULT_CONFIG.groups_at(t)) for t in DEFAULT_CONFIG.targets)
        assert len(repeats) == groups * 3 and not any(s.rejected for s in repeats)
        assert sum(s.observations for s in repeats) > 1000  # rounds from a revisited anchor


# -- report section and command -------------------------------------------------------------------
def test_report_section_shows_the_verdict_coverage_and_the_power_curves_and_holds_plugins(
    judged: tuple[OracleVerdict, list[str]],
) -> None:
    part, lines = stats_section(judged[0]), judged[1]
    assert not part.ok  # the reused-noise plug-in is held to passing, and is rejected
    assert part.data["expectations"] == {
        "reference": True,
        "fixed": True,
        "legacy": True,
        "reused-noise": False,
    }
    json.dumps(part.data, allow_nan=False)
    assert set(part.data["by_verifier"]["chain"]) == {
        "reference",
        "fixed",
        "legacy",
        "reused-noise",
    }
    curves = part.data["power_curves"]
    assert [c["head"] for c in curves] == list(HEAD_KINDS)
    for curve in curves:
        assert curve["rows_for_target_power"] is not None
        assert curve["rows_for_target_power"] > curve["rule_of_thumb_rows"] == 10 * 8
        assert curve["rows_for_target_power"] <= 25_000
        points = curve["points"]
        assert [p["rows"] for p in points] == sorted(p["rows"] for p in points)
        assert points[-1]["empirical_power"] == 1.0
    assert "power" in part.text and "rule of thumb" in part.text
    for word in ("covered: heads vanilla, gated, rnn", "T=0.6", "greedy", "bonus", "Holm"):
        assert word in part.text
    assert "legacy REJECTED" in part.verdict and "carried by" in part.text
    assert any("power curve" in line for line in lines)  # progress per seed


def stats_args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    """The ``stats`` sub-command's options plus the main parser's shared ones."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out-dir", type=Path, default=tmp_path)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--max-memory")
    stats_cli.add_arguments(parser)
    return parser.parse_args(["--quiet", *argv])


def test_stats_command_exits_0_on_the_default_prints_json_and_writes_out_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert stats_cli.command(stats_args(tmp_path, "--json")) == ExitCode.OK
    body = json.loads(capsys.readouterr().out)
    data = body["sections"][0]["data"]
    assert body["ok"] and data["by_verifier"]["chain"]["legacy"]["rejected"]
    assert data["config"]["alpha"] == ALPHA
    assert json.loads((tmp_path / "stats.json").read_text())["ok"]
    assert (tmp_path / "stats.md").exists() and (tmp_path / "stats.txt").exists()


def test_stats_command_power_draws_a_curve_per_head_and_writes_the_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("--json", "--power", "--head", "vanilla", "--rows", "4000")
    assert stats_cli.command(stats_args(tmp_path, *argv)) == ExitCode.OK
    curves = json.loads(capsys.readouterr().out)["sections"][0]["data"]["power_curves"]
    assert [c["head"] for c in curves] == ["vanilla"]
    assert (tmp_path / stats_cli.POWER_PNG).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_stats_command_exits_1_when_an_extra_implementation_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = "mine=tests.plugins.stats_defects:ReusedNoiseSampler"
    code = stats_cli.command(stats_args(tmp_path, "--impl", spec))
    assert code == ExitCode.FAIL
    assert "mine" in capsys.readouterr().out


def test_stats_command_time_limit_turns_a_slow_sampler_into_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = stats_cli.command(stats_args(tmp_path, "--time-limit", "0.0001", "--heads", "vanilla"))
    assert code == ExitCode.FAIL
    assert "time limit" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ("--impl", "nope"),
        ("--impl", "x=no_such_module_here:Sampler"),
        ("--m", "1"),
        ("--rows", "0"),
        ("--alpha", "2"),
        ("--temperatures", "-1"),
        ("--heads", "lstm"),
        ("--rounds", "0"),
    ],
)
def test_stats_command_exits_2_on_bad_usage(
    tmp_path: Path, argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert stats_cli.command(stats_args(tmp_path, *argv)) == ExitCode.USAGE
    assert "error:" in capsys.readouterr().err


def test_config_rejects_what_cannot_run() -> None:
    with pytest.raises(StatsError, match="distinct"):
        StatsConfig(head_kinds=("vanilla", "vanilla"))
    with pytest.raises(StatsError, match="prev_embedding_scale"):
        StatsConfig(prev_embedding_scale=0.0)
