"""The kill table of the statistical oracle, by that oracle alone: every planted
losslessness defect (``tests/plugins/stats_defects.py``) is rejected by the default
run at the default alpha, and the correct samplers of other designs
(``tests/plugins/alternative_samplers.py``) and fixed pass across seeds.

Also where each defect shows: the defects that leave the first token exact are
never caught on position 0, the ones that bend every step are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from fixed import DsparkDraftSampler as FixedSampler
from harness.oracles import stats
from harness.oracles.fits import REPEAT, position_name
from harness.oracles.problem import DEFAULT_CONFIG, FAR, StatsProblem, build_problems
from harness.plugins.implementations import Implementation
from tests.plugins.alternative_samplers import (
    MultinomialSampler,
    PrestagedNoiseSampler,
    UniformGumbelSampler,
)
from tests.plugins.stats_defects import LIFE_ONLY, NEAR_TARGET_ONLY, STATS_DEFECTS
from tests.session_share import computed_once

CORRECT = {
    "fixed": FixedSampler,
    "prestaged-noise": PrestagedNoiseSampler,
    "uniform-gumbel": UniformGumbelSampler,
    "multinomial": MultinomialSampler,
}
PASS_SEEDS = (0, 1, 2)
# The defects that leave the first committed token exact, and the tests that must carry them.
FIRST_TOKEN_EXACT = {
    "reused-noise-across-steps",
    "corrected-shifted-one-step",
    "last-draft-token-altered",
    "noise-frozen-across-calls",
    "noise-row-shared-per-tile",
}
# Defects only one test can see: that test carries the rejection, the strongest, and no
# other test does, except where a row's rounds become dependent (noise frozen across
# calls), which can push a position test over too on some streams.
CARRIED_BY = {
    "last-draft-token-altered": {position_name(DEFAULT_CONFIG.gamma - 1)},
    "noise-frozen-across-calls": {REPEAT},
    "noise-row-shared-per-tile": {position_name(DEFAULT_CONFIG.gamma - 1)},
}
# At T = 1 dividing by T changes nothing: only the other sampled groups can carry these.
TEMPERATURE_DEFECTS = {"temperature-ignored-in-draw", "corrected-divided-by-T"}


@pytest.fixture(scope="module")
def problems() -> tuple[StatsProblem, ...]:
    return build_problems(DEFAULT_CONFIG)


@pytest.fixture
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], stats.StatsResult]:
    """The default run of a planted defect or a correct design, by its name: once a
    session, as several tests read the same run."""

    def run(name: str) -> stats.StatsResult:
        sampler = STATS_DEFECTS[name] if name in STATS_DEFECTS else CORRECT[name]
        implementation = Implementation(name, sampler, f"test:{name}")
        return computed_once(
            tmp_path_factory,
            f"kill-table-{name}",
            lambda: stats.run_stats(implementation, config=DEFAULT_CONFIG),
        )

    return run


def test_the_kill_table_has_every_planted_defect() -> None:
    assert len(STATS_DEFECTS) == 11
    named = set(CARRIED_BY) | FIRST_TOKEN_EXACT | TEMPERATURE_DEFECTS
    assert set(STATS_DEFECTS) >= named | set(LIFE_ONLY) | set(NEAR_TARGET_ONLY)


@pytest.mark.parametrize("name", list(STATS_DEFECTS))
def test_every_planted_defect_is_rejected_by_the_default_run(
    name: str, default_run: Callable[[str], stats.StatsResult]
) -> None:
    result = default_run(name)
    assert result.error is None
    assert result.rejected and result.p_value < DEFAULT_CONFIG.alpha, f"p = {result.p_value:.3g}"
    assert not stats.meets_expectation(result)
    carried = {s.test for s in result.rejections()}
    if name in FIRST_TOKEN_EXACT:
        assert not result.rejected_at_position(0), carried
    else:
        assert result.rejected_at_position(0), carried
    if name in CARRIED_BY:
        strongest = min(result.rejections(), key=lambda s: s.p_value).test
        assert strongest in CARRIED_BY[name] and CARRIED_BY[name] <= carried, carried
        if name != "noise-frozen-across-calls":
            assert carried == CARRIED_BY[name]
    groups = {s.group for s in result.rejections()}
    assert "greedy" not in groups  # the verifier keeps greedy rows exact whatever the draft
    if name in TEMPERATURE_DEFECTS:
        assert groups <= {"T=0.6", "T=1.4"}, groups


@pytest.mark.parametrize("seed", PASS_SEEDS)
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_designs_pass_across_seeds(
    name: str, seed: int, default_run: Callable[[str], stats.StatsResult]
) -> None:
    config = replace(DEFAULT_CONFIG, seed=seed, model_seed=seed)
    if config == DEFAULT_CONFIG:
        result = default_run(name)
    else:
        result = stats.run_stats(Implementation(name, CORRECT[name], f"test:{name}"), config=config)
    assert result.passed, f"p = {result.p_value:.3g}: {[s for s in result.rejections()]}"
    assert stats.meets_expectation(result)


@pytest.mark.parametrize("name", LIFE_ONLY)
def test_a_defect_of_a_later_staging_is_seen_only_because_the_oracle_restages(
    name: str, default_run: Callable[[str], stats.StatsResult]
) -> None:
    """Every call staged with the same requests in the same slots (the oracle before
    it restaged) cannot tell a sampler that keeps its first parameters from fixed."""
    impl = Implementation(name, STATS_DEFECTS[name], f"test:{name}")
    one_staging = stats.run_stats(impl, config=replace(DEFAULT_CONFIG, restage=False))
    assert one_staging.passed, one_staging.carrier_names()
    restaged = default_run(name)
    assert restaged.rejected and not stats.meets_expectation(restaged)


@pytest.mark.parametrize("name", NEAR_TARGET_ONLY)
def test_a_draft_defect_the_far_target_hides_is_seen_near_the_draft(
    name: str, default_run: Callable[[str], stats.StatsResult]
) -> None:
    """Far from the draft, the verifier's residual draws hide one noise row per tile;
    at the target equal to the drafter's own law nearly every draft is committed."""
    impl = Implementation(name, STATS_DEFECTS[name], f"test:{name}")
    far_only = stats.run_stats(impl, config=replace(DEFAULT_CONFIG, targets=(FAR,)))
    assert far_only.passed, far_only.carrier_names()
    result = default_run(name)
    assert result.rejected
    assert "near" in {s.target for s in result.rejections()}
    assert "far" not in {s.target for s in result.rejections()}


def test_the_targets_run_from_far_to_nearly_every_draft_accepted(
    problems: tuple[StatsProblem, ...], default_run: Callable[[str], stats.StatsResult]
) -> None:
    result = default_run("fixed")
    accepted = result.mean_accepted_length
    gamma = DEFAULT_CONFIG.gamma
    assert [p.target.name for p in problems] == ["far", "mid", "near"]
    for head in DEFAULT_CONFIG.head_kinds:
        assert accepted["far"][head] < accepted["mid"][head] < accepted["near"][head]
        assert accepted["far"][head] < 0.3 * gamma
    # the drafter's own law: every draft of a stateless head, most of the rnn head's
    assert accepted["near"]["vanilla"] == accepted["near"]["gated"] == gamma
    assert accepted["near"]["rnn"] > 0.75 * gamma
