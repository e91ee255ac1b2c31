"""The statistical oracle's arithmetic: the tails as the oracle uses them; Pearson's
statistic against ``scipy.stats.chisquare``; rare-cell merging; strata; Holm's
correction; the repeat score. Exact where the math is exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from harness.oracles import gof
from harness.oracles.fits import repeat_score
from reference.decode import DecodeResult

ALPHA = 1e-6  # the oracle's default significance level
REL = 1e-10  # agreement with scipy, relative


# -- the tails --------------------------------------------------------------------------------
def test_chi2_tail_is_exact_for_two_degrees_of_freedom_and_inverts() -> None:
    for x in (0.1, 3.0, 40.0, 600.0):
        assert gof.chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-12)
    assert gof.chi2_sf(5.0, 0) == 1.0
    critical = gof.chi2_isf(ALPHA, 63)
    assert gof.chi2_sf(critical, 63) == pytest.approx(ALPHA, rel=1e-6)


def test_noncentral_tail_reduces_to_the_central_one_and_grows_with_noncentrality() -> None:
    x = gof.chi2_isf(ALPHA, 20)
    assert gof.noncentral_chi2_sf(x, dof=20, noncentrality=0.0) == pytest.approx(ALPHA)
    tails = [gof.noncentral_chi2_sf(x, dof=20, noncentrality=lam) for lam in (1, 10, 50, 200)]
    assert tails == sorted(tails) and tails[-1] > 0.99


def test_pearson_fit_of_one_stratum_is_the_textbook_statistic() -> None:
    observed = torch.tensor([30.0, 20.0, 25.0, 25.0])
    probs = torch.full((4,), 0.25, dtype=torch.float64)
    _, p = scipy_stats.chisquare(observed.numpy(), (observed.sum() * probs).numpy())
    fit = gof.pearson_fit(observed.unsqueeze(0), expected_probs=probs.unsqueeze(0))
    assert fit.p_value == pytest.approx(float(p), rel=REL)


# -- merging and strata ---------------------------------------------------------------------------
def test_rare_cells_are_merged_until_every_group_expects_at_least_five() -> None:
    expected = np.array([100.0, 1.0, 0.0, 2.0, 7.0, 30.0, 1.5])
    (groups,), (n_groups,) = gof.merged_groups(expected[None])
    sums = np.bincount(groups, weights=expected, minlength=n_groups)
    assert bool((sums >= gof.MIN_EXPECTED_COUNT).all())
    # 1 + 0 + 2 + 1.5 = 4.5 < 5, so the merged group also takes the next smallest (7)
    assert n_groups == 3
    assert len(set(groups[[1, 2, 3, 4, 6]].tolist())) == 1


def test_a_one_hot_law_leaves_nothing_to_test() -> None:
    fit = gof.pearson_fit(
        torch.tensor([[40.0, 0.0, 0.0]]), expected_probs=torch.tensor([[1.0, 0.0, 0.0]])
    )
    assert fit.dof == 0 and fit.p_value == 1.0


def test_observations_in_impossible_cells_give_p_value_zero() -> None:
    expected_probs = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    fit = gof.pearson_fit(torch.tensor([[50.0, 49.0, 1.0]]), expected_probs=expected_probs)
    assert fit.impossible == 1 and fit.p_value == 0.0
    exact = gof.pearson_fit(torch.tensor([[50.0, 50.0, 0.0]]), expected_probs=expected_probs)
    assert exact.chi2 == 0.0 and exact.p_value == 1.0 and exact.tv_distance == 0.0


def test_strata_add_their_statistics_and_degrees_of_freedom() -> None:
    expected_probs = torch.tensor([[0.25] * 4, [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    observed = torch.tensor([[30.0, 20.0, 25.0, 25.0], [12.0, 18.0, 33.0, 37.0]])
    both = gof.pearson_fit(observed, expected_probs=expected_probs)
    parts = [
        gof.pearson_fit(observed[s : s + 1], expected_probs=expected_probs[s : s + 1])
        for s in range(2)
    ]
    assert both.dof == 6 == sum(part.dof for part in parts)
    assert both.chi2 == pytest.approx(sum(part.chi2 for part in parts))


# -- Holm ----------------------------------------------------------------------------------------
def test_holm_steps_down_and_stops_at_the_first_survivor() -> None:
    p = [0.001, 0.04, 0.012, 0.3]
    # thresholds 0.05/4, 0.05/3, 0.05/2, 0.05 against the sorted p-values
    assert gof.holm_rejections(p, alpha=0.05) == [True, False, True, False]
    assert gof.holm_rejections([0.02, 0.03], alpha=0.05) == [True, True]
    assert gof.holm_rejections([0.026, 0.03], alpha=0.05) == [False, False]


def test_holm_rejects_something_exactly_when_bonferroni_does() -> None:
    generator = torch.Generator().manual_seed(3)
    for _ in range(200):
        p = (torch.rand(12, generator=generator, dtype=torch.float64) ** 3).tolist()
        assert any(gof.holm_rejections(p, alpha=0.05)) == (min(p) < 0.05 / 12)


# -- the repeat score -----------------------------------------------------------------------------
def _two_rounds(anchors: list[list[int]], first: list[list[int]]) -> DecodeResult:
    blocks = torch.full((2, len(anchors[0]), 2), -1, dtype=torch.int64)
    blocks[:, :, 0] = torch.tensor(first)
    return DecodeResult(
        committed=blocks[0],
        accepted_lengths=torch.zeros(1, dtype=torch.int64),
        rounds=2,
        round_anchors=torch.tensor(anchors),
        round_blocks=blocks,
        round_slots=torch.zeros(2, len(anchors[0]), dtype=torch.int64),
    )


def test_repeat_score_counts_agreements_of_rounds_from_the_same_anchor() -> None:
    law = torch.tensor([[0.5, 0.5], [0.2, 0.8]], dtype=torch.float64)
    # rows 0, 1 revisit their anchor (0 and 1); row 2 does not
    decoded = _two_rounds([[0, 1, 0], [0, 1, 1]], [[1, 1, 0], [1, 0, 1]])
    score = repeat_score(decoded, rows=torch.arange(3), transition=law, group="T=1")
    assert score.events == 2
    # row 0: agrees (1 == 1), expected 0.5; row 1: disagrees, expected p(1 | 1) = 0.8
    assert score.excess == pytest.approx((1 - 0.5) + (0 - 0.8))
    assert score.variance == pytest.approx(0.5 * 0.5 + 0.8 * 0.2)
    assert score.p_value == pytest.approx(gof.normal_sf(score.z))


def test_repeat_score_on_a_deterministic_law_has_nothing_to_test() -> None:
    law = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    decoded = _two_rounds([[0, 1], [0, 1]], [[1, 0], [1, 0]])
    score = repeat_score(decoded, rows=torch.arange(2), transition=law, group="greedy")
    assert score.variance == 0 and score.p_value == 1.0
