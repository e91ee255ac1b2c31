"""How the statistical oracle's results read: tables, verdict lines, the report section
and the power figure. Formatting only; every number comes from ``harness.oracles``."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from harness.oracles.fits import JOINT, REPEAT, family_size, position_name
from harness.oracles.power import TARGET_POWER, PowerCurve, run_power_curves
from harness.oracles.problem import DEFAULT_CONFIG, StatsConfig, group_label, life_batches
from harness.oracles.stats import (
    BUGGY,
    DEFAULT_ROLES,
    OracleRun,
    StatsResult,
    best_bounds,
    expectations_hold,
    expected_rejected,
    meets_expectation,
    run_oracle,
    where,
)
from harness.pipeline.coverage import StatisticalCoverage
from harness.pipeline.verdicts import MAX_CARRIERS, Roles, Statistical
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.progress import Progress, no_progress
from harness.render.figures import render_png
from harness.render.sections import Section
from harness.render.tables import Alignment, TableFormat, table
from reference.verifier import CHAIN_VERIFIER, Verifier

TITLE = "Statistical losslessness (docs/statistics.md)"


def p_text(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"


def carriers(result: StatsResult) -> str:
    """Which head, group and test carried the rejection, strongest first."""
    rejections = sorted(result.rejections(), key=lambda s: s.p_value)
    named = ", ".join(f"{where(s)} (p={p_text(s.p_value)})" for s in rejections[:MAX_CARRIERS])
    more = len(rejections) - MAX_CARRIERS
    return named + (f" and {more} more" if more > 0 else "")


def verdict_word(result: StatsResult) -> str:
    if result.not_judged:
        return f"not judged ({result.not_judged})"
    if result.error:
        return f"raised ({result.error})"
    if not result.rejected:
        return f"passes (p={p_text(result.p_value)})"
    return f"REJECTED (p={p_text(result.p_value)}; {len(result.rejections())} tests)"


def verdict_line(
    results: dict[str, StatsResult], *, config: StatsConfig, roles: Roles = DEFAULT_ROLES
) -> str:
    """One line: every implementation's verdict (``expected`` where its role wants it
    rejected, ``UNEXPECTED`` where the verdict goes against its role); the pair's buggy
    side on position 0 on its own."""
    parts = []
    for name, r in results.items():
        mark = "" if meets_expectation(r, roles) else " UNEXPECTED"
        wanted = " (expected)" if expected_rejected(name, roles) and not mark else ""
        parts.append(f"{name} {verdict_word(r)}{wanted}{mark}")
    line = (
        f"losslessness at family alpha {config.alpha:g} ({family_size(config)} tests, Holm): "
        + ", ".join(parts)
    )
    buggy = results.get(roles.buggy)
    if buggy is not None and buggy.error is None and buggy.not_judged is None:
        seen = "also REJECTED" if buggy.rejected_at_position(0) else "passes, as the bug predicts"
        line += f"; {roles.buggy} on position 0 alone {seen}"
    return line


def statistical_coverage(
    oracle: OracleRun, *, roles: Roles = DEFAULT_ROLES
) -> StatisticalCoverage | None:
    """What the oracle exercised, from its run: rows per group and target, the life of
    one instance (from the far target's rounds), and the detection bound at the rows of
    the fixed side's run (else the first implementation that passed, else the first
    that ran)."""
    ran = [r for r in oracle.results.values() if r.error is None and r.name in oracle.decoded]
    if not ran:
        return None
    chosen = next(
        (r for r in ran if r.name == roles.fixed and r.passed),
        next((r for r in ran if r.passed), ran[0]),
    )
    problem = oracle.problem
    rounds = max(run.rounds for run in oracle.decoded[chosen.name][problem.target.name].values())
    calls = [batch for r in range(rounds) for batch in life_batches(problem, r)]
    restaged = sum(
        1
        for before, after in itertools.pairwise(calls)
        if before.shape != after.shape or not bool((before == after).all())
    )
    first = chosen.bounds[0] if chosen.bounds else None
    return StatisticalCoverage(
        implementation=chosen.name,
        targets={t.name: t.draft_weight for t in oracle.config.targets},
        rows_per_group={
            p.target.name: {
                group_label(g): int((p.row_group == i).sum()) for i, g in enumerate(p.config.groups)
            }
            for p in oracle.problems
        },
        rounds=rounds,
        calls_per_instance=len(calls),
        restagings_per_instance=restaged,
        batch_sizes=tuple(sorted({int(batch.shape[0]) for batch in calls})),
        power=first.power if first else TARGET_POWER,
        level=chosen.test_level,
        bounds=best_bounds(chosen.bounds),
    )


def statistical_verdicts(oracle: OracleRun) -> dict[str, Statistical]:
    """Each implementation's statistical part, as its lossless verdict takes it: passed
    only when it passes under every verifier; otherwise the first verifier's failure,
    its carriers named with that verifier when the run had more than one."""
    return {name: combined_statistical(oracle.results_of(name)) for name in oracle.results}


def combined_statistical(results: Sequence[StatsResult]) -> Statistical:
    """One verdict from one implementation's results under several verifiers."""
    several = len(results) > 1
    for result in results:
        verdict = result.statistical()
        if not verdict.failed:
            continue
        if several and verdict.carried_by:
            named = ", ".join(f"{result.verifier}:{c}" for c in verdict.carried_by.split(", "))
            return replace(verdict, carried_by=named)
        if several and verdict.error is not None:
            return replace(verdict, error=f"under {result.verifier}: {verdict.error}")
        if several and verdict.not_judged is not None:
            return replace(verdict, not_judged=f"under {result.verifier}: {verdict.not_judged}")
        return verdict
    p_values = [r.p_value for r in results if not math.isnan(r.p_value)]
    return Statistical(ran=True, rejected=False, p_value=min(p_values) if p_values else None)


