"""Time the project's own jobs as a user runs them: wall and CPU seconds, the load average,
quiet and under a load of two busy processes. A benchmark, not a test: the numbers go
to the README and docs/performance.md, never into a pass/fail threshold.

    python scripts/time_jobs.py                      # the main job, quiet and loaded
    python scripts/time_jobs.py --jobs main suite    # and the fast suite (pytest -n auto)
    python scripts/time_jobs.py --jobs tox           # the README's two commands on a fresh
                                                     # clone, set-up included, once, quiet
    python scripts/time_jobs.py --repeat 3 --json times.json

Each job runs ``--repeat`` times per condition, alternating quiet and loaded, and the
median is reported beside every run. ``--threads`` is passed through to the harness
(``--threads N``) and to the suite (``OMP_NUM_THREADS``) to compare thread counts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOADERS = 2  # "loaded": another job of two busy processes


@dataclass(frozen=True)
class Timing:
    job: str
    condition: str  # quiet or loaded
    wall_s: float
    cpu_s: float  # user + system of the job's processes
    load_before: float  # 1-minute load average when it started
    returncode: int


def _spin() -> None:
    while True:
        pass


@contextmanager
def load(busy: bool) -> Iterator[None]:
    """Two processes spinning on the CPU for the block (none when not ``busy``)."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(LOADERS * busy)]
    for spinner in spinners:
        spinner.start()
    try:
        time.sleep(0.5 * busy)  # let them take the cores
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.join()


def timed(job: str, condition: str, argv: list[str], *, cwd: Path, env: dict[str, str]) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(job, condition, round(wall, 2), round(cpu, 2), load_before, done.returncode)


def job_command(job: str, *, threads: int | None, out_dir: Path) -> tuple[list[str], Path]:
    """The command line of ``job`` and the folder it runs in."""
    python = sys.executable
    if job == "main":
        argv = [python, "-m", "harness", "--quiet", "--out-dir", str(out_dir)]
        if threads is not None:
            argv += ["--threads", str(threads)]
        return argv, ROOT
    if job == "suite":
        return [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto"], ROOT
    if job in ("tox-report", "tox-tests"):  # the README's two commands, on a fresh clone
        clone = out_dir / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        return [python, "-m", "tox", "run", "-e", job.removeprefix("tox-")], clone
    raise SystemExit(f"unknown job {job!r}; expected main, suite, tox-report or tox-tests")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--jobs",
        nargs="+",
        default=["main"],
        choices=["main", "suite", "tox", "tox-report", "tox-tests"],
        help="tox: tox-report and tox-tests",
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs per job and condition")
    parser.add_argument("--conditions", nargs="+", default=["quiet", "loaded"])
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads to ask for")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    runs: list[Timing] = []
    jobs = [
        j for job in args.jobs for j in (("tox-report", "tox-tests") if job == "tox" else (job,))
    ]
    for job in jobs:
        once = job.startswith("tox-")  # a fresh clone's set-up is the point: once, quiet
        for _ in range(1 if once else args.repeat):
            for condition in ("quiet",) if once else args.conditions:
                out_dir = Path(tempfile.mkdtemp(prefix=f"time-{job}-"))
                try:
                    argv, cwd = job_command(job, threads=args.threads, out_dir=out_dir)
                    with load(condition == "loaded"):
                        runs.append(timed(job, condition, argv, cwd=cwd, env=env))
                finally:
                    shutil.rmtree(out_dir, ignore_errors=True)
                print(
                    f"{job:5} {condition:6} wall {runs[-1].wall_s:7.1f} s  cpu "
                    f"{runs[-1].cpu_s:7.1f} s  load {runs[-1].load_before:4.1f}  "
                    f"exit {runs[-1].returncode}",
                    flush=True,
                )
    for job in jobs:
        for condition in args.conditions:
            mine = [r for r in runs if r.job == job and r.condition == condition]
            if not mine:
                continue
            print(
                f"median {job:5} {condition:6} wall "
                f"{statistics.median(r.wall_s for r in mine):7.1f} s  cpu "
                f"{statistics.median(r.cpu_s for r in mine):7.1f} s  ({len(mine)} runs)"
            )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=1) + "\n")
    return 0 if all(r.returncode == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
