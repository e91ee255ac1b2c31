"""The kill table of the statistical oracle, by that oracle alone: every planted
losslessness defect (``tests/plugins/stats_defects.py``) is rejected by the default
run at the default alpha, and the correct samplers of other designs
(``tests/plugins/alternative_samplers.py``) and fixed pass across seeds.

Also where each defect shows: the defects that leave the first token exact are
never caught on position 0, the ones that bend every step are.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from fixed import DsparkDraftSampler as FixedSampler
from harness.oracles import stats
from harness.oracles.fits import REPEAT, position_name
from harness.oracles.problem import DEFAULT_CONFIG, StatsProblem, build_problem
from harness.plugins.implementations import Implementation
from tests.plugins.alternative_samplers import (
    MultinomialSampler,
    PrestagedNoiseSampler,
    UniformGumbelSampler,
)
from tests.plugins.stats_defects import STATS_DEFECTS

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
}
# Defects only one test can see: exactly that test carries the rejection.
CARRIED_BY = {
    "last-draft-token-altered": {position_name(DEFAULT_CONFIG.gamma - 1)},
    "noise-frozen-across-calls": {REPEAT},
}
# At T = 1 dividing by T changes nothing: only the other sampled groups can carry these.
TEMPERATURE_DEFECTS = {"temperature-ignored-in-draw", "corrected-divided-by-T"}


@pytest.fixture(scope="module")
def problem() -> StatsProblem:
    return build_problem(DEFAULT_CONFIG)


def test_the_kill_table_has_every_planted_defect() -> None:
    assert len(STATS_DEFECTS) == 9
    assert set(STATS_DEFECTS) >= set(CARRIED_BY) | FIRST_TOKEN_EXACT | TEMPERATURE_DEFECTS


@pytest.mark.parametrize("name", list(STATS_DEFECTS))
def test_every_planted_defect_is_rejected_by_the_default_run(
    name: str, problem: StatsProblem
) -> None:
    result = stats.run_stats(
        Implementation(name, STATS_DEFECTS[name], f"test:{name}"), problem=problem
    )
    assert result.error is None
    assert result.rejected and result.p_value < DEFAULT_CONFIG.alpha, f"p = {result.p_value:.3g}"
    assert not stats.meets_expectation(result)
    carried = {s.test for s in result.rejections()}
    if name in FIRST_TOKEN_EXACT:
        assert not result.rejected_at_position(0), carried
    else:
        assert result.rejected_at_position(0), carried
    if name in CARRIED_BY:
        assert carried == CARRIED_BY[name]
    groups = {s.group for s in result.rejections()}
    assert "greedy" not in groups  # the verifier keeps greedy rows exact whatever the draft
    if name in TEMPERATURE_DEFECTS:
        assert groups <= {"T=0.6", "T=1.4"}, groups


@pytest.mark.parametrize("seed", PASS_SEEDS)
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_designs_pass_across_seeds(name: str, seed: int) -> None:
    config = replace(DEFAULT_CONFIG, seed=seed, model_seed=seed)
    result = stats.run_stats(Implementation(name, CORRECT[name], f"test:{name}"), config=config)
    assert result.passed, f"p = {result.p_value:.3g}: {[s for s in result.rejections()]}"
    assert stats.meets_expectation(result)
