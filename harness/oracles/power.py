"""How often the oracle rejects an implementation, against rows: the power curve.

This module owns the power math: per test, the noncentral chi-square (or the
shifted normal, for the repeat test) with the noncentrality estimated from pooled
decode runs and corrected for their own sampling noise; the predicted power of
one head kind (its strongest test at the family's first Holm threshold, at the
noncentrality estimated from the pooled runs: a prediction, which measured blocks can
fall below); the measured power (the pooled rows cut into disjoint blocks, each block
one experiment, the head's tests run on every block) with a Wilson 95% interval per
point; the smallest row count reaching a target power, predicted and measured; and the
detection bound of a run (``detection_bounds``): the smallest fraction of the rows
at one committed position a defect must reach, committing a fixed token there, to
be seen with the target power by that position's test at the rows the run had.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from harness.devices import intra_op_threads
from harness.oracles.decode import cpu_threads, decode_rows
from harness.oracles.defaults import GREEDY, ParameterSet
from harness.oracles.fits import CountTable, HeadTables, head_tables, position_name
from harness.oracles.gof import (
    chi2_distances,
    chi2_isf,
    group_sums,
    merged_groups,
    noncentral_chi2_sf,
    normal_isf,
    normal_sf,
    pearson_fit,
)
from harness.oracles.problem import StatsProblem, group_label
from harness.plugins.implementations import Implementation
from harness.progress import Progress, no_progress
from reference.decode import DecodeResult

TARGET_POWER = 0.99
RULE_OF_THUMB_FACTOR = 10  # "ten times the vocabulary" samples per position
POWER_SEEDS = 3  # decode runs pooled per head kind
POWER_MULTIPLES = (1 / 8, 1 / 4, 1 / 2, 1)  # curve points: run rows x multiple
INTERVAL_CONFIDENCE = 0.95  # of each measured point's Wilson interval


def select_rows(decoded: DecodeResult, rows: slice) -> DecodeResult:
    """The decode record of a block of rows only."""
    return DecodeResult(
        committed=decoded.committed[rows],
        accepted_lengths=decoded.accepted_lengths,
        rounds=decoded.rounds,
        round_anchors=decoded.round_anchors[:, rows],
        round_blocks=decoded.round_blocks[:, rows],
        round_slots=decoded.round_slots[:, rows],
        shared_noise=decoded.shared_noise,
        server=decoded.server,
    )


def pool_runs(runs: Sequence[DecodeResult]) -> DecodeResult:
    """Runs of the same problem side by side, as one run of all their rows."""
    rounds = min(run.rounds for run in runs)
    return DecodeResult(
        committed=torch.cat([run.committed for run in runs]),
        accepted_lengths=torch.cat([run.accepted_lengths for run in runs]),
        rounds=rounds,
        round_anchors=torch.cat([run.round_anchors[:rounds] for run in runs], dim=1),
        round_blocks=torch.cat([run.round_blocks[:rounds] for run in runs], dim=1),
        round_slots=torch.cat([run.round_slots[:rounds] for run in runs], dim=1),
        shared_noise=all(run.shared_noise for run in runs),
        server=runs[0].server,
    )


def chi2_power_at(table: CountTable, *, scale: float, level: float) -> float:
    """Predicted power of one chi-square test at ``scale`` times the pooled rows."""
    noncentrality, dof = measured_noncentrality(table, scale=scale)
    if dof == 0:
        return 0.0  # nothing left to test once every cell is merged
    return noncentral_chi2_sf(chi2_isf(level, dof), dof=dof, noncentrality=noncentrality)


def measured_noncentrality(table: CountTable, *, scale: float) -> tuple[float, int]:
    """``(noncentrality, dof)`` of one chi-square test at ``scale`` times the pooled rows.

    Per stratum: cells merged as the test would merge them at that size; the
    estimated chi-square distance from the law, minus what sampling noise alone
    gives it (``(groups - 1) / N``), times the stratum's expected count.
    """
    observed, probs, pooled = counted_strata(table)
    n = scale * pooled  # [S]
    groups, n_groups = merged_groups(n[:, None] * probs)
    distance = chi2_distances(
        group_sums(groups, observed / pooled[:, None]),
        group_sums(groups, probs),
        n_groups=n_groups,
    )
    noncentrality = float((n * np.maximum(0.0, distance - (n_groups - 1) / pooled)).sum())
    return noncentrality, int((n_groups - 1).sum())


def counted_strata(table: CountTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The strata of ``table`` with observations: counts and exact probabilities ``[S, C]``
    float64, and each stratum's count ``[S]``."""
    observed = table.observed.to(torch.float64).numpy()
    counted = np.nonzero(observed.sum(axis=1))[0]
    observed = observed[counted]
    probs = table.expected_probs.to(torch.float64).numpy()[counted]
    return observed, probs, observed.sum(axis=1)


