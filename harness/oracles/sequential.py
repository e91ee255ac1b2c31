"""The oracle where it is unsure: more rows for the family's strongest test, in stages on
fresh seeds, when the family is suspicious but not decisive (docs/statistics.md,
"Sequential stages").

Stage 0 is the family of tests, Holm-corrected at ``first_stage_alpha``. When its
p-value (``min(1, family size x smallest p)``) is below ``config.suspicious`` and it did
not reject, stage 1 decodes ``config.stage_rows[0]`` rows of the strongest test's target
and head on a fresh seed, and tests that one statistic at the stated alpha; a stage
whose p-value is again below ``suspicious`` and not below alpha is followed by the next,
until one rejects or the stages run out. Under a lossless sampler the family's p-value
falls below ``t = suspicious`` with chance at most ``t`` (Bonferroni), and each stage's
rows are independent of what came before, so stage ``k`` runs with chance at most
``t^k`` and rejects with chance at most ``t^k alpha``: the family-wise error is at most
``alpha_0 + alpha (t + t^2 + ...)``, which ``first_stage_alpha`` holds to ``alpha``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from harness.oracles.fits import head_tables, statistics_of
from harness.oracles.percall import held_decode
from harness.oracles.problem import StatsConfig, StatsProblem, build_problems
from harness.oracles.result import Stage, StatsResult
from harness.pipeline.call_findings import HeldCalls
from reference.decode import DecodeResult
from reference.verifier import Verifier, derived_seeds

STAGE_SALT = 0x5E0_57A6E  # the stages' seeds: apart from every seed the family derives


def stage_spend(config: StatsConfig) -> float:
    """The share of alpha the stages may spend: ``t + t^2 + ...`` over the stages."""
    return sum(config.suspicious**k for k in range(1, len(config.stage_rows) + 1))


def first_stage_alpha(config: StatsConfig) -> float:
    """The level the family is Holm-corrected at, so that the stages keep the family-wise
    error at ``config.alpha`` (module docstring)."""
    return config.alpha * (1.0 - stage_spend(config))


def stage_seeds(config: StatsConfig) -> list[int]:
    """One fresh seed per stage, derived from the run's seed."""
    return derived_seeds(config.seed ^ STAGE_SALT, len(config.stage_rows))


def suspicious(p_value: float, *, config: StatsConfig) -> bool:
    return p_value < config.suspicious


def wants_stages(family: StatsResult, *, config: StatsConfig) -> bool:
    """Whether the family's result calls for a stage: suspicious, not decisive."""
    decided = family.rejected or family.error is not None or family.not_judged is not None
    return (
        bool(family.statistics and config.stage_rows)
        and not decided
        and suspicious(family.p_value, config=config)
    )


StageDecode = Callable[[StatsProblem, str], tuple[DecodeResult, HeldCalls]]


def stage_decoder(sampler_class: type, *, verifier: Verifier) -> StageDecode:
    """A stage's decode of one head: ``held_decode``, as the family's decodes."""

    def decode(problem: StatsProblem, head: str) -> tuple[DecodeResult, HeldCalls]:
        return held_decode(
            sampler_class,
            problem=problem,
            head_kind=head,
            seed=problem.config.seed,
            verifier=verifier,
        )

    return decode


def run_stages(
    family: StatsResult, *, config: StatsConfig, decode: StageDecode
) -> tuple[tuple[Stage, ...], HeldCalls]:
    """The stages ``family`` calls for (none when it decided or is not suspicious), each
    decoded by ``decode(problem, head)``; and their calls."""
    if not wants_stages(family, config=config):
        return (), HeldCalls()
    statistics = family.statistics
    strongest = min(statistics, key=lambda s: s.p_value)
    (spec,) = [t for t in config.targets if t.name == strongest.target]
    stages: list[Stage] = []
    held: list[HeldCalls] = []
    planned = zip(config.stage_rows, stage_seeds(config), strict=True)
    for index, (rows, seed) in enumerate(planned, 1):
        stage_config = replace(
            config,
            rows=rows,
            seed=seed,
            head_kinds=(strongest.head,),
            targets=(replace(spec, rows=None),),
        )
        (problem,) = build_problems(stage_config)
        run, calls = decode(problem, strongest.head)
        held.append(calls)
        tables = head_tables(
            run,
            problem=problem,
            head_kind=strongest.head,
            row_group=problem.row_group,
            marginals=False,
        )
        tests, _ = statistics_of(tables)
        (same,) = [s for s in tests if (s.group, s.test) == (strongest.group, strongest.test)]
        stages.append(
            Stage(
                index=index,
                target=strongest.target,
                head=strongest.head,
                group=strongest.group,
                test=strongest.test,
                rows=rows,
                seed=seed,
                p_value=same.p_value,
                level=config.alpha,
                rejected=same.p_value < config.alpha,
            )
        )
        if stages[-1].rejected or not suspicious(same.p_value, config=config):
            break
    return tuple(stages), HeldCalls.merged(held)