def coverage_text(config: StatsConfig) -> str:
    return (
        f"covered: heads {', '.join(config.head_kinds)}; groups "
        f"{', '.join(map(group_label, config.groups))} (rows take them in turn); "
        f"every committed position 0..{config.gamma} of each round "
        f"(position {config.gamma} is the bonus), the joint of the first {config.m} committed "
        f"tokens, the repeat test; rows per head "
        + ", ".join(f"{t.name} {config.target_rows(t)}" for t in config.targets)
        + f", {config.rounds} rounds each; "
        f"{family_size(config)} tests, Holm at family alpha {config.alpha:g} "
        f"(first threshold {config.alpha / family_size(config):.3g})"
    )


def results_table(results: Sequence[StatsResult], *, fmt: TableFormat = "text") -> str:
    header = [
        "impl",
        "verifier",
        "verdict",
        "family p",
        "rejected tests",
        "carried by",
        "mean accepted",
    ]
    rows = []
    for r in results:
        verdict = (
            "not judged"
            if r.not_judged
            else "ERROR"
            if r.error
            else ("REJECTED" if r.rejected else "pass")
        )
        accepted = "; ".join(
            f"{target}: " + ", ".join(f"{h} {v:.2f}" for h, v in heads.items())
            for target, heads in r.mean_accepted_length.items()
        )
        rows.append(
            [
                r.name,
                r.verifier,
                verdict,
                p_text(r.p_value),
                str(len(r.rejections())),
                carriers(r) or "-",
                accepted or "-",
            ]
        )
    notes = [f"  {r.name} ({r.verifier}): raised {r.error}" for r in results if r.error]
    notes += [
        f"  {r.name} ({r.verifier}): not judged, {r.not_judged}" for r in results if r.not_judged
    ]
    notes += [
        f"  {r.name} ({r.verifier}): {r.impossible} committed tuples the target gives probability 0"
        for r in results
        if r.impossible
    ]
    return "\n".join([table(header, rows, fmt=fmt), *notes])


def detail_table(result: StatsResult, *, config: StatsConfig) -> str:
    """p-values of every test (``*``: rejected by Holm) and the first marginals."""
    tests = [JOINT, *(position_name(j) for j in range(config.gamma + 1)), REPEAT]
    header = ["target", "head", "group", *tests, *(f"marg {j}" for j in range(config.m))]
    by_cell = {(s.target, s.head, s.group, s.test): s for s in result.statistics}
    marginals = {(m.target, m.head, m.group, m.position): m for m in result.marginals}
    rows = []
    for target in (t.name for t in config.targets):
        for head in config.head_kinds:
            for group in map(group_label, config.groups):
                key = (target, head, group)
                cells = [
                    p_text(by_cell[(*key, t)].p_value)
                    + ("*" if by_cell[(*key, t)].rejected else "")
                    for t in tests
                ]
                cells += [p_text(marginals[(*key, j)].p_value) for j in range(config.m)]
                rows.append([target, head, group, *cells])
    numbers: list[Alignment] = ["right"] * (len(header) - 3)
    return table(header, rows, align=["left", "left", "left", *numbers])


