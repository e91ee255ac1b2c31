"""What a verdict covered, computed from what ran: the cases' records and the oracle's run.

``MatrixCoverage`` reads the per-call checks' coverage from the case records: head
kinds, anchor layouts, dtypes, the ranges of ``bs``, ``max_bs``, ``gamma`` and ``V``,
each flag with the head kinds it was on for, and the calls of one sampler instance
(a case's ``replays``, a server's life on one instance, where the record has it;
otherwise the runner's default: one call, and a second staged call with the same
parameters when the case has sampled rows). ``StatisticalCoverage`` is the oracle's
part (rows per group and target, rounds and calls per instance, restagings, batch
sizes) with its detection bound at those rows. ``coverage_section`` presents both;
a verdict never claims more than this (docs/verdicts.md, "Coverage").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.pipeline.records import CaseFields, CaseRecord
from harness.render.sections import Section, Table

FLAGS = ("folded_sampling", "fused_greedy", "confidence")
Span = tuple[int, int]  # (smallest, largest)


def _span(values: Sequence[int]) -> Span:
    return (min(values), max(values)) if values else (0, 0)


def _span_text(span: Span) -> str:
    low, high = span
    return str(low) if low == high else f"{low}..{high}"


def calls_per_instance(case: CaseFields) -> int:
    """Calls one instance of this case lived: its ``replays`` when it has a life, else
    the runner's default (a second staged call when folded with sampled rows)."""
    replays = int(case.get("replays", 0))
    sampled = case["folded_sampling"] and not all(case["greedy_rows"])
    return max(replays, 2 if sampled else 1)


def restagings_per_instance(case: CaseFields) -> int:
    """Stagings of new parameters after the first: every later replay of a life; none in
    the runner's default (its second call is staged with the same parameters)."""
    return max(0, int(case.get("replays", 0)) - 1)


@dataclass(frozen=True)
class MatrixCoverage:
    """What the per-call checks exercised over a comparison's cases."""

    cases: int
    heads: tuple[str, ...]
    layouts: tuple[str, ...]  # "anchor" (sample from the anchor) and/or "no-anchor"
    dtypes: tuple[str, ...]
    bs: Span
    max_bs: Span
    gamma: Span
    vocab_size: Span
    flags: dict[str, tuple[str, ...]]  # flag: the head kinds it was on for
    calls_per_instance: Span
    restagings_per_instance: Span
    lives: int  # cases whose record carries a life (``replays``)

    @classmethod
    def of_records(cls, records: Sequence[CaseRecord]) -> MatrixCoverage:
        cases = [record["case"] for record in records]

        def distinct(key: str) -> tuple[str, ...]:
            return tuple(dict.fromkeys(str(case[key]) for case in cases))

        return cls(
            cases=len(cases),
            heads=distinct("head_kind"),
            layouts=tuple(
                dict.fromkeys("anchor" if c["sample_from_anchor"] else "no-anchor" for c in cases)
            ),
            dtypes=distinct("dtype"),
            bs=_span([c["bs"] for c in cases]),
            max_bs=_span([c["max_bs"] for c in cases]),
            gamma=_span([c["gamma"] for c in cases]),
            vocab_size=_span([c["vocab_size"] for c in cases]),
            flags={
                flag: tuple(dict.fromkeys(c["head_kind"] for c in cases if c[flag]))
                for flag in FLAGS
            },
            calls_per_instance=_span([calls_per_instance(c) for c in cases]),
            restagings_per_instance=_span([restagings_per_instance(c) for c in cases]),
            lives=sum(1 for c in cases if int(c.get("replays", 0)) > 0),
        )

    def rows(self) -> list[list[str]]:
        """``[what, covered]`` lines of the coverage table."""
        flags = "; ".join(
            f"{flag} on for {', '.join(heads) if heads else 'no head'}"
            for flag, heads in self.flags.items()
        )
        life = (
            f"{self.lives} of {self.cases} cases live a server's life"
            if self.lives
            else "no case lives a server's life: one call per instance, and a second "
            "with the same parameters when sampled"
        )
        return [
            ["cases", str(self.cases)],
            ["heads", ", ".join(self.heads)],
            ["layouts", ", ".join(self.layouts)],
            ["dtypes", ", ".join(self.dtypes)],
            [
                "shapes",
                f"bs {_span_text(self.bs)}, max_bs {_span_text(self.max_bs)}, "
                f"gamma {_span_text(self.gamma)}, V {_span_text(self.vocab_size)}",
            ],
            ["flags", flags],
            [
                "calls per instance",
                f"{_span_text(self.calls_per_instance)}; restagings with new parameters "
                f"{_span_text(self.restagings_per_instance)} ({life})",
            ],
        ]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BoundRow:
    """The oracle's detection bound at one committed position (the best target's)."""

    position: int
    fraction: float | None  # in every head and sampled group; None: not reached
    confined_fraction: float | None  # in one head and group only
    target: str
    rows: int


