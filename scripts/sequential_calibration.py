"""The sequential stages of the oracle (harness/oracles/sequential.py), measured at the
default config on the shared plumbing (chain verifier). docs/statistics.md quotes it.

``near``: each near-threshold coupling of tests/plugins/shared_stream_defects.py, its
family p-value (stage 0) and what each stage found.

``calibrate --seeds N``: the correct designs of the same module and ``fixed``, each at
seeds ``0 .. N - 1``: how many families were suspicious, how many stages ran, how many
runs were rejected (every rejection of a correct design is a false alarm).

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/sequential_calibration.py near
    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/sequential_calibration.py calibrate \\
        --seeds 200 --jobs 2
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

from harness.oracles import stats
from harness.oracles.problem import DEFAULT_CONFIG
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins.shared_stream_defects import (
    NEAR_THRESHOLD_COUPLINGS,
    SHARED_STREAM_CORRECT,
    TORCH_GENERATOR_CORRECT,
)


def correct_designs() -> list[Implementation]:
    designs = {**SHARED_STREAM_CORRECT, **TORCH_GENERATOR_CORRECT}
    named = [Implementation(n, c, f"scripts:{n}") for n, c in designs.items()]
    return [*builtin_implementations(("fixed",)), *named]


def near() -> None:
    for name, sampler_class in NEAR_THRESHOLD_COUPLINGS.items():
        result = stats.run_stats(Implementation(name, sampler_class, f"scripts:{name}"))
        strongest = min(result.statistics, key=lambda s: s.p_value)
        print(
            f"{name}: family p {result.p_value:.3g} (strongest {stats.where(strongest)}), "
            f"{'REJECTED' if result.rejected else 'passes'}"
        )
        for stage in result.stages:
            print(f"  {stage.describe()}")


def one_seed(seed: int) -> list[tuple[str, float, int, bool]]:
    """``(design, family p, stages run, rejected)`` of every correct design at ``seed``."""
    config = replace(DEFAULT_CONFIG, seed=seed)
    rows = []
    for implementation in correct_designs():
        result = stats.run_stats(implementation, config=config)
        rows.append((implementation.name, result.p_value, len(result.stages), result.rejected))
    return rows


@dataclass(frozen=True)
class Calibration:
    """What the correct designs did over the seeds."""

    seeds: int
    runs: int
    suspicious: int  # family p below the threshold
    stages: int  # stages run
    false_alarms: int  # rejections: every one is false

    def describe(self) -> str:
        return (
            f"{self.runs} runs ({self.seeds} seeds x {self.runs // max(self.seeds, 1)} "
            f"correct designs): {self.suspicious} suspicious, {self.stages} stage(s) run, "
            f"{self.false_alarms} false alarm(s)"
        )


def calibrate(seeds: int, jobs: int, say: Callable[[str], None] = print) -> Calibration:
    """Every correct design at seeds ``0 .. seeds - 1``, ``jobs`` processes; each
    suspicious or rejected run said."""
    runs = suspicious = stages = alarms = 0
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for seed, rows in enumerate(pool.map(one_seed, range(seeds))):
            for name, p_value, staged, rejected in rows:
                runs += 1
                suspicious += p_value < DEFAULT_CONFIG.suspicious
                stages += staged
                alarms += rejected
                if p_value < DEFAULT_CONFIG.suspicious or rejected:
                    said = "REJECTED" if rejected else "passes"
                    say(f"seed {seed} {name}: family p {p_value:.3g}, {staged} stage(s), {said}")
    return Calibration(seeds, runs, suspicious, stages, alarms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("near", "calibrate"))
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    if args.what == "near":
        near()
    else:
        started = time.perf_counter()
        print(
            f"{calibrate(args.seeds, args.jobs).describe()}; {time.perf_counter() - started:.0f} s"
        )


if __name__ == "__main__":
    main()