def head_power_at(tables: HeadTables, *, scale: float, level: float) -> float:
    """Predicted power of one head kind's tests: the strongest one's at its estimated
    noncentrality. The other tests could only add to the head's power, but the estimate
    has its own error, so this is a prediction, not a bound."""
    powers = [chi2_power_at(t, scale=scale, level=level) for t in tables.chi2_tables]
    critical = normal_isf(level)
    powers += [
        normal_sf(critical - max(0.0, r.z) * math.sqrt(scale))
        for r in tables.repeats
        if r.variance > 1e-12
    ]
    return max(powers, default=0.0)


def coupling_fraction(table: CountTable, *, level: float, power: float) -> float | None:
    """The smallest fraction of this test's rows a defect must reach to be seen with
    probability ``power`` at ``level``, when on every row it moves the law as ``table``
    measured it (a run with the defect on every row): rows mixed in at fraction ``f``
    move each cell by ``f`` times as much, the noncentrality by ``f**2``. ``None``: the
    measured move is within sampling noise, or not even all rows suffice."""
    noncentrality, dof = measured_noncentrality(table, scale=1.0)
    if dof == 0 or noncentrality <= 0:
        return None
    fraction = math.sqrt(noncentrality_for_power(dof=dof, level=level, power=power) / noncentrality)
    return fraction if fraction <= 1 else None


@functools.lru_cache(maxsize=1024)
def noncentrality_for_power(*, dof: int, level: float, power: float) -> float:
    """The smallest noncentrality at which a chi-square test of ``dof`` degrees of
    freedom at ``level`` rejects with probability ``power`` (doubling, then bisection)."""
    critical = chi2_isf(level, dof)

    def reached(noncentrality: float) -> bool:
        return noncentral_chi2_sf(critical, dof=dof, noncentrality=noncentrality) >= power

    high = 1.0
    while not reached(high):
        high *= 2
    low = 0.0
    while high - low > 1e-3 * high:
        middle = 0.5 * (low + high)
        low, high = (low, middle) if reached(middle) else (middle, high)
    return high


def fixed_token_noncentrality(table: CountTable) -> tuple[float, int]:
    """``(K, dof)`` of one transition test at the rows it had: a defect that makes a
    fraction ``f`` of the rows from each previous token commit one fixed token (the most
    likely one, the hardest fixed token to see) gives the test noncentrality ``f**2 K``
    (cells merged as the test merges them)."""
    _, probs, n = counted_strata(table)
    groups, n_groups = merged_groups(n[:, None] * probs)
    one_hot = np.eye(probs.shape[1])[np.argmax(probs, axis=1)]  # [S, C]
    distance = chi2_distances(
        group_sums(groups, one_hot), group_sums(groups, probs), n_groups=n_groups
    )
    return float((n * distance).sum()), int((n_groups - 1).sum())


def detection_fraction(table: CountTable, *, level: float, power: float) -> float | None:
    """The smallest fraction of this test's rows a fixed-token defect must reach to be
    seen with probability ``power`` at ``level``; ``None``: not even all of them."""
    strength, dof = fixed_token_noncentrality(table)
    if dof == 0 or strength <= 0:
        return None
    fraction = math.sqrt(noncentrality_for_power(dof=dof, level=level, power=power) / strength)
    return fraction if fraction <= 1 else None