def power_text(curves: Sequence[PowerCurve]) -> str:
    if not curves:
        return ""
    first = curves[0]
    header = [
        "head",
        "rows for power 0.99 (predicted)",
        "measured",
        "curve: rows -> measured / predicted",
    ]
    rows = []
    for c in curves:
        measured = (
            "not reached"
            if c.measured_rows_for_target_power is None
            else next(
                f"{p.rows} ({p.rejections}/{p.trials} blocks)"
                for p in c.points
                if p.rows == c.measured_rows_for_target_power
            )
        )
        curve = "; ".join(
            f"{p.rows}: {p.empirical_power:.2f}/{p.predicted_power:.2f}" for p in c.points
        )
        rows.append([c.head, str(c.rows_for_target_power or "not reached"), measured, curve])
    return "\n".join(
        [
            f"power against {first.name} at alpha {first.alpha:g} (each test at the first Holm "
            f"threshold {first.level:.3g}); {first.pooled_rows} pooled rows per head from seeds "
            f"{', '.join(map(str, first.seeds))}, cut into disjoint blocks; predicted: the "
            "strongest test's noncentral chi-square (a lower bound):",
            table(header, rows),
            f"rule of thumb, 10 x V = {first.rule_of_thumb_rows} rows: predicted power "
            + ", ".join(f"{c.head} {c.power_at_rule_of_thumb:.2g}" for c in curves),
        ]
    )


def oracle_text(oracle: OracleRun) -> str:
    config = oracle.config
    parts = [
        config.describe(),
        coverage_text(config),
        "",
        results_table(oracle.every_result()),
    ]
    for result in oracle.every_result():
        if result.statistics:
            parts += [
                "",
                f"{result.name} under {result.verifier}: p-values per head and group (* rejected)",
                detail_table(result, config=config),
            ]
    if oracle.curves:
        parts += ["", power_text(oracle.curves)]
    return "\n".join(parts)


def oracle_json(oracle: OracleRun, *, roles: Roles = DEFAULT_ROLES) -> dict[str, Any]:
    return json_safe(
        {
            "config": asdict(oracle.config),
            "family_size": family_size(oracle.config),
            "results": {name: r.to_json_dict() for name, r in oracle.results.items()},
            "verifiers": list(oracle.by_verifier),
            "by_verifier": {
                verifier: {name: r.to_json_dict() for name, r in results.items()}
                for verifier, results in oracle.by_verifier.items()
            },
            "roles": roles.to_json(),
            "expectations": {
                name: all(meets_expectation(r, roles) for r in oracle.results_of(name))
                for name in oracle.results
            },
            "power_curves": [c.to_json_dict() for c in oracle.curves],
        }
    )


def json_safe(value: Any) -> Any:
    """NaN and infinities become ``None`` so the JSON is standard."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def stats_section(
    config: StatsConfig,
    *,
    implementations: Sequence[Implementation] | None = None,
    power: bool,
    progress: Progress = no_progress,
    time_limit_s: float | None = None,
    roles: Roles = DEFAULT_ROLES,
    verifiers: Sequence[Verifier] = (CHAIN_VERIFIER,),
    isolate: bool = False,
) -> tuple[Section, OracleRun]:
    """Run the oracle on ``implementations`` (default: fixed and legacy) under every
    verifier, each held to its role in ``roles`` under each (with ``isolate``, each in
    its worker), with ``power`` also legacy's power curve per head kind (first
    verifier), and present it as a section."""
    oracle = run_oracle(
        config,
        implementations=implementations,
        progress=progress,
        time_limit_s=time_limit_s,
        verifiers=verifiers,
        isolate=isolate,
    )
    legacy = oracle.results.get(BUGGY)
    if power and legacy is not None and legacy.error is None and legacy.not_judged is None:
        oracle.curves = run_power_curves(
            builtin_implementations((BUGGY,))[0],
            problem=oracle.problem,
            level=legacy.test_level,
            decoded=oracle.decoded.get(BUGGY, {}).get(oracle.problem.target.name),
            progress=progress,
        )
    ok = all(expectations_hold(results, roles) for results in oracle.by_verifier.values())
    lines = [
        verdict_line(results, config=config, roles=roles) for results in oracle.by_verifier.values()
    ]
    if len(lines) > 1:
        lines = [
            f"under {name}: {line}" for name, line in zip(oracle.by_verifier, lines, strict=True)
        ]
    section = Section(
        title=TITLE,
        ok=ok,
        verdict="; ".join(lines),
        text=oracle_text(oracle),
        data={**oracle_json(oracle, roles=roles), "ok": ok},
    )
    return section, oracle


def report_stats(
    *,
    seed: int,
    progress: Progress = no_progress,
    device: str = "cpu",
    implementations: Sequence[Implementation] | None = None,
    time_limit_s: float | None = None,
    roles: Roles = DEFAULT_ROLES,
    power: bool = True,
    isolate: bool = False,
) -> tuple[Section, OracleRun]:
    """The statistical part of the main report: ``implementations`` (default: the
    built-ins; plug-ins given with ``--impl`` belong here too) at the default config,
    each held to its role, and (with ``power``) legacy's power curve per head kind;
    with the run, whose verdicts enter each implementation's lossless verdict."""
    chosen = list(implementations) if implementations is not None else builtin_implementations()
    from harness.oracles.verifiers import available_verifiers

    config = replace(DEFAULT_CONFIG, seed=seed, device=device)
    return stats_section(
        config,
        implementations=chosen,
        power=power,
        progress=progress,
        time_limit_s=time_limit_s,
        roles=roles,
        isolate=isolate,
        verifiers=available_verifiers(),
    )


