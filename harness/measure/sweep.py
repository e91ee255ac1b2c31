"""Scaling sweep: the pair's time (default legacy and fixed) over a grid of ``bs``,
``gamma`` and ``V``.

The pair is any two of the built-ins and the ``--impl`` plug-ins (``SweepConfig.pair``,
``SweepConfig.plugins``); in points, CSV and JSON the buggy side's times sit in the
``legacy`` slot and the fixed side's in the ``fixed`` slot, and the config says whose.

Each grid point is timed with the A/B protocol of ``harness.measure.timing`` (walk-only and
whole call, alternating). The cost exponent is the slope of ``log time`` against
``log(bs * gamma * V)`` (``numpy.polyfit``): a walk touches ``bs * V`` logits per step
for ``gamma`` steps, so both samplers should scale with exponent ~1 and differ by a
factor ~2.

Durability: every finished point is appended to ``points.jsonl`` as one JSON line,
written with a single ``write`` on an ``O_APPEND`` descriptor and ``fsync``'d. A sweep
killed midway resumes (the default) from that file: finished points are kept, not
recomputed, and a torn last line (a write cut short) is dropped and truncated away.
At the end ``sweep.csv``, ``sweep.json`` and ``sweep.png`` (time and ratio, drawn by
``harness.render.sweep``; skipped without matplotlib) are written, each replaced
atomically.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from harness.case import make_case
from harness.defaults import DEFAULT_PAIR, FIXED_SIDE, PAIR_SIDES
from harness.io.files import JournalError, write_atomically
from harness.io.fingerprint import code_fingerprint, run_fingerprint
from harness.io.journal import Journal
from harness.measure.timing import CLOCKS, MODES, Pair, ab_timing, times_json
from harness.plugins.implementations import BUILTIN_IMPLEMENTATIONS, select_implementations
from harness.progress import Progress, no_progress

POINT_SCHEMA = "dspark-harness/sweep-point"
POINTS_FILE, CSV_FILE, JSON_FILE, PNG_FILE = "points.jsonl", "sweep.csv", "sweep.json", "sweep.png"
EXPONENT_RANGE = (0.9, 1.1)


class SweepError(ValueError):
    """A points file that cannot be resumed, or a bad grid."""


@dataclass(frozen=True)
class SweepConfig:
    """The grid and the fixed part of every point's shape."""

    bs: tuple[int, ...]
    gamma: tuple[int, ...]
    vocab: tuple[int, ...]
    hidden_size: int
    markov_rank: int
    repeats: int
    warmup: int = 1
    threads: int | None = 1  # intra-op threads; None: torch's default
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    pair: tuple[str, str] = DEFAULT_PAIR  # (buggy, fixed): built-ins or plug-in names
    plugins: tuple[str, ...] = ()  # the --impl specs the pair names

    def __post_init__(self) -> None:
        for name in ("bs", "gamma", "vocab"):
            values = getattr(self, name)
            if not values or any(v < 1 for v in values):
                raise SweepError(f"--{name} needs positive integers, got {values}")
        if self.hidden_size < 1 or self.markov_rank < 1:
            raise SweepError("hidden size and Markov rank must be positive")
        if self.repeats < 1 or self.warmup < 0:
            raise SweepError(f"need repeats >= 1, warmup >= 0; got {self.repeats}, {self.warmup}")
        if self.threads is not None and self.threads < 1:
            raise SweepError(f"threads must be positive, got {self.threads}")
        if len(self.pair) != 2 or self.pair[0] == self.pair[1]:
            raise SweepError(f"the pair needs two different names, got {self.pair}")

    @property
    def default_pair(self) -> bool:
        return tuple(self.pair) == DEFAULT_PAIR and not self.plugins

    def pair_text(self) -> str:
        """``; pair BUGGY,FIXED (specs)``, or nothing for the default pair."""
        if self.default_pair:
            return ""
        return f"; pair {','.join(self.pair)}" + "".join(f" [{p}]" for p in self.plugins)

    @property
    def clock(self) -> str:
        """The clock the exponents are fitted on: process CPU time on the CPU (a shared
        machine's neighbours barely move it), the synchronised wall clock on CUDA."""
        return "wall" if self.device.startswith("cuda") else "cpu"

    def points(self) -> list[tuple[int, int, int]]:
        """``(bs, gamma, V)`` in run order: smallest work first."""
        grid = [(b, g, v) for b in self.bs for g in self.gamma for v in self.vocab]
        return sorted(grid, key=lambda p: (p[0] * p[1] * p[2], p))

    def point_key(self, point: tuple[int, int, int]) -> str:
        """Identifies a point and everything its timing depends on."""
        bs, gamma, vocab = point
        return (
            f"bs={bs},gamma={gamma},V={vocab}|H={self.hidden_size},r={self.markov_rank},"
            f"repeats={self.repeats},warmup={self.warmup},threads={self.threads},seed={self.seed},"
            f"{self.dtype},{self.device}{self.pair_text()}"
        )

    def describe(self) -> str:
        return (
            f"bs {list(self.bs)} x gamma {list(self.gamma)} x V {list(self.vocab)}; "
            f"H={self.hidden_size} r={self.markov_rank} vanilla folded {self.dtype} "
            f"{self.device}, {self.threads or 'default'} thread(s); {self.repeats} alternating "
            f"repetitions after {self.warmup} warm-up; fitted on {self.clock} time"
            f"{self.pair_text()}"
        )


