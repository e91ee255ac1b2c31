"""What many test modules share: where the repository is, how to start a child process
(``python -m harness`` among them), the small case, the default report (run once a
session: the ``default_report`` fixture) and the statistical oracle's default verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # most tests need neither; the statistical oracle imports torch
    from harness.case import Case
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


HARNESS_TIMEOUT_S = 300.0  # a small command on a loaded 2-core machine ends well within


def harness_command(*args: str, interpreter_options: Sequence[str] = ()) -> list[str]:
    """``python [OPTIONS] -m harness ARGS`` with this process's interpreter."""
    return [sys.executable, *interpreter_options, "-m", "harness", *args]


def run_harness(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path = REPO_ROOT,
    timeout: float = HARNESS_TIMEOUT_S,
    interpreter_options: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m harness ARGS`` in a child process to its end, its output kept as
    text; ``env`` defaults to ``subprocess_env()``."""
    return subprocess.run(
        harness_command(*args, interpreter_options=interpreter_options),
        cwd=cwd,
        env=subprocess_env() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def start_harness(
    *args: str, env: dict[str, str] | None = None, stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """Start ``python -m harness ARGS``; its stderr (the progress lines) is a text pipe
    the caller reads, to act at a chosen point of the run."""
    return subprocess.Popen(
        harness_command(*args),
        cwd=REPO_ROOT,
        env=subprocess_env() if env is None else env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


# Three rows, the middle one greedy, confidence on: a sampled and a greedy row in one call,
# small enough to run every implementation in a fraction of a second.
SMALL_CASE_FIELDS: dict[str, Any] = {
    "bs": 3,
    "gamma": 4,
    "vocab_size": 48,
    "hidden_size": 8,
    "markov_rank": 4,
    "greedy_rows": (False, True, False),
    "confidence": True,
}


def small_case(*, seed: int, **changes: Any) -> Case:
    """The small case many modules run (``SMALL_CASE_FIELDS``) at ``seed``, with
    ``changes`` to any field ``make_case`` takes."""
    from harness.case import make_case

    return make_case(**{**SMALL_CASE_FIELDS, "seed": seed, **changes})


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
    from harness.defaults import FIXED, LEGACY
    from harness.oracles.problem import DEFAULT_CONFIG, build_problems
    from harness.oracles.stats import run_stats
    from harness.plugins.implementations import builtin_implementations

    problems = build_problems(DEFAULT_CONFIG)
    results = {
        impl.name: run_stats(impl, problems=problems)
        for impl in builtin_implementations((FIXED, LEGACY))
    }
    return results, problems


def judged_records(
    records: Sequence[Any],
    *,
    roles: Any = None,
    require_coverage: bool = False,
    oracle: Any = None,
) -> Any:
    """The judgement of a comparison's records, as ``judge`` forms it (``roles``: the
    default ones unless given; ``oracle``: an ``OracleVerdict`` when the oracle ran)."""
    from harness.judgement import judge_records
    from harness.options import Roles, RunOptions

    options = RunOptions(roles=roles or Roles(), require_observable=require_coverage)
    return judge_records(records, options=options, oracle=oracle)


def assert_fresh_process_passes(probe: str) -> None:
    """Run ``probe`` (Python source) in a fresh interpreter on this checkout; it must exit
    0 (its assertion's message otherwise)."""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def case_file_args(tmp_path: Path, cases: Sequence[Case]) -> list[str]:
    """``--case FILE`` for each of ``cases``, saved under ``tmp_path``."""
    args = []
    for index, case in enumerate(cases):
        path = tmp_path / f"case{index}.json"
        case.save(path)
        args += ["--case", str(path)]
    return args


def lossless_compare_argv(
    tmp_path: Path, cases: Sequence[Case], implementations: dict[str, str]
) -> list[str]:
    """``compare`` on ``cases`` (saved under ``tmp_path``) against the reference alone,
    each ``--impl NAME=SPEC`` of ``implementations`` held to lossless."""
    argv = ["compare", *case_file_args(tmp_path, cases), "--only", "reference"]
    argv += ["--require", "lossless"]
    for name, spec in implementations.items():
        argv += ["--impl", f"{name}={spec}"]
    return argv