@dataclass(frozen=True)
class DetectionBound:
    """At one target and committed position: the fraction of the rows there that a
    defect committing a fixed token (the hardest one to see) must reach to be seen with
    probability ``power`` by that position's tests. ``fraction``: a defect in every head
    kind and sampled group (their strongest test, at ``head``/``group``);
    ``confined_fraction``: in only one of them, whichever (their weakest test).
    ``None``: not even if every row were wrong."""

    target: str
    position: int
    fraction: float | None
    confined_fraction: float | None
    power: float
    level: float
    head: str
    group: str
    rows: int  # rows at this position, over every head kind and sampled group

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


def detection_bounds(
    tables: Sequence[HeadTables], *, gamma: int, level: float, power: float = TARGET_POWER
) -> tuple[DetectionBound, ...]:
    """Per target and committed position ``0..gamma``, the detection bound of a run's
    count tables (every head kind's, every sampled group's: greedy rows cannot fail)."""
    bounds = []
    greedy = group_label(ParameterSet(GREEDY, top_k=1))
    for target in dict.fromkeys(t.target for t in tables):
        for position in range(gamma + 1):
            found = [
                (detection_fraction(table, level=level, power=power), head.head, table)
                for head in tables
                if head.target == target
                for table in head.chi2_tables
                if table.test == position_name(position) and table.group != greedy
            ]
            if not found:
                continue
            fractions = [f[0] for f in found if f[0] is not None]
            best = min(found, key=lambda f: math.inf if f[0] is None else f[0])
            bounds.append(
                DetectionBound(
                    target=target,
                    position=position,
                    fraction=best[0],
                    confined_fraction=max(fractions) if len(fractions) == len(found) else None,
                    power=power,
                    level=level,
                    head=best[1],
                    group=best[2].group,
                    rows=sum(int(f[2].observed.sum()) for f in found),
                )
            )
    return tuple(bounds)


def rejects_somewhere(tables: HeadTables, *, level: float) -> bool:
    """Whether any of the head's tests falls below ``level`` (stops at the first)."""
    if any(r.p_value < level for r in tables.repeats):
        return True
    return any(
        pearson_fit(t.observed, expected_probs=t.expected_probs).p_value < level
        for t in tables.chi2_tables
    )