@dataclass(frozen=True)
class StatisticalCoverage:
    """What the statistical oracle exercised, and the smallest defect it would have seen."""

    implementation: str  # whose run the bound is computed from
    targets: dict[str, float]  # name: draft weight
    rows_per_group: dict[str, dict[str, int]]  # target: group label: rows per head
    rounds: int
    calls_per_instance: int
    restagings_per_instance: int
    batch_sizes: tuple[int, ...]
    power: float
    level: float
    bounds: tuple[BoundRow, ...]

    def rows(self) -> list[list[str]]:
        rows_text = "; ".join(
            f"{target} (draft weight {self.targets[target]:g}): "
            + ", ".join(f"{group} {n}" for group, n in groups.items())
            for target, groups in self.rows_per_group.items()
        )
        return [
            ["statistical rows per group and head", rows_text],
            [
                "statistical life",
                f"{self.rounds} rounds, {self.calls_per_instance} calls per instance, "
                f"{self.restagings_per_instance} restaged with other requests per slot, "
                f"batch sizes {', '.join(map(str, self.batch_sizes))}",
            ],
        ]

    def bound_sentence(self) -> str:
        """What a pass rules out, and what it does not."""
        return (
            f"detection bound ({self.implementation}'s rows, each test at {self.level:.3g}): a "
            "defect that makes a fraction of the rows at one committed position commit a fixed "
            f"token (the hardest to see) is seen with probability {self.power:g} if that "
            "fraction is at least the bound below; smaller ones are not ruled out"
        )

    def bound_table(self) -> Table:
        rows = [
            [
                f"pos {b.position}",
                _percent(b.fraction),
                _percent(b.confined_fraction),
                b.target,
                str(b.rows),
            ]
            for b in self.bounds
        ]
        header = ["position", "every head and group", "one head and group", "target", "rows"]
        return Table.of(header, rows, align=("left", "right", "right", "left", "right"))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _percent(fraction: float | None) -> str:
    return "not reached" if fraction is None else f"{fraction:.1%}"


def coverage_section(
    records: Sequence[CaseRecord], *, statistical: StatisticalCoverage | None
) -> Section:
    """What the verdicts above covered, as one table and its JSON."""
    matrix = MatrixCoverage.of_records(records)
    rows = matrix.rows()
    if statistical is None:
        rows.append(["statistical oracle", "not run: nothing shown about the committed law"])
        bound: tuple[str | Table, ...] = ()
    else:
        rows += statistical.rows()
        bound = (statistical.bound_sentence(), statistical.bound_table())
    return Section(
        title="Coverage",
        ok=True,
        verdict="",
        blocks=(Table.of(["exercised", "covered"], rows), *bound),
        data={
            "matrix": matrix.to_json(),
            "statistical": None if statistical is None else statistical.to_json(),
        },
    )
