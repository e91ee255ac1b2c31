"""The statistical oracle's section: how its run (``harness.oracles``) reads. Tables,
verdict lines, the section and its JSON, and the power figure. Formatting only; every
number comes from the run."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from harness.defaults import VerifierNoise
from harness.judgement import OracleVerdict
from harness.options import Roles
from harness.oracles.fits import JOINT, REPEAT, family_size, position_name
from harness.oracles.power import PowerCurve
from harness.oracles.problem import StatsConfig, group_label
from harness.oracles.stats import (
    DEFAULT_ROLES,
    OracleRun,
    Scope,
    StatsResult,
    best_bounds,
    expected_rejected,
    not_ruled_out,
    where,
)
from harness.pipeline.verdicts import MAX_CARRIERS
from harness.render.sections import TERMINAL_WIDTH, Block, Section, Table
from harness.render.tables import Alignment, TableFormat, table

TITLE = "Statistical losslessness (docs/statistics.md)"


def p_text(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3g}"


def carriers(result: StatsResult) -> str:
    """Which head, group and test carried the rejection, strongest first."""
    rejections = sorted(result.rejections(), key=lambda s: s.p_value)
    named = ", ".join(f"{where(s)} (p={p_text(s.p_value)})" for s in rejections[:MAX_CARRIERS])
    more = len(rejections) - MAX_CARRIERS
    return named + (f" and {more} more" if more > 0 else "")


def strongest(result: StatsResult) -> str:
    """The rejection with the smallest p-value, or ``-``."""
    rejections = result.rejections()
    if not rejections:
        return "-"
    first = min(rejections, key=lambda s: s.p_value)
    return f"{where(first)} (p={p_text(first.p_value)})"


def verdict_word(result: StatsResult) -> str:
    if not result.ran:
        return f"not run ({result.scope()})"
    if result.not_judged:
        return f"not judged ({result.not_judged})"
    if result.error:
        return f"raised ({result.error})"
    failing = failing_checks(result)
    staged = "".join(
        f"; stage {s.index} on {s.rows:,} rows p={p_text(s.p_value)}" for s in result.stages
    )
    if not result.rejected:
        if failing:
            return f"FAILS {failing} on its calls (tests p={p_text(result.p_value)}{staged})"
        return f"passes (p={p_text(result.p_value)}{staged})"
    calls = f"; its calls fail {failing}" if failing else ""
    tests = f"{len(result.rejections())} tests" if result.rejections() else "the family: none"
    return f"REJECTED (p={p_text(result.p_value)}; {tests}{staged}{calls})"


def failing_checks(result: StatsResult) -> str:
    """The per-call checks its calls failed, in the registry's order, or ``""``."""
    return ", ".join(dict.fromkeys(f.check for f in result.held_calls.findings))


def verdict_line(
    results: dict[str, StatsResult],
    *,
    config: StatsConfig,
    met: Mapping[str, bool],
    roles: Roles = DEFAULT_ROLES,
) -> str:
    """One line: every implementation's verdict (``expected`` where its role wants it
    rejected, ``UNEXPECTED`` where it did not meet its role's expectation, ``met``: the
    judgement's); the pair's buggy side on position 0 on its own."""
    parts = []
    for name, r in results.items():
        mark = "" if met[name] else " UNEXPECTED"
        wanted = " (expected)" if expected_rejected(name, roles) and not mark else ""
        own = r.ran and r.family_size != family_size(config)  # a cut scope: its own family
        tests = f" [of {r.family_size} tests: its scope]" if own else ""
        parts.append(f"{name} {verdict_word(r)}{tests}{wanted}{mark}")
    line = (
        f"losslessness at family alpha {config.alpha:g} ({family_size(config)} tests, Holm): "
        + ", ".join(parts)
    )
    buggy = results.get(roles.buggy)
    if buggy is not None and buggy.error is None and buggy.not_judged is None:
        seen = "also REJECTED" if buggy.rejected_at_position(0) else "passes, as the bug predicts"
        line += f"; {roles.buggy} on position 0 alone {seen}"
    return line