def smallest_rows_reaching(
    power: Callable[[int], float], target: float, *, limit: int = 1 << 24
) -> int | None:
    """Smallest row count with ``power(rows) >= target`` (doubling, then bisection)."""
    high = 16
    while power(high) < target:
        high *= 2
        if high > limit:
            return None
    low = high // 2
    while high - low > max(1, high // 64):  # 1.6% resolution is plenty
        middle = (low + high) // 2
        low, high = (low, middle) if power(middle) >= target else (middle, high)
    return high


def wilson_interval(
    successes: int, trials: int, *, confidence: float = INTERVAL_CONFIDENCE
) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; ``(nan, nan)`` without trials.
    ``scipy.stats.binomtest(...).proportion_ci(method="wilson")`` gives the same (a test
    holds it), but importing ``scipy.stats`` costs about a second a report."""
    if trials <= 0:
        return math.nan, math.nan
    z = normal_isf((1 - confidence) / 2)
    share, spread = successes / trials, z * z / trials
    centre = (share + spread / 2) / (1 + spread)
    half = z * math.sqrt(share * (1 - share) / trials + spread / (4 * trials)) / (1 + spread)
    # at 0 or all successes the bound is the share itself; rounding must not cross it
    return max(0.0, min(share, centre - half)), min(1.0, max(share, centre + half))


@dataclass(frozen=True)
class PowerPoint:
    """One row count of a curve: measured on disjoint blocks (with the Wilson interval of
    ``INTERVAL_CONFIDENCE``), and predicted."""

    rows: int
    trials: int  # disjoint blocks of this many rows in the pooled runs
    rejections: int
    empirical_power: float
    interval_low: float
    interval_high: float
    predicted_power: float


@dataclass(frozen=True)
class PowerCurve:
    """One head kind's rejection rate of an implementation against rows, at ``level``
    (the first Holm threshold of the default family: its alpha over its size)."""

    name: str
    head: str
    target: str  # the target decoded against
    rounds: int  # draft-verify rounds per row
    alpha: float
    level: float
    interval_confidence: float  # of each point's interval
    pooled_rows: int
    seeds: tuple[int, ...]
    points: tuple[PowerPoint, ...]
    target_power: float
    rows_for_target_power: int | None  # predicted
    measured_rows_for_target_power: int | None  # smallest curve point measured at target
    rule_of_thumb_rows: int  # "ten times the vocabulary" samples per position
    power_at_rule_of_thumb: float

    def to_json_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["points"] = [asdict(point) for point in self.points]
        return body


def power_curve(
    name: str,
    *,
    head_kind: str,
    runs: Sequence[DecodeResult],
    seeds: Sequence[int],
    problem: StatsProblem,
    level: float,
) -> PowerCurve:
    """The power curve of one implementation on one head kind from decoded runs."""
    config = problem.config
    pooled = pool_runs(runs)
    pooled_rows = int(pooled.committed.shape[0])
    row_group = problem.row_group.cpu().repeat(len(runs))  # [pooled rows]
    tables = head_tables(pooled, problem=problem, head_kind=head_kind, row_group=row_group)
    cycle = len(config.row_sets)  # blocks of whole cycles keep the groups balanced

    def predicted(rows: int) -> float:
        return head_power_at(tables, scale=rows / pooled_rows, level=level)

    points = []
    for multiple in POWER_MULTIPLES:
        rows = max(cycle, int(config.rows * multiple) // cycle * cycle)
        blocks = pooled_rows // rows
        rejections = 0
        for b in range(blocks):
            block = slice(b * rows, (b + 1) * rows)
            block_tables = head_tables(
                select_rows(pooled, block),
                problem=problem,
                head_kind=head_kind,
                row_group=row_group[block],
                marginals=False,
            )
            rejections += rejects_somewhere(block_tables, level=level)
        low, high = wilson_interval(rejections, blocks)
        points.append(
            PowerPoint(
                rows=rows,
                trials=blocks,
                rejections=rejections,
                empirical_power=rejections / blocks if blocks else math.nan,
                interval_low=low,
                interval_high=high,
                predicted_power=predicted(rows),
            )
        )
    return PowerCurve(
        name=name,
        head=head_kind,
        target=problem.target.name,
        rounds=config.rounds,
        alpha=config.alpha,
        level=level,
        interval_confidence=INTERVAL_CONFIDENCE,
        pooled_rows=pooled_rows,
        seeds=tuple(seeds),
        points=tuple(points),
        target_power=TARGET_POWER,
        rows_for_target_power=smallest_rows_reaching(predicted, TARGET_POWER),
        measured_rows_for_target_power=next(
            (p.rows for p in points if p.trials and p.empirical_power >= TARGET_POWER), None
        ),
        rule_of_thumb_rows=RULE_OF_THUMB_FACTOR * config.vocab_size,
        power_at_rule_of_thumb=predicted(RULE_OF_THUMB_FACTOR * config.vocab_size),
    )


def run_power_curves(
    implementation: Implementation,
    *,
    problem: StatsProblem,
    level: float,
    decoded: dict[str, DecodeResult] | None = None,
    seeds: Sequence[int] | None = None,
    progress: Progress = no_progress,
) -> list[PowerCurve]:
    """One power curve per head kind at ``problem``'s target, each test at ``level`` (the
    whole family's first Holm threshold): ``POWER_SEEDS`` runs of ``config.rows`` rows
    (seeds ``config.seed`` on) pooled; ``decoded`` is the run at ``config.seed``, reused
    when given."""
    config = problem.config
    seeds = list(seeds) if seeds is not None else [config.seed + i for i in range(POWER_SEEDS)]
    curves = []
    for head_kind in config.head_kinds:
        runs = []
        for i, seed in enumerate(seeds):
            if decoded is not None and seed == config.seed and head_kind in decoded:
                runs.append(decoded[head_kind])
                continue
            progress(
                f"  power curve: {implementation.name} {head_kind} "
                f"seed {seed} ({i + 1}/{len(seeds)})"
            )
            runs.append(
                decode_rows(
                    implementation.sampler_class, problem=problem, head_kind=head_kind, seed=seed
                )
            )
        with intra_op_threads(cpu_threads(config.device)):
            curves.append(
                power_curve(
                    implementation.name,
                    head_kind=head_kind,
                    runs=runs,
                    seeds=seeds,
                    problem=problem,
                    level=level,
                )
            )
    return curves
