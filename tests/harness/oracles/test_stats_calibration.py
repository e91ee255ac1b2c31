"""Calibration of the statistical oracle (slow): under a lossless sampler it rejects at
its stated level, no more.

Over ``CALIBRATION_SEEDS`` seeds (each with its own drafters, target and context) at
alpha 0.01, the rejection rate of fixed and of each correct design of another
kind lies within the binomial 99% interval of 0.01: for the whole family, and for
the family cut down to one head kind or one temperature group (Holm within it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from scipy import stats as scipy_stats

from fixed import DsparkDraftSampler as FixedSampler
from harness.oracles import stats
from harness.oracles.fits import Statistic
from harness.oracles.gof import holm_rejections
from harness.oracles.problem import DEFAULT_CONFIG, build_problems, group_label
from harness.plugins.implementations import Implementation
from tests.plugins.alternative_samplers import (
    MultinomialSampler,
    PrestagedNoiseSampler,
    UniformGumbelSampler,
)

CALIBRATION_ALPHA = 0.01
CALIBRATION_SEEDS = 200
CALIBRATION_ROWS = 2_000  # per head; the asymptotics hold well before the default's rows
DESIGNS = {
    "fixed": FixedSampler,
    "prestaged-noise": PrestagedNoiseSampler,
    "uniform-gumbel": UniformGumbelSampler,
    "multinomial": MultinomialSampler,
}
CONFIG = replace(DEFAULT_CONFIG, rows=CALIBRATION_ROWS, alpha=CALIBRATION_ALPHA)
# name -> (field, value) a member test has; None: the whole family
SUBFAMILIES: dict[str, tuple[str, str] | None] = {
    "family": None,
    **{f"target {t.name}": ("target", t.name) for t in CONFIG.targets},
    **{f"head {h}": ("head", h) for h in CONFIG.head_kinds},
    **{f"group {group_label(t)}": ("group", group_label(t)) for t in CONFIG.groups},
}


def member(statistic: Statistic, subfamily: tuple[str, str] | None) -> bool:
    return subfamily is None or getattr(statistic, subfamily[0]) == subfamily[1]


def rejection_counts(
    implementations: list[Implementation], *, seeds: int
) -> dict[str, Counter[str]]:
    """Rejections at ``CALIBRATION_ALPHA`` per implementation and subfamily over seeds."""
    counts: dict[str, Counter[str]] = {impl.name: Counter() for impl in implementations}
    for seed in range(seeds):
        problems = build_problems(replace(CONFIG, seed=seed, model_seed=seed))
        for impl in implementations:
            result = stats.run_stats(impl, problems=problems)
            assert result.error is None
            for name, subfamily in SUBFAMILIES.items():
                p_values = [s.p_value for s in result.statistics if member(s, subfamily)]
                counts[impl.name][name] += any(holm_rejections(p_values, alpha=CALIBRATION_ALPHA))
    return counts


@pytest.mark.slow
def test_lossless_designs_are_rejected_at_the_stated_rate() -> None:
    implementations = [Implementation(n, c, f"test:{n}") for n, c in DESIGNS.items()]
    counts = rejection_counts(implementations, seeds=CALIBRATION_SEEDS)
    low, high = scipy_stats.binom.interval(0.99, CALIBRATION_SEEDS, CALIBRATION_ALPHA)
    outside = {
        (impl, name): count
        for impl, by_name in counts.items()
        for name in SUBFAMILIES
        if not low <= (count := by_name[name]) <= high
    }
    assert not outside, f"rejections outside [{low:g}, {high:g}] of {CALIBRATION_SEEDS}: {outside}"
