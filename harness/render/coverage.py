"""The coverage section: what the verdicts covered (``harness.pipeline.coverage``), as one
table of what was exercised, the oracle's detection bound and its table, and the JSON."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from harness.pipeline.coverage import MatrixCoverage, Span, StatisticalCoverage
from harness.pipeline.records import CaseRecord
from harness.render.sections import TERMINAL_WIDTH, Section, Table


def _span_text(span: Span) -> str:
    low, high = span
    return str(low) if low == high else f"{low}..{high}"


def matrix_rows(matrix: MatrixCoverage) -> list[list[str]]:
    """``[what, covered]`` lines of the coverage table."""
    flags = "; ".join(
        f"{flag} on for {', '.join(heads) if heads else 'no head'}"
        for flag, heads in matrix.flags.items()
    )
    life = (
        f"{matrix.lives} of {matrix.cases} cases live a server's life"
        if matrix.lives
        else "no case lives a server's life: one call per instance, and a second "
        "with the same parameters when sampled"
    )
    return [
        ["cases", str(matrix.cases)],
        ["heads", ", ".join(matrix.heads)],
        ["layouts", ", ".join(matrix.layouts)],
        ["dtypes", ", ".join(matrix.dtypes)],
        [
            "shapes",
            f"bs {_span_text(matrix.bs)}, max_bs {_span_text(matrix.max_bs)}, "
            f"gamma {_span_text(matrix.gamma)}, V {_span_text(matrix.vocab_size)}",
        ],
        ["flags", flags],
        [
            "calls per instance",
            f"{_span_text(matrix.calls_per_instance)}; restagings with new parameters "
            f"{_span_text(matrix.restagings_per_instance)} ({life})",
        ],
    ]


def statistical_rows(statistical: StatisticalCoverage) -> list[list[str]]:
    """The oracle's lines of the coverage table: rows per group and head, its life, and
    its calls held to the per-call checks."""
    rows_text = "; ".join(
        f"{target} (draft weight {statistical.targets[target]:g}): "
        + ", ".join(f"{group} {n}" for group, n in groups.items())
        for target, groups in statistical.rows_per_group.items()
    )
    return [
        ["statistical rows per group and head", rows_text],
        [
            "statistical life",
            f"{statistical.rounds} rounds, {statistical.calls_per_instance} calls per instance, "
            f"{statistical.restagings_per_instance} restaged with other requests per slot, "
            f"batch sizes {', '.join(map(str, statistical.batch_sizes))}",
        ],
        [
            "statistical calls held to the per-call checks",
            f"{statistical.calls_held} calls of {statistical.implementation}'s decodes, draft "
            "positions per check: "
            + ", ".join(f"{check} {n:,}" for check, n in statistical.positions_held.items()),
        ],
    ]


def bound_sentence(statistical: StatisticalCoverage) -> str:
    """What a pass rules out, and what it does not."""
    whose, level = statistical.implementation, statistical.level
    return (
        f"detection bound ({whose}'s rows, each test at {level:.3g}): a "
        "defect that makes a fraction of the rows at one committed position commit a fixed "
        f"token (the hardest to see) is seen with probability {statistical.power:g} if that "
        "fraction is at least the bound below; smaller ones are not ruled out"
    )


def bound_table(statistical: StatisticalCoverage) -> Table:
    rows = [
        [
            f"pos {b.position}",
            _percent(b.fraction),
            _percent(b.confined_fraction),
            b.target,
            str(b.rows),
        ]
        for b in statistical.bounds
    ]
    header = ["position", "every head and group", "one head and group", "target", "rows"]
    return Table.of(header, rows, align=("left", "right", "right", "left", "right"))


def _percent(fraction: float | None) -> str:
    return "not reached" if fraction is None else f"{fraction:.1%}"


def coverage_section(
    records: Sequence[CaseRecord], *, statistical: StatisticalCoverage | None
) -> Section:
    """What the verdicts above covered, as one table and its JSON."""
    matrix = MatrixCoverage.of_records(records)
    rows = matrix_rows(matrix)
    if statistical is None:
        rows.append(["statistical oracle", "not run: nothing shown about the committed law"])
        bound: tuple[str | Table, ...] = ()
    else:
        rows += statistical_rows(statistical)
        bound = (bound_sentence(statistical), bound_table(statistical))
    brief_bound = bound
    if statistical is not None:
        sentence = textwrap.fill(
            f"detection bound ({statistical.implementation}'s rows, each test at "
            f"{statistical.level:.3g}): the smallest fraction of rows committing a fixed token "
            f"at one position that is seen with probability {statistical.power:g}",
            width=TERMINAL_WIDTH,
        )
        brief_bound = (sentence, bound_table(statistical))
    return Section(
        title="Coverage",
        ok=True,
        verdict="",
        blocks=(Table.of(["exercised", "covered"], rows), *bound),
        brief=(Table.of(["exercised", "covered"], rows).fitted(), *brief_bound),
        data={
            "matrix": matrix.to_json(),
            "statistical": None if statistical is None else statistical.to_json(),
        },
    )