DEFAULT_CONFIG = SweepConfig(
    bs=(8, 16, 32),
    gamma=(2, 4, 8),
    vocab=(8192, 16384, 32768),
    hidden_size=64,
    markov_rank=256,
    repeats=3,
)
QUICK_CONFIG = SweepConfig(
    bs=(1, 2), gamma=(2, 3), vocab=(256, 512), hidden_size=16, markov_rank=16, repeats=1, warmup=1
)


# -- measuring ------------------------------------------------------------------------------
@cache
def _load_pair(pair: tuple[str, str], plugins: tuple[str, ...]) -> Pair:
    """The pair's implementations, each plug-in loaded once per process."""
    builtins = [name for name in pair if name in BUILTIN_IMPLEMENTATIONS]
    by_name = {i.name: i for i in select_implementations(builtins, plugins)}
    missing = [name for name in pair if name not in by_name]
    if missing:
        raise SweepError(f"--pair names neither a built-in nor an --impl: {missing}")
    unused = sorted(set(by_name) - set(pair))
    if unused:
        raise SweepError(f"the sweep times the pair only; --impl {unused} is not in --pair")
    return by_name[pair[0]], by_name[pair[1]]


def sweep_pair(config: SweepConfig) -> Pair:
    """The two implementations the sweep times (``SweepError`` when the pair names one
    that is neither a built-in nor a plug-in, or a plug-in is not in the pair)."""
    return _load_pair(tuple(config.pair), tuple(config.plugins))


def sweep_fingerprint(config: SweepConfig) -> str:
    """The journal fingerprint: the built-in code, and the pair's plug-in files and
    specs when there are any (the default pair's is the built-in code's alone)."""
    if config.default_pair:
        return code_fingerprint()
    plugins = [i for i in sweep_pair(config) if i.name not in BUILTIN_IMPLEMENTATIONS]
    return run_fingerprint(
        implementations={i.name: i.sampler_class for i in plugins},
        options={"pair": list(config.pair), "plugins": {i.name: i.spec for i in plugins}},
    )


def measure_point(config: SweepConfig, point: tuple[int, int, int]) -> dict[str, Any]:
    """Time one grid point (folded sampling, all rows sampled, vanilla head)."""
    bs, gamma, vocab = point
    case = make_case(
        bs=bs,
        gamma=gamma,
        vocab_size=vocab,
        hidden_size=config.hidden_size,
        markov_rank=config.markov_rank,
        seed=config.seed,
        device=config.device,
        dtype=config.dtype,
    )
    started = time.perf_counter()
    timing = ab_timing(
        case,
        repeats=config.repeats,
        warmup=config.warmup,
        threads=config.threads,
        pair=sweep_pair(config),
    )
    record: dict[str, Any] = {
        "schema": POINT_SCHEMA,
        "key": config.point_key(point),
        "bs": bs,
        "gamma": gamma,
        "vocab_size": vocab,
        "work": bs * gamma * vocab,
        "threads": timing.threads,
        "elapsed_s": round(time.perf_counter() - started, 3),
        "finished_at": time.time(),
    }
    for mode, by_clock in timing.times.items():
        record[mode] = times_json(by_clock)
    return record


def run_sweep(
    config: SweepConfig,
    *,
    out_dir: Path,
    resume: bool = True,
    progress: Progress = no_progress,
    measure: Callable[[SweepConfig, tuple[int, int, int]], dict[str, Any]] = measure_point,
) -> list[dict[str, Any]]:
    """Measure every grid point not already in ``out_dir/points.jsonl``; return the
    records of the whole grid in grid order."""
    out_dir.mkdir(parents=True, exist_ok=True)
    points_path = out_dir / POINTS_FILE
    journal = Journal(
        points_path, schema=POINT_SCHEMA, fingerprint=sweep_fingerprint(config), what="point"
    )
    try:  # a point measured by other code is recomputed; without resume, replaced later
        done, notes = journal.finished(resume=resume)
    except JournalError as error:
        raise SweepError(str(error)) from None
    grid = config.points()
    keys = [config.point_key(p) for p in grid]
    already = sum(k in done for k in keys)
    progress(
        f"sweep: {len(grid)} points ({config.describe()}); "
        f"{already} already done in {points_path}" + "".join(f"; {note}" for note in notes)
    )
    for index, (point, key) in enumerate(zip(grid, keys, strict=True), 1):
        if key in done:
            continue
        record = journal.append(measure(config, point))
        done[key] = record
        line = _point_line(record, clock=config.clock, pair=config.pair)
        progress(f"[sweep {index}/{len(grid)}] {line}")
    return [done[k] for k in keys]