def coverage_text(config: StatsConfig) -> str:
    return (
        f"covered: heads {', '.join(config.head_kinds)}; groups "
        f"{', '.join(map(group_label, config.groups))} (rows take them in turn"
        f"{config.truncated_depth().replace(' (', '; ', 1)[:-1]}); "
        f"every committed position 0..{config.gamma} of each round "
        f"(position {config.gamma} is the bonus), the joint of the first {config.m} committed "
        f"tokens, the repeat test; rows per head "
        + ", ".join(f"{t.name} {config.target_rows(t)}" for t in config.targets)
        + f", {config.rounds} rounds each; "
        f"{family_size(config)} tests, Holm at family alpha {config.alpha:g} "
        f"(first threshold {config.alpha / family_size(config):.3g})"
    )


def verdict_cell(result: StatsResult) -> str:
    """One result's verdict in a table's cell."""
    if not result.ran:
        return "not run"
    if result.not_judged:
        return "not judged"
    if result.error:
        return "ERROR"
    if result.held_calls.findings:
        return "REJECTED, FAILS per call" if result.rejected else "FAILS per call"
    return "REJECTED" if result.rejected else "pass"


def finding_lines(results: Sequence[StatsResult], *, every: bool) -> list[str]:
    """The findings on each result's calls: the first (``every``: all), and how many."""
    lines = []
    for r in results:
        findings = r.held_calls.findings
        shown = findings if every else findings[:1]
        lines += [f"  {r.name} ({r.verifier}): {f.describe()}" for f in shown]
        if len(findings) > len(shown):
            lines.append(f"  {r.name} ({r.verifier}): and {len(findings) - len(shown)} more")
    return lines


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
        verdict = verdict_cell(r)
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
    notes += finding_lines(results, every=True)
    notes += [
        f"  {r.name} ({r.verifier}): {r.scope()}"
        + ("" if r.rejected or not r.bounds else f"; {not_ruled_out(best_bounds(r.bounds))}")
        for r in results
        if r.scope()
    ]
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
    """p-values of every test (``*``: rejected by Holm) and the first marginals, at
    each target, head and group the result ran (a cut one: fewer than the config's)."""
    tests = [JOINT, *(position_name(j) for j in range(config.gamma + 1)), REPEAT]
    header = ["target", "head", "group", *tests, *(f"marg {j}" for j in range(config.m))]
    by_cell = {(s.target, s.head, s.group, s.test): s for s in result.statistics}
    marginals = {(m.target, m.head, m.group, m.position): m for m in result.marginals}
    rows = []
    ran = {(s.target, s.head, s.group) for s in result.statistics}  # a cut result ran fewer
    for target in (t.name for t in config.targets):
        for head in config.head_kinds:
            for group in map(group_label, config.groups):
                key = (target, head, group)
                if key not in ran:
                    continue
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
    """The power curves against the buggy side: per head, the rows a power of
    ``target_power`` needs, predicted and measured; then every curve point, measured with
    its interval beside the prediction."""
    if not curves:
        return ""
    first = curves[0]
    confidence = f"{first.interval_confidence:.0%}"
    summary = [
        [
            c.head,
            str(c.rows_for_target_power or "not reached"),
            "not reached"
            if c.measured_rows_for_target_power is None
            else next(
                f"{p.rows} ({p.rejections}/{p.trials} blocks)"
                for p in c.points
                if p.rows == c.measured_rows_for_target_power
            ),
        ]
        for c in curves
    ]
    points = [
        [
            c.head,
            str(p.rows),
            f"{p.rejections}/{p.trials}",
            _share(p.empirical_power),
            f"[{_share(p.interval_low)}, {_share(p.interval_high)}]",
            _share(p.predicted_power),
            "yes" if p.interval_low <= p.predicted_power <= p.interval_high else "no",
        ]
        for c in curves
        for p in c.points
    ]
    return "\n".join(
        [
            f"power against {first.name} at the {first.target} target, {first.rounds} rounds "
            f"per row, alpha {first.alpha:g} (each test at the first Holm threshold "
            f"{first.level:.3g}); {first.pooled_rows} pooled rows per head from seeds "
            f"{', '.join(map(str, first.seeds))}, cut into disjoint blocks of each row count. "
            f"Measured: the share of blocks rejected, with its Wilson {confidence} interval. "
            "Predicted: the strongest test's noncentral chi-square power at the noncentrality "
            "estimated from the pooled rows, a prediction that measured points can fall below:",
            table(
                [
                    "head",
                    f"rows for power {first.target_power:g}, predicted",
                    "measured (smallest curve point)",
                ],
                summary,
            ),
            "",
            table(
                [
                    "head",
                    "rows",
                    "blocks rejected",
                    "measured",
                    f"{confidence} interval",
                    "predicted",
                    "predicted in interval",
                ],
                points,
                align=["left", "right", "right", "right", "left", "right", "left"],
            ),
            f"rule of thumb, 10 x V = {first.rule_of_thumb_rows} rows: predicted power "
            + ", ".join(f"{c.head} {c.power_at_rule_of_thumb:.2g}" for c in curves),
        ]
    )


