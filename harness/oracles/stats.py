"""The statistical losslessness oracle (SPEC 3.3): does speculative decoding driven by a
sampler under test still follow the target model's distribution?

This module owns the oracle's configuration and its default; running any
implementation through the reference decode loop (``reference.verifier``)
against the synthetic target (``reference.target_model``); the goodness of fit
of the committed tokens (Pearson chi-square on the joint of the first ``m``
tokens and on every position's marginal, rare cells merged, p-values in
float64); the power curve of the test against ``legacy``; the report section and
the ``stats`` sub-command.

Rows are stratified by their sampling setting (temperature; 0 marks greedy
rows): each stratum has its own exact expected distribution, the chi-square
statistics of the strata add up, and so do their degrees of freedom.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from harness.cli.options import add_impl_option, comma_separated
from harness.pipeline.case import TOP_K_ALL
from harness.plugins.construct import bind_constructor, construct_sampler
from harness.plugins.implementations import (
    Implementation,
    ImplementationError,
    builtin_implementations,
    parse_impl_spec,
)
from harness.render.progress import Progress, no_progress, progress_printer
from harness.render.sections import Section
from reference import HEAD_KINDS, SamplingInfo, ToyDraftModel, make_toy_draft_model
from reference.target_model import MarkovTargetModel, make_markov_target
from reference.verifier import DecodeResult, DraftContext, derived_seeds, speculative_decode

DEFAULT_ALPHA = 1e-6
MIN_EXPECTED_COUNT = 5.0  # Pearson's rule: cells expected below this are merged
TARGET_POWER = 0.99
RULE_OF_THUMB_FACTOR = 10  # "ten times the vocabulary" samples per position
MAX_JOINT_CELLS = 1 << 16  # V**m cells of the enumerated joint
POWER_SEEDS = 8  # decode runs pooled by the report's power curve
POWER_FRACTIONS = (16, 8, 6, 5, 4, 2, 1)  # curve points: run rows / fraction
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class StatsError(ValueError):
    """A statistical-oracle configuration that cannot be run."""


# -- configuration ------------------------------------------------------------------------------
@dataclass(frozen=True)
class StatsConfig:
    """Everything that defines one oracle run. ``temperatures`` are handed to rows in
    turn (row ``i`` gets ``temperatures[i % len]``); a temperature of 0 marks a
    greedy row (``top_k = 1``). ``model_seed`` fixes drafter, target and context;
    ``seed`` fixes the anchors, the sampler's noise and the verifier's draws."""

    rows: int = 20_000
    m: int = 2
    gamma: int = 4
    vocab_size: int = 8
    hidden_size: int = 16
    markov_rank: int = 8
    head_kind: str = "vanilla"
    temperatures: tuple[float, ...] = (1.0,)
    alpha: float = DEFAULT_ALPHA
    seed: int = 0
    model_seed: int = 0
    target_logit_scale: float = 1.0
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperatures", tuple(float(t) for t in self.temperatures))
        self.validate()

    def validate(self) -> None:
        for name in ("rows", "gamma", "vocab_size", "hidden_size", "markov_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise StatsError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.m, int) or self.m < 2:
            raise StatsError(f"m must be an integer >= 2 (the bug starts at token 2), got {self.m}")
        if self.vocab_size**self.m > MAX_JOINT_CELLS:
            raise StatsError(
                f"the joint of m={self.m} tokens over V={self.vocab_size} has "
                f"{self.vocab_size**self.m} cells; at most {MAX_JOINT_CELLS} are enumerated"
            )
        if self.head_kind not in HEAD_KINDS:
            raise StatsError(f"head kind must be one of {HEAD_KINDS}, got {self.head_kind!r}")
        if not self.temperatures:
            raise StatsError("at least one temperature is needed")
        for t in self.temperatures:
            if not math.isfinite(t) or t < 0:
                raise StatsError(f"temperatures must be finite and >= 0 (0: greedy), got {t!r}")
        if not 0 < self.alpha < 1:
            raise StatsError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if not self.target_logit_scale > 0:
            raise StatsError(f"target_logit_scale must be positive, got {self.target_logit_scale}")

    def describe(self) -> str:
        temps = ", ".join("greedy" if t == 0 else f"T={t:g}" for t in self.temperatures)
        return (
            f"{self.rows} rows, joint of the first {self.m} committed tokens, "
            f"{self.head_kind} head, V={self.vocab_size}, gamma={self.gamma}, "
            f"H={self.hidden_size}, r={self.markov_rank}, rows in turn: {temps}, "
            f"alpha={self.alpha:g}, seed={self.seed}, model seed={self.model_seed}"
        )


DEFAULT_CONFIG = StatsConfig()


@dataclass(frozen=True)
class StatsProblem:
    """The fixed part of a run, built once from a config: drafter, target, draft
    context, the rows' sampling parameters, and each stratum's exact joint."""

    config: StatsConfig
    model: ToyDraftModel
    target: MarkovTargetModel
    context: DraftContext
    sampling_info: SamplingInfo
    strata: tuple[float, ...]  # distinct row temperatures, 0 = greedy
    row_stratum: torch.Tensor  # [rows] int64, index into strata
    expected_joint: torch.Tensor  # [S, V**m] float64, each row sums to 1


def build_problem(config: StatsConfig) -> StatsProblem:
    """Drafter, target and context from ``config.model_seed`` (independent streams, all
    drawn on the CPU), the rows' sampling parameters and the exact joints."""
    device = torch.device(config.device)
    drafter_seed, target_seed, context_seed = derived_seeds(config.model_seed, 3)
    model = make_toy_draft_model(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        markov_rank=config.markov_rank,
        head_kind=config.head_kind,
        sample_from_anchor=True,
        seed=drafter_seed,
    ).to(device)
    target = make_markov_target(
        vocab_size=config.vocab_size,
        seed=target_seed,
        logit_scale=config.target_logit_scale,
    ).to(device)
    context = DraftContext(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        gamma=config.gamma,
        sample_from_anchor=True,
        seed=context_seed,
    ).to(device)
    row_temperatures = [
        config.temperatures[i % len(config.temperatures)] for i in range(config.rows)
    ]
    strata = tuple(sorted(set(config.temperatures)))
    sampling_info = SamplingInfo.from_lists(
        temperatures=row_temperatures,
        top_ks=[1 if t == 0 else TOP_K_ALL for t in row_temperatures],
        device=device,
    )
    expected = torch.stack(
        [target.joint_probs(m=config.m, temperature=t, greedy=t == 0) for t in strata]
    )  # [S, V**m]
    return StatsProblem(
        config=config,
        model=model,
        target=target,
        context=context,
        sampling_info=sampling_info,
        strata=strata,
        row_stratum=torch.tensor([strata.index(t) for t in row_temperatures], device=device),
        expected_joint=expected,
    )


