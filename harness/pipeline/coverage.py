"""What a verdict covered, computed from what ran: the cases' records and the oracle's run.

``MatrixCoverage`` reads the per-call checks' coverage from the case records: head
kinds, anchor layouts, dtypes, the ranges of ``bs``, ``max_bs``, ``gamma`` and ``V``,
each flag with the head kinds it was on for, and the calls of one sampler instance
(a case's ``replays``, a server's life on one instance, where the record has it;
otherwise the runner's default: one call, and a second staged call with the same
parameters when the case has sampled rows). ``StatisticalCoverage`` is the oracle's
part (rows per group and target, rounds and calls per instance, restagings, batch
sizes) with its detection bound at those rows, and how many of its calls and draft
positions were held to which per-call check. ``harness.render.coverage`` presents
both; a verdict never claims more than this (docs/verdicts.md, "Coverage").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.pipeline.records import CaseFields, CaseRecord

FLAGS = ("folded_sampling", "fused_greedy", "confidence")
Span = tuple[int, int]  # (smallest, largest)


def _span(values: Sequence[int]) -> Span:
    return (min(values), max(values)) if values else (0, 0)


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
    calls_held: int = 0  # the implementation's oracle calls held to the per-call checks
    positions_held: dict[str, int] = field(default_factory=dict)  # check: draft positions

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
