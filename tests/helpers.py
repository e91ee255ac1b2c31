"""What many test modules share: where the repository is, how to start a child process,
the default report (run once a session: the ``default_report`` fixture) and the
statistical oracle's default verdict."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


@dataclass(frozen=True)
class DefaultReport:
    """``python -m harness --no-work``: the built-ins on the standard matrix and the
    statistical oracle, as the command left them: its exit status, what it printed
    and where it wrote its files."""

    exit_code: int
    stdout: str
    out_dir: Path

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out_dir / "report.json").read_text())
        return data


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