@contextmanager
def cpu_threads(count: int, *, device: str) -> Iterator[None]:
    """Run with ``count`` intra-op CPU threads (restored afterwards); no-op off the CPU."""
    if torch.device(device).type != "cpu":
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def decode_rows(sampler_class: type[Any], *, problem: StatsProblem, seed: int) -> DecodeResult:
    """Build the sampler at ``max_bs = rows`` (folded sampling) and run the decode loop.

    Single-threaded on the CPU: every op works on ``[rows, V]`` with a tiny ``V``,
    where a second thread gains little and, on a shared 2-core machine, waiting
    for a busy core made the default verdict 5-10x slower.
    """
    config = problem.config
    with cpu_threads(1, device=config.device):
        sampler = construct_sampler(
            bind_constructor(sampler_class),
            model=problem.model,
            gamma=config.gamma,
            max_bs=config.rows,
            device=torch.device(config.device),
            folded_sampling=True,
            fused_greedy=False,
        )
        return speculative_decode(
            sampler=sampler,
            target=problem.target,
            context=problem.context,
            sampling_info=problem.sampling_info,
            m=config.m,
            seed=seed,
        )


# -- goodness of fit ----------------------------------------------------------------------------
@dataclass(frozen=True)
class GoodnessOfFit:
    """Pearson chi-square of observed against exact expected counts, strata summed."""

    chi2: float
    dof: int
    p_value: float
    tv_distance: float  # pooled over strata
    impossible: int  # observations in cells of target probability 0 (p-value 0 then)


def chi2_sf(chi2: float, dof: int) -> float:
    """Upper tail of the chi-square distribution, float64 (regularised upper gamma)."""
    if dof <= 0:
        return 1.0
    value = torch.special.gammaincc(
        torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(chi2 / 2, dtype=torch.float64)
    )
    return float(value)