def _share(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def cut_lines(oracle: OracleRun) -> list[str]:
    """One line per verifier and implementation whose decode ran less than the config
    (``scope_under``): what it ran, and what cut it or was left out."""
    lines = []
    for verifier, by_impl in oracle.scopes.items():
        for name, scope in by_impl.items():
            if scope.config is None:
                lines.append(f"{name} under {verifier}: not run ({_left_out(scope)})")
            elif scope.config != oracle.config:
                ran = scope.config
                rows = ", ".join(f"{t.name} {ran.target_rows(t)}" for t in ran.targets)
                why = "; ".join(
                    [*(f"cut by {c.by}" for c in scope.cuts), *filter(None, [_left_out(scope)])]
                )
                lines.append(
                    f"{name} under {verifier}: rows per head {rows}, {ran.rounds} rounds, "
                    f"heads {', '.join(ran.head_kinds)} ({why}); its detection bounds are at "
                    "those rows"
                )
    return lines


def _left_out(scope: Scope) -> str:
    return "; ".join(f"{kind} head not run: {why}" for kind, why in scope.heads_not_run)


def noise_lines(oracle: OracleRun) -> list[str]:
    """Each result's randomness, where the run asked for the servers' own."""
    shared = oracle.config.verifier_noise is VerifierNoise.SHARED
    on = {True: "its server's own randomness", False: "independent streams (not modelled)"}
    results = [r for r in oracle.every_result() if shared and r.shared_noise is not None]
    return [f"{r.name} under {r.verifier}: judged on {on[bool(r.shared_noise)]}" for r in results]


def stage_lines(oracle: OracleRun) -> list[str]:
    """Each sequential stage a result added, what it decoded and what it found."""
    staged = [r for r in oracle.every_result() if r.stages]
    if not staged:
        return []
    lines = ["sequential stages (the family was suspicious, not decisive):"]
    for result in staged:
        lines += [f"  {result.name} ({result.verifier}): {s.describe()}" for s in result.stages]
    return lines


def oracle_text(oracle: OracleRun) -> str:
    config = oracle.config
    parts = [
        config.describe(),
        coverage_text(config),
        *noise_lines(oracle),
        *cut_lines(oracle),
        *stage_lines(oracle),
        "",
        results_table(oracle.every_result()),
    ]
    tables: dict[str, list[str]] = {}  # a table, and the results that share it
    for result in oracle.every_result():
        if result.statistics:
            shown = detail_table(result, config=config)
            tables.setdefault(shown, []).append(f"{result.name} under {result.verifier}")
    for shown, names in tables.items():
        parts += ["", f"{', '.join(names)}: p-values per head and group (* rejected)", shown]
    if oracle.curves:
        parts += ["", power_text(oracle.curves)]
    return "\n".join(parts)


def oracle_json(judged: OracleVerdict, *, roles: Roles = DEFAULT_ROLES) -> dict[str, Any]:
    oracle = judged.run
    return json_safe(
        {
            "config": asdict(oracle.config),
            "rows_per_head_by_verifier": {
                verifier: {name: r.rows for name, r in results.items()}
                for verifier, results in oracle.by_verifier.items()
            },
            "family_size": family_size(oracle.config),
            "verifiers": list(oracle.by_verifier),
            "by_verifier": {
                verifier: {name: r.to_json_dict() for name, r in results.items()}
                for verifier, results in oracle.by_verifier.items()
            },
            "roles": roles.to_json(),
            "expectations": {name: judged.met(name) for name in oracle.results},
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


def stats_section(judged: OracleVerdict, *, roles: Roles = DEFAULT_ROLES) -> Section:
    """The oracle's judged run as a section: each implementation held to its role in
    ``roles`` under each verifier."""
    oracle, ok = judged.run, judged.ok
    lines = [
        verdict_line(results, config=oracle.config, met=judged.expectations[verifier], roles=roles)
        for verifier, results in oracle.by_verifier.items()
    ]
    if len(lines) > 1:
        lines = [
            f"under {name}: {line}" for name, line in zip(oracle.by_verifier, lines, strict=True)
        ]
    return Section(
        title=TITLE,
        ok=ok,
        verdict="; ".join(lines),
        text=oracle_text(oracle),
        data={**oracle_json(judged, roles=roles), "ok": ok},
        brief=oracle_brief(oracle),
    )


def oracle_brief(oracle: OracleRun) -> tuple[Block, ...]:
    """What the terminal shows of the oracle by default: its configuration, each
    implementation's verdict under each verifier with its strongest rejections, and the
    rows each head needs for the target power; every test's p-value is in the whole
    evidence."""
    rows = [
        [
            r.name,
            r.verifier,
            verdict_cell(r),
            p_text(r.p_value),
            str(len(r.rejections())),
            strongest(r),
        ]
        for r in oracle.every_result()
    ]
    config = oracle.config
    blocks: list[Block] = [
        textwrap.fill(
            f"V={config.vocab_size}, gamma={config.gamma}, H={config.hidden_size}, "
            f"r={config.markov_rank}, {config.rounds} rounds per row, family alpha "
            f"{config.alpha:g}, seed {config.seed}, verifier noise "
            f"{config.verifier_noise.value}; targets and rows: Coverage",
            width=TERMINAL_WIDTH,
        ),
        *(
            textwrap.fill(line, width=TERMINAL_WIDTH, subsequent_indent="  ")
            for line in cut_lines(oracle)
        ),
        Table.of(
            ["impl", "verifier", "verdict", "family p", "rejected", "strongest rejection"],
            rows,
        ).fitted(),
    ]
    findings = finding_lines(oracle.every_result(), every=False)
    if findings:
        blocks.append(
            "\n".join(
                textwrap.fill(line, width=TERMINAL_WIDTH, subsequent_indent="    ")
                for line in ["calls that fail a per-call check (docs/statistics.md):", *findings]
            )
        )
    if oracle.curves:
        first = oracle.curves[0]
        blocks.append(
            Table.of(
                [
                    "head",
                    f"rows for power {first.target_power:g} vs {first.name}: predicted",
                    "measured",
                ],
                [
                    [
                        c.head,
                        str(c.rows_for_target_power or "not reached"),
                        str(c.measured_rows_for_target_power or "not reached"),
                    ]
                    for c in oracle.curves
                ],
            )
        )
    return tuple(blocks)
