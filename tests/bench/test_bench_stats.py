"""Benchmark: wall time of the statistical oracle's default verdict.

Done means the default full-coverage verdict (fixed and legacy, every head kind at
``DEFAULT_CONFIG.rows`` rows each, the temperature mix, every committed position,
the whole family of fits included) takes at most ``VERDICT_BUDGET_S`` on the 2-core
CPU this project is built on. pytest-benchmark measures it; the budget is checked on
the median of the measured rounds.
"""

from __future__ import annotations

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from harness.oracles import stats
from tests.helpers import default_stats_verdict

VERDICT_BUDGET_S = 3.0
ROUNDS = 3


@pytest.mark.bench
def test_bench_stats_default_verdict(benchmark: BenchmarkFixture) -> None:
    benchmark.group = "stats oracle: default verdict"
    benchmark.extra_info["rows"] = stats.DEFAULT_CONFIG.rows
    benchmark.extra_info["heads"] = list(stats.DEFAULT_CONFIG.head_kinds)
    benchmark.extra_info["config"] = stats.DEFAULT_CONFIG.describe()
    results, _ = benchmark.pedantic(default_stats_verdict, rounds=ROUNDS, iterations=1)
    assert stats.expectations_hold(results)
    benchmark.extra_info["p_fixed"] = results["fixed"].p_value
    benchmark.extra_info["p_legacy"] = results["legacy"].p_value
    if benchmark.enabled:
        assert benchmark.stats.stats.median <= VERDICT_BUDGET_S