def merge_rare_cells(expected: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Group cells so every group expects at least ``MIN_EXPECTED_COUNT``.

    expected ``[C]`` counts. Cells below the threshold go into one group, which then
    takes the next smallest cells until it reaches the threshold (or holds all).
    Returns the group of each cell ``[C]`` int64 and the number of groups.
    """
    cells = expected.numel()
    order = torch.argsort(expected, stable=True)
    ascending = expected[order].tolist()
    merged = sum(1 for e in ascending if e < MIN_EXPECTED_COUNT)
    if merged:
        mass = sum(ascending[:merged])
        while mass < MIN_EXPECTED_COUNT and merged < cells:
            mass += ascending[merged]
            merged += 1
    first_own_group = 1 if merged else 0
    group_in_order = torch.cat(
        [
            torch.zeros(merged, dtype=torch.int64),
            torch.arange(first_own_group, first_own_group + cells - merged),
        ]
    )
    groups = torch.empty(cells, dtype=torch.int64)
    groups[order.cpu()] = group_in_order
    return groups.to(expected.device), first_own_group + cells - merged


def pearson_fit(observed: torch.Tensor, *, expected_probs: torch.Tensor) -> GoodnessOfFit:
    """Goodness of fit of observed counts ``[S, C]`` to expected probabilities ``[S, C]``."""
    observed = observed.to(torch.float64)
    chi2, dof = 0.0, 0
    impossible = int(observed[expected_probs == 0].sum())
    stratum_rows = observed.sum(dim=1)  # [S]
    for s in range(observed.shape[0]):
        n = float(stratum_rows[s])
        if n == 0:
            continue
        expected = n * expected_probs[s]  # [C]
        groups, n_groups = merge_rare_cells(expected)
        observed_g = torch.zeros(n_groups, dtype=torch.float64, device=observed.device)
        expected_g = torch.zeros_like(observed_g)
        observed_g.index_add_(0, groups, observed[s])
        expected_g.index_add_(0, groups, expected)
        chi2 += float(((observed_g - expected_g) ** 2 / expected_g).sum())
        dof += n_groups - 1
    total = float(stratum_rows.sum())
    pooled_expected = (stratum_rows.unsqueeze(1) * expected_probs).sum(0) / total
    tv = 0.5 * float((observed.sum(0) / total - pooled_expected).abs().sum())
    p_value = 0.0 if impossible else chi2_sf(chi2, dof)
    return GoodnessOfFit(chi2=chi2, dof=dof, p_value=p_value, tv_distance=tv, impossible=impossible)


def cell_counts(
    tokens: torch.Tensor, *, row_stratum: torch.Tensor, strata: int, vocab_size: int
) -> torch.Tensor:
    """Counts ``[S, V**k]`` float64 of token tuples ``[n, k]`` (row-major cells) per stratum."""
    cells = vocab_size ** tokens.shape[1]
    weights = vocab_size ** torch.arange(tokens.shape[1] - 1, -1, -1, device=tokens.device)
    cell = (tokens * weights).sum(dim=1)  # [n]
    counts = torch.bincount(row_stratum * cells + cell, minlength=strata * cells)
    return counts.view(strata, cells).to(torch.float64)


def marginal_probs(
    expected_joint: torch.Tensor, *, position: int, m: int, vocab_size: int
) -> torch.Tensor:
    """Marginal ``[S, V]`` of one position from joints ``[S, V**m]``."""
    joint = expected_joint.view(-1, *([vocab_size] * m))
    other = tuple(1 + j for j in range(m) if j != position)
    return joint.sum(dim=other) if other else joint


@dataclass(frozen=True)
class MarginalResult:
    """Goodness of fit of one position's committed token on its own."""

    position: int
    chi2: float
    dof: int
    p_value: float
    tv_distance: float
    rejected: bool


@dataclass(frozen=True)
class StatsResult:
    """The oracle's verdict on one implementation."""

    name: str
    rows: int
    m: int
    alpha: float
    chi2: float
    dof: int
    p_value: float
    tv_distance: float
    mean_accepted_length: float
    marginals: tuple[MarginalResult, ...]
    rejected: bool
    impossible: int = 0
    error: str | None = None  # the implementation raised: no verdict on the distribution
    wall_s: float = field(default=0.0, compare=False)

    @property
    def passed(self) -> bool:
        return self.error is None and not self.rejected

    def marginal(self, position: int) -> MarginalResult:
        return self.marginals[position]

    def to_json_dict(self) -> dict[str, Any]:
        """Everything but the wall time, so a report's JSON is the same on every run."""
        body = asdict(self)
        del body["wall_s"]
        body["marginals"] = [asdict(marginal) for marginal in self.marginals]
        body["passed"] = self.passed
        return body


def fit_committed(
    name: str, *, decoded: DecodeResult, problem: StatsProblem, wall_s: float = 0.0
) -> StatsResult:
    """Goodness of fit of decoded rows: the joint and every position's marginal."""
    config = problem.config

    def counts(tokens: torch.Tensor) -> torch.Tensor:
        return cell_counts(
            tokens,
            row_stratum=problem.row_stratum,
            strata=len(problem.strata),
            vocab_size=config.vocab_size,
        )

    joint = pearson_fit(counts(decoded.committed), expected_probs=problem.expected_joint)
    marginals = []
    for position in range(config.m):
        fit = pearson_fit(
            counts(decoded.committed[:, position : position + 1]),
            expected_probs=marginal_probs(
                problem.expected_joint, position=position, m=config.m, vocab_size=config.vocab_size
            ),
        )
        marginals.append(
            MarginalResult(
                position=position,
                chi2=fit.chi2,
                dof=fit.dof,
                p_value=fit.p_value,
                tv_distance=fit.tv_distance,
                rejected=fit.p_value < config.alpha,
            )
        )
    return StatsResult(
        name=name,
        rows=config.rows,
        m=config.m,
        alpha=config.alpha,
        chi2=joint.chi2,
        dof=joint.dof,
        p_value=joint.p_value,
        tv_distance=joint.tv_distance,
        mean_accepted_length=decoded.mean_accepted_length,
        marginals=tuple(marginals),
        rejected=joint.p_value < config.alpha,
        impossible=joint.impossible,
        wall_s=wall_s,
    )


def run_stats(
    implementation: Implementation,
    *,
    config: StatsConfig = DEFAULT_CONFIG,
    problem: StatsProblem | None = None,
) -> StatsResult:
    """Decode ``config.rows`` rows with the implementation and test the committed tokens.

    An implementation that raises gets a result with ``error`` set, never a crash.
    """
    problem = problem if problem is not None else build_problem(config)
    return decode_and_fit(implementation, problem=problem)[0]


def decode_and_fit(
    implementation: Implementation, *, problem: StatsProblem
) -> tuple[StatsResult, DecodeResult | None]:
    """``run_stats`` that also hands back the decoded rows (``None`` when it raised)."""
    config = problem.config
    started = time.perf_counter()
    try:
        decoded = decode_rows(implementation.sampler_class, problem=problem, seed=config.seed)
    except Exception as error:  # any failure of the code under test is a recorded result
        failed = StatsResult(
            name=implementation.name,
            rows=config.rows,
            m=config.m,
            alpha=config.alpha,
            chi2=math.nan,
            dof=0,
            p_value=math.nan,
            tv_distance=math.nan,
            mean_accepted_length=math.nan,
            marginals=(),
            rejected=False,
            error=f"{type(error).__name__}: {error}",
            wall_s=time.perf_counter() - started,
        )
        return failed, None
    result = fit_committed(
        implementation.name,
        decoded=decoded,
        problem=problem,
        wall_s=time.perf_counter() - started,
    )
    return result, decoded


# -- the verdict on the built-in pair -----------------------------------------------------------
def expectations_hold(results: dict[str, StatsResult]) -> bool:
    """Fixed passes; legacy is rejected on the joint but not on the position-0 marginal."""
    fixed, legacy = results["fixed"], results["legacy"]
    return (
        fixed.passed
        and legacy.error is None
        and legacy.rejected
        and not legacy.marginal(0).rejected
    )


def default_verdict(
    *, config: StatsConfig = DEFAULT_CONFIG
) -> tuple[dict[str, StatsResult], StatsProblem]:
    """Fixed and legacy at the config (the default: what the benchmark times)."""
    problem = build_problem(config)
    results = {
        impl.name: run_stats(impl, config=config, problem=problem)
        for impl in builtin_implementations(("fixed", "legacy"))
    }
    return results, problem


# -- power --------------------------------------------------------------------------------------
def chi2_isf(alpha: float, dof: int) -> float:
    """Critical value: the ``c`` with ``chi2_sf(c, dof) = alpha`` (bisection, float64)."""
    low, high = 0.0, float(dof) + 10.0
    while chi2_sf(high, dof) > alpha:
        high *= 2
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if chi2_sf(middle, dof) > alpha else (low, middle)
        if high - low <= 1e-10 * high:
            break
    return high


def noncentral_chi2_sf(x: float, *, dof: int, noncentrality: float) -> float:
    """Upper tail of the noncentral chi-square: a Poisson(λ/2) mixture of central tails."""
    if noncentrality <= 0:
        return chi2_sf(x, dof)
    half = noncentrality / 2
    terms = int(half + 12 * math.sqrt(half) + 40)
    j = torch.arange(terms, dtype=torch.float64)
    log_weights = -half + j * math.log(half) - torch.lgamma(j + 1)
    tails = torch.special.gammaincc((dof + 2 * j) / 2, torch.full_like(j, x / 2))  # [terms]
    return float((log_weights.exp() * tails).sum().clamp(0.0, 1.0))


@dataclass(frozen=True)
class PowerPoint:
    rows: int
    trials: int  # disjoint blocks of this many rows in the pooled runs
    rejections: int
    empirical_power: float
    predicted_power: float


@dataclass(frozen=True)
class PowerCurve:
    """Rejection rate of an implementation against rows, at ``alpha``.

    Empirical: the pooled rows of several decode runs cut into disjoint blocks
    (rows are independent, so each block is an experiment). Predicted: the
    noncentral chi-square with noncentrality ``rows * D``, where ``D`` is the
    implementation's chi-square distance from the target, estimated from all
    pooled rows and corrected for its sampling noise.
    """

    name: str
    alpha: float
    m: int
    vocab_size: int
    pooled_rows: int
    seeds: tuple[int, ...]
    points: tuple[PowerPoint, ...]
    target_power: float
    rows_for_target_power: int | None  # smallest rows with predicted power >= target
    measured_rows_for_target_power: int | None  # smallest curve point measured >= target
    rule_of_thumb_rows: int  # 10 * V samples per position: one row gives one per position
    power_at_rule_of_thumb: float
    dof_at_rule_of_thumb: int  # what is left of the V**m cells after merging rare ones

    def to_json_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["points"] = [asdict(point) for point in self.points]
        return body


def _stratum_fractions(problem: StatsProblem) -> torch.Tensor:
    counts = torch.bincount(problem.row_stratum.cpu(), minlength=len(problem.strata))
    return counts.to(torch.float64) / counts.sum()  # [S]


def expected_test(
    rows: int, *, observed_probs: torch.Tensor, pooled_rows: torch.Tensor, problem: StatsProblem
) -> tuple[float, int]:
    """Noncentrality and degrees of freedom of the joint test at ``rows``, from the
    estimated cell probabilities ``[S, C]`` of pooled data (``pooled_rows`` ``[S]``)."""
    noncentrality, dof = 0.0, 0
    expected_probs = problem.expected_joint.cpu()
    for s, fraction in enumerate(_stratum_fractions(problem).tolist()):
        n = rows * fraction
        if n == 0:
            continue
        groups, n_groups = merge_rare_cells(n * expected_probs[s])
        estimated = torch.zeros(n_groups, dtype=torch.float64).index_add_(
            0, groups, observed_probs[s]
        )
        exact = torch.zeros_like(estimated).index_add_(0, groups, expected_probs[s])
        distance = float(((estimated - exact) ** 2 / exact).sum())
        # E[distance] under the target alone is (groups - 1) / N: remove that noise
        noise = (n_groups - 1) / float(pooled_rows[s])
        noncentrality += n * max(0.0, distance - noise)
        dof += n_groups - 1
    return noncentrality, dof


def predicted_power(noncentrality: float, *, dof: int, alpha: float) -> float:
    """Power of a chi-square test at ``alpha`` against a noncentral alternative."""
    if dof == 0:
        return 0.0  # nothing left to test once every cell is merged
    return noncentral_chi2_sf(chi2_isf(alpha, dof), dof=dof, noncentrality=noncentrality)


def power_curve(
    name: str,
    *,
    runs: Sequence[DecodeResult],
    seeds: Sequence[int],
    problem: StatsProblem,
    row_counts: Sequence[int],
) -> PowerCurve:
    """The power curve of one implementation from already decoded runs of ``problem``."""
    config = problem.config
    strata, vocab = len(problem.strata), config.vocab_size
    committed = torch.cat([run.committed for run in runs]).cpu()  # [N, m]
    row_stratum = problem.row_stratum.cpu().repeat(len(runs))  # [N]
    expected_probs = problem.expected_joint.cpu()
    points = []
    for rows in row_counts:
        blocks = committed.shape[0] // rows
        rejections = 0
        for b in range(blocks):
            block = slice(b * rows, (b + 1) * rows)
            counts = cell_counts(
                committed[block], row_stratum=row_stratum[block], strata=strata, vocab_size=vocab
            )
            fit = pearson_fit(counts, expected_probs=expected_probs)
            rejections += fit.p_value < config.alpha
        points.append((rows, blocks, rejections))
    pooled = cell_counts(committed, row_stratum=row_stratum, strata=strata, vocab_size=vocab)
    pooled_rows = pooled.sum(dim=1)  # [S]
    observed_probs = pooled / pooled_rows.clamp_min(1).unsqueeze(1)

    def test_at(rows: int) -> tuple[float, int]:
        return expected_test(
            rows, observed_probs=observed_probs, pooled_rows=pooled_rows, problem=problem
        )

    def power(rows: int) -> float:
        noncentrality, dof = test_at(rows)
        return predicted_power(noncentrality, dof=dof, alpha=config.alpha)

    rule_rows = RULE_OF_THUMB_FACTOR * vocab
    return PowerCurve(
        name=name,
        alpha=config.alpha,
        m=config.m,
        vocab_size=vocab,
        pooled_rows=int(committed.shape[0]),
        seeds=tuple(seeds),
        points=tuple(
            PowerPoint(
                rows=rows,
                trials=blocks,
                rejections=rejections,
                empirical_power=rejections / blocks if blocks else math.nan,
                predicted_power=power(rows),
            )
            for rows, blocks, rejections in points
        ),
        target_power=TARGET_POWER,
        rows_for_target_power=smallest_rows_reaching(power, TARGET_POWER),
        measured_rows_for_target_power=next(
            (rows for rows, blocks, hits in points if blocks and hits / blocks >= TARGET_POWER),
            None,
        ),
        rule_of_thumb_rows=rule_rows,
        power_at_rule_of_thumb=power(rule_rows),
        dof_at_rule_of_thumb=test_at(rule_rows)[1],
    )


def smallest_rows_reaching(
    power: Callable[[int], float], target: float, *, limit: int = 1 << 30
) -> int | None:
    """Smallest row count with ``power(rows) >= target`` (doubling, then bisection)."""
    high = 1
    while power(high) < target:
        high *= 2
        if high > limit:
            return None
    low = high // 2  # power(low) < target, or low == 0
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power(middle) >= target else (middle, high)
    return high


def run_power_curve(
    implementation: Implementation,
    *,
    config: StatsConfig = DEFAULT_CONFIG,
    seeds: Sequence[int] | None = None,
    problem: StatsProblem | None = None,
    decoded: dict[int, DecodeResult] | None = None,
    progress: Progress = no_progress,
) -> PowerCurve:
    """Decode ``config.rows`` rows once per seed and draw the power curve.

    Shape: ``len(seeds)`` runs (default ``POWER_SEEDS``, seeds ``config.seed`` on)
    pooled; curve points at ``config.rows / f`` for ``f`` in ``POWER_FRACTIONS``.
    ``decoded`` holds runs already made, by seed, to reuse.
    """
    problem = problem if problem is not None else build_problem(config)
    seeds = list(seeds) if seeds is not None else [config.seed + i for i in range(POWER_SEEDS)]
    runs = []
    for i, seed in enumerate(seeds):
        if decoded is not None and seed in decoded:
            runs.append(decoded[seed])
            continue
        progress(f"  power curve: {implementation.name} seed {seed} ({i + 1}/{len(seeds)})")
        runs.append(decode_rows(implementation.sampler_class, problem=problem, seed=seed))
    cycle = len(config.temperatures)
    row_counts = sorted({max(cycle, config.rows // f // cycle * cycle) for f in POWER_FRACTIONS})
    return power_curve(
        implementation.name, runs=runs, seeds=seeds, problem=problem, row_counts=row_counts
    )


# -- formatting ---------------------------------------------------------------------------------
def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, label_columns: int) -> str:
    """Aligned plain text: the first ``label_columns`` left-aligned, numbers right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i < label_columns else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )


def _p(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"


def results_table(results: Sequence[StatsResult]) -> str:
    m = max((r.m for r in results), default=2)
    header = [
        "impl",
        "verdict",
        "chi2",
        "dof",
        "p (joint)",
        "TV",
        "mean accepted",
        *[f"p (pos {j})" for j in range(m)],
    ]
    rows = []
    for r in results:
        verdict = "ERROR" if r.error else ("REJECTED" if r.rejected else "pass")
        marginals = [_p(mg.p_value) + ("*" if mg.rejected else "") for mg in r.marginals]
        rows.append(
            [
                r.name,
                verdict,
                f"{r.chi2:.1f}",
                str(r.dof),
                _p(r.p_value),
                f"{r.tv_distance:.4f}",
                f"{r.mean_accepted_length:.3f}",
                *(marginals + ["-"] * (m - len(marginals))),
            ]
        )
    table = _table(header, rows, label_columns=2)
    notes = [f"  {r.name}: raised {r.error}" for r in results if r.error]
    notes += [
        f"  {r.name}: {r.impossible} committed tuples the target gives probability 0"
        for r in results
        if r.impossible
    ]
    return "\n".join([table, *notes, "  (* rejected at alpha on that position alone)"])


def power_table(curve: PowerCurve) -> str:
    header = ["rows", "blocks", "rejected", "empirical power", "predicted power"]
    rows = [
        [
            str(p.rows),
            str(p.trials),
            str(p.rejections),
            f"{p.empirical_power:.3f}",
            f"{p.predicted_power:.4f}",
        ]
        for p in curve.points
    ]
    reach = (
        f"{curve.rows_for_target_power} rows"
        if curve.rows_for_target_power is not None
        else "not reached"
    )
    ratio = (
        f" ({curve.rows_for_target_power / curve.rule_of_thumb_rows:.0f}x the rule)"
        if curve.rows_for_target_power is not None
        else ""
    )
    measured = (
        "none"
        if curve.measured_rows_for_target_power is None
        else next(
            f"{p.rows} rows ({p.rejections}/{p.trials} blocks rejected)"
            for p in curve.points
            if p.rows == curve.measured_rows_for_target_power
        )
    )
    return "\n".join(
        [
            f"power of the joint test against {curve.name} at alpha {curve.alpha:g} "
            f"(m={curve.m}; {curve.pooled_rows} pooled rows from seeds "
            f"{', '.join(map(str, curve.seeds))}, cut into disjoint blocks):",
            _table(header, rows, label_columns=0),
            f"smallest rows reaching power {curve.target_power:g} (predicted): {reach}{ratio}",
            f"smallest curve point measured at power >= {curve.target_power:g}: {measured}",
            f"rule of thumb, {RULE_OF_THUMB_FACTOR} x V = {curve.rule_of_thumb_rows} samples "
            f"per position: predicted power {curve.power_at_rule_of_thumb:.2g} "
            f"({curve.vocab_size}^{curve.m} cells merge down to "
            f"{curve.dof_at_rule_of_thumb} degrees of freedom at that size)",
        ]
    )


def _verdict_word(result: StatsResult) -> str:
    if result.error:
        return f"raised ({result.error})"
    return f"{'REJECTED' if result.rejected else 'passes'} (p={_p(result.p_value)})"


def verdict_line(results: dict[str, StatsResult], *, config: StatsConfig) -> str:
    """One line: fixed, legacy on the joint, legacy on position 0 alone."""
    fixed, legacy = results["fixed"], results["legacy"]
    line = (
        f"losslessness at alpha {config.alpha:g} on the joint of {config.m} committed tokens: "
        f"fixed {_verdict_word(fixed)}, legacy {_verdict_word(legacy)}"
    )
    if legacy.marginals:
        position0 = legacy.marginal(0)
        seen = "also REJECTED" if position0.rejected else "passes, as the bug predicts"
        line += f"; legacy on position 0 alone {seen} (p={_p(position0.p_value)})"
    return line


# -- running the oracle ---------------------------------------------------------------------------
@dataclass
class OracleRun:
    """Fixed, legacy and any extra implementation at one config, and the power curve."""

    config: StatsConfig
    results: dict[str, StatsResult]
    curve: PowerCurve | None


def run_oracle(
    config: StatsConfig,
    *,
    extras: Sequence[Implementation] = (),
    power: bool,
    progress: Progress = no_progress,
) -> OracleRun:
    """Decode and fit fixed, legacy and ``extras``; with ``power``, also legacy's power
    curve (the legacy run at ``config.seed`` is reused as one of its pooled runs)."""
    problem = build_problem(config)
    results: dict[str, StatsResult] = {}
    decoded: dict[int, DecodeResult] = {}
    for impl in [*builtin_implementations(("fixed", "legacy")), *extras]:
        progress(f"stats: {impl.name} ({config.rows} rows) ...")
        results[impl.name], run = decode_and_fit(impl, problem=problem)
        if impl.name == "legacy" and run is not None:
            decoded[config.seed] = run
    curve = None
    if power and not results["legacy"].error:
        curve = run_power_curve(
            builtin_implementations(("legacy",))[0],
            config=config,
            problem=problem,
            decoded=decoded,
            progress=progress,
        )
    return OracleRun(config=config, results=results, curve=curve)


def _oracle_text(oracle: OracleRun) -> list[str]:
    text = [oracle.config.describe(), "", results_table(list(oracle.results.values()))]
    if oracle.curve is not None:
        text += ["", power_table(oracle.curve)]
    return text


def _oracle_json(oracle: OracleRun) -> dict[str, Any]:
    return {
        "config": asdict(oracle.config),
        "results": {name: r.to_json_dict() for name, r in oracle.results.items()},
        "power_curve": oracle.curve.to_json_dict() if oracle.curve is not None else None,
    }


# -- report section -----------------------------------------------------------------------------
def report_section(*, seed: int, progress: Progress = no_progress, device: str = "cpu") -> Section:
    """The statistical part of the main report: fixed and legacy at the default config,
    plus the power curve of legacy (``POWER_SEEDS`` runs pooled)."""
    config = replace(DEFAULT_CONFIG, seed=seed, device=device)
    oracle = run_oracle(config, power=True, progress=progress)
    ok = expectations_hold(oracle.results)
    return Section(
        title="Statistical losslessness (SPEC 3.3)",
        ok=ok,
        verdict=verdict_line(oracle.results, config=config),
        text="\n".join(_oracle_text(oracle)),
        data=_json_safe({**_oracle_json(oracle), "ok": ok}),
    )


def _json_safe(value: Any) -> Any:
    """NaN and infinities become ``None`` so the JSON is standard."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


# -- command line -------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness stats`` (``--seed``, ``--device``, ``--json`` are global)."""
    default = DEFAULT_CONFIG
    add_impl_option(parser, verb="also test")
    parser.add_argument("--rows", type=int, default=default.rows, help="independent rows")
    parser.add_argument(
        "--m", type=int, default=default.m, help="committed tokens per row in the joint (>= 2)"
    )
    parser.add_argument(
        "--alpha", type=float, default=default.alpha, help="significance level (default 1e-6)"
    )
    parser.add_argument(
        "--temperatures",
        type=comma_separated(float, what="temperatures"),
        default=default.temperatures,
        metavar="T[,T...]",
        help="rows take these in turn; 0 marks greedy rows (default 1.0)",
    )
    parser.add_argument(
        "--head", choices=HEAD_KINDS, default=default.head_kind, help="Markov head kind"
    )
    parser.add_argument("--gamma", type=int, default=default.gamma, help="draft tokens per round")
    parser.add_argument("--vocab", type=int, default=default.vocab_size, help="vocabulary size V")
    parser.add_argument(
        "--model-seed",
        type=int,
        default=default.model_seed,
        help="seed of drafter, target and context (default 0)",
    )
    parser.add_argument(
        "--power", action="store_true", help="also draw the power curve of the test vs legacy"
    )


def command(args: argparse.Namespace) -> int:
    """``python -m harness stats``: exit 0 when fixed passes, legacy is rejected (and
    not on position 0) and no ``--impl`` is rejected; 1 otherwise; 2 on bad usage."""
    progress = progress_printer(quiet=bool(getattr(args, "quiet", False)))

    try:
        extras = [parse_impl_spec(spec) for spec in args.impl]
        names = [impl.name for impl in extras]
        if len(set(names)) != len(names):
            raise ImplementationError(f"--impl names must differ, got {names}")
        config = StatsConfig(
            rows=args.rows,
            m=args.m,
            gamma=args.gamma,
            vocab_size=args.vocab,
            head_kind=args.head,
            temperatures=args.temperatures,
            alpha=args.alpha,
            seed=getattr(args, "seed", 0),
            model_seed=args.model_seed,
            device=getattr(args, "device", "cpu"),
        )
    except (ImplementationError, StatsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    oracle = run_oracle(config, extras=extras, power=args.power, progress=progress)
    results = oracle.results
    builtin_ok = expectations_hold(results)
    extras_ok = all(results[impl.name].passed for impl in extras)
    ok = builtin_ok and extras_ok
    if getattr(args, "json", False):
        body: dict[str, Any] = {
            **_oracle_json(oracle),
            "expectations_hold": builtin_ok,
            "extra_implementations_pass": extras_ok,
            "ok": ok,
        }
        print(json.dumps(_json_safe(body), indent=2))
    else:
        lines = [
            f"VERDICT: {'PASS' if ok else 'FAIL'}",
            f"  [{'ok' if builtin_ok else 'FAIL'}] fixed passes, legacy is rejected on the "
            "joint and not on position 0",
        ]
        lines += [
            f"  [{'ok' if results[impl.name].passed else 'FAIL'}] {impl.name} ({impl.spec}): "
            + (
                f"raised {results[impl.name].error}"
                if results[impl.name].error
                else ("rejected" if results[impl.name].rejected else "follows the target")
                + f" (p={_p(results[impl.name].p_value)})"
            )
            for impl in extras
        ]
        lines += ["", *_oracle_text(oracle)]
        print("\n".join(lines))
    return EXIT_OK if ok else EXIT_FAIL


# -- figure -------------------------------------------------------------------------------------
def power_curve_png(curve: dict[str, Any]) -> bytes:
    """The power curve (``PowerCurve.to_json_dict()``) as a PNG: rows vs rejection rate of
    legacy at alpha, measured and predicted, with the target power and the 10 x V rule."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    points = curve["points"]
    rows = [p["rows"] for p in points]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    axes.semilogx(rows, [p["empirical_power"] for p in points], "o", label="measured (blocks)")
    axes.semilogx(rows, [p["predicted_power"] for p in points], "-", label="predicted")
    axes.axhline(curve["target_power"], color="grey", linestyle=":", label="target power")
    rule = curve["rule_of_thumb_rows"]
    axes.axvline(rule, color="tab:red", linestyle="--", label=f"10 x V = {rule} rows")
    if curve.get("rows_for_target_power"):
        axes.axvline(
            curve["rows_for_target_power"],
            color="tab:green",
            linestyle="--",
            label=f"power {curve['target_power']:g} at {curve['rows_for_target_power']} rows",
        )
    axes.set(
        xlabel="independent rows (committed sequences)",
        ylabel=f"rejection rate of legacy at alpha={curve['alpha']:g}",
        ylim=(-0.02, 1.02),
        title=f"power of the joint test of the first {curve['m']} committed tokens "
        f"(V={curve['vocab_size']})",
    )
    axes.legend(fontsize=7, loc="center right")
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=110)
    plt.close(figure)
    return out.getvalue()