def report_section(
    *,
    seed: int,
    progress: Progress = no_progress,
    device: str = "cpu",
    implementations: Sequence[Implementation] | None = None,
    time_limit_s: float | None = None,
    roles: Roles = DEFAULT_ROLES,
) -> Section:
    """``report_stats``'s section alone."""
    return report_stats(
        seed=seed,
        progress=progress,
        device=device,
        implementations=implementations,
        time_limit_s=time_limit_s,
        roles=roles,
    )[0]


@dataclass(frozen=True)
class StatisticalPart:
    """The oracle's part of every lossless verdict of a run: its report section, each
    implementation's ``Statistical``, what the oracle covered and its wall time."""

    section: Section
    verdicts: dict[str, Statistical]
    coverage: StatisticalCoverage | None
    wall_s: float


def statistical_part(
    *,
    seed: int,
    device: str,
    implementations: Sequence[Implementation],
    roles: Roles,
    time_limit_s: float | None,
    progress: Progress = no_progress,
    power: bool = False,
    isolate: bool = False,
) -> StatisticalPart:
    """The statistical oracle at the report's defaults on ``implementations``, as every
    command that states a lossless verdict (``report``, ``compare``, the Python API, the
    pytest plugin) runs it; ``power`` adds the power curves (the report's figure), and
    ``isolate`` runs each implementation's decode in the worker process."""
    progress("statistical oracle ...")
    started = time.perf_counter()
    section, oracle = report_stats(
        seed=seed,
        progress=progress,
        device=device,
        implementations=implementations,
        time_limit_s=time_limit_s,
        roles=roles,
        power=power,
        isolate=isolate,
    )
    return StatisticalPart(
        section=section,
        verdicts=statistical_verdicts(oracle),
        coverage=statistical_coverage(oracle, roles=roles),
        wall_s=time.perf_counter() - started,
    )


MEASURED_MARKERS = ("o", "s", "^")  # one shape per head kind, nested by size


def power_curves_png(curves: Sequence[dict[str, Any]]) -> bytes | None:
    """The power curves (``PowerCurve.to_json_dict()``) as a PNG, one line pair per head:
    rows against the rejection rate, measured and predicted; ``None`` without matplotlib."""

    def draw(figure: Any) -> None:
        axes = figure.add_subplot()
        for index, curve in enumerate(curves):
            colour = f"C{index}"
            rows = [p["rows"] for p in curve["points"]]
            axes.semilogx(  # hollow and each head smaller: equal points stay visible
                rows,
                [p["empirical_power"] for p in curve["points"]],
                MEASURED_MARKERS[index % len(MEASURED_MARKERS)],
                color=colour,
                markerfacecolor="none",
                markersize=11 - 3 * (index % len(MEASURED_MARKERS)),
                label=f"{curve['head']}: measured (blocks)",
            )
            axes.semilogx(
                rows,
                [p["predicted_power"] for p in curve["points"]],
                "-",
                color=colour,
                label=f"{curve['head']}: predicted",
            )
        if curves:
            axes.axhline(
                curves[0]["target_power"], color="grey", linestyle=":", label="target power"
            )
            axes.set_ylabel(
                f"rejection rate of {curves[0]['name']} (test level {curves[0]['level']:.2g})"
            )
        axes.set_xlabel("independent rows per head (2 rounds each)")
        axes.set_ylim(-0.02, 1.02)
        axes.set_title("power of the statistical oracle, per head kind")
        axes.legend(fontsize=7, loc="lower right")
        figure.tight_layout()

    return render_png(draw, size=(7.0, 4.2))