def _point_line(record: dict[str, Any], *, clock: str, pair: tuple[str, str]) -> str:
    walk, whole = record["walk_only"][clock], record["whole_call"][clock]
    buggy, fixed = pair
    return (
        f"bs={record['bs']} gamma={record['gamma']} V={record['vocab_size']}: walk-only "
        f"{buggy} {walk['legacy_median_s'] * 1e3:.2f} ms, {fixed} "
        f"{walk['fixed_median_s'] * 1e3:.2f} ms (x{walk['ratio_median']:.2f}); "
        f"whole call x{whole['ratio_median']:.2f} ({clock})"
    )


# -- summary and outputs --------------------------------------------------------------------
def fit_exponent(work: list[int], seconds: list[float]) -> float:
    """Slope of ``log seconds`` against ``log work`` (least squares)."""
    if len(set(work)) < 2:
        return math.nan
    slope, _ = np.polyfit(np.log(work), np.log(seconds), 1)
    return float(slope)


@dataclass(frozen=True)
class SweepSummary:
    """Fitted exponents (clock -> mode -> sampler) and the median ratio over the grid
    (clock -> mode); ``clock`` is the one the expectation is held on."""

    clock: str
    exponents: dict[str, dict[str, dict[str, float]]]
    ratio_median: dict[str, dict[str, float]]
    checked: bool  # whether the exponent expectation applies (the default grid)

    @property
    def fixed_exponent(self) -> float:
        return self.exponents[self.clock]["walk_only"][FIXED_SIDE]

    @property
    def ok(self) -> bool:
        low, high = EXPONENT_RANGE
        return not self.checked or low <= self.fixed_exponent <= high


def summarise(records: list[dict[str, Any]], *, clock: str, checked: bool) -> SweepSummary:
    work = [r["work"] for r in records]
    exponents = {
        c: {
            mode: {
                name: fit_exponent(work, [r[mode][c][f"{name}_median_s"] for r in records])
                for name in PAIR_SIDES
            }
            for mode in MODES
        }
        for c in CLOCKS
    }
    ratio_median = {
        c: {mode: statistics.median(r[mode][c]["ratio_median"] for r in records) for mode in MODES}
        for c in CLOCKS
    }
    return SweepSummary(clock, exponents, ratio_median, checked)


CSV_COLUMNS = (
    "bs",
    "gamma",
    "vocab_size",
    "work",
    *(
        f"{mode}_{clock}_{column}"
        for mode in MODES
        for clock in CLOCKS
        for column in ("legacy_ms", "fixed_ms", "ratio")
    ),
)


def write_outputs(
    *,
    out_dir: Path,
    config: SweepConfig,
    records: list[dict[str, Any]],
    summary: SweepSummary,
    png: bytes | None,
) -> list[Path]:
    """``sweep.csv``, ``sweep.json`` and ``sweep.png`` (``png``: the figure,
    ``harness.render.sweep.sweep_png``; ``None`` without matplotlib), each replaced
    atomically; returns the paths written."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in records:
        row: list[Any] = [r["bs"], r["gamma"], r["vocab_size"], r["work"]]
        for mode in MODES:
            for clock in CLOCKS:
                times = r[mode][clock]
                row += [
                    f"{times['legacy_median_s'] * 1e3:.4f}",
                    f"{times['fixed_median_s'] * 1e3:.4f}",
                    f"{times['ratio_median']:.4f}",
                ]
        writer.writerow(row)
    paths = [out_dir / CSV_FILE, out_dir / JSON_FILE, out_dir / PNG_FILE]
    write_atomically(paths[0], buffer.getvalue().encode())
    document = {
        "config": asdict(config),
        "clock": summary.clock,
        "exponents": summary.exponents,
        "ratio_median": summary.ratio_median,
        "exponent_range": list(EXPONENT_RANGE),
        "exponent_checked": summary.checked,
        "ok": summary.ok,
        "points": records,
    }
    write_atomically(paths[1], (json.dumps(document, indent=2) + "\n").encode())
    if png is None:
        return paths[:2]  # no matplotlib: the figure is skipped (the summary says so)
    write_atomically(paths[2], png)
    return paths
