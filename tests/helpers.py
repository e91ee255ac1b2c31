"""What many test modules share: where the repository is, how to start a child process,
and the statistical oracle's default verdict."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # most tests need neither; the statistical oracle imports torch
    from harness.oracles.problem import StatsProblem
    from harness.oracles.stats import StatsResult

REPO_ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(*, without: Iterable[str] = (), **overrides: str) -> dict[str, str]:
    """The environment of a child ``python`` that imports this checkout's packages first:
    this process's environment, the repository prepended to ``PYTHONPATH``, the variables
    named in ``without`` removed, then ``overrides`` set."""
    env = {k: v for k, v in os.environ.items() if k not in set(without)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(overrides)
    return env


def default_stats_verdict() -> tuple[dict[str, StatsResult], tuple[StatsProblem, ...]]:
    """Fixed and legacy under the statistical oracle at its default config, and the
    problems they were decoded on (what the oracle tests read and the benchmark times)."""
    from harness.oracles.problem import DEFAULT_CONFIG, build_problems
    from harness.oracles.stats import BUGGY, run_stats
    from harness.plugins.implementations import builtin_implementations

    problems = build_problems(DEFAULT_CONFIG)
    results = {
        impl.name: run_stats(impl, problems=problems)
        for impl in builtin_implementations(("fixed", BUGGY))
    }
    return results, problems
