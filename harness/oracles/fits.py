"""What the oracle tests on one head kind's decoded rows, per temperature group.

For each group of rows (one temperature, or the greedy rows) this module owns:

- ``joint``: the joint of the first ``m`` committed tokens against its exact law;
- ``position j`` for every committed position ``j = 0 .. gamma`` of a round (``gamma``
  is the bonus position): the consecutive pairs ``(x_{j-1}, x_j)`` of all rounds
  (``x_{-1}`` is the round's anchor), tested as transitions: given the previous
  token ``a``, the next must follow ``p(. | a)``. Whether a round reaches position
  ``j`` is decided before ``x_j`` is drawn, so under a lossless sampler the counts
  from each ``a`` are multinomial and Pearson's statistic is chi-square;
- ``repeat``: a round whose anchor and slot were those of an earlier round of the
  same row must not repeat that round's first token more often than ``p(. | a)``
  says (one-sided normal score). Fresh noise makes the two draws independent; noise
  frozen across calls (per slot) makes them agree;
- the marginals of the first ``m`` positions, shown but not part of the family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from harness.oracles.gof import (
    cell_counts,
    marginal_probs,
    normal_sf,
    pearson_fit,
)
from harness.oracles.problem import StatsConfig, StatsProblem, group_label
from reference.decode import DecodeResult

JOINT, REPEAT = "joint", "repeat"


def family_size(config: StatsConfig) -> int:
    """Tests per target, head and group (each target's own groups): the joint, one per
    committed position, the repeat test."""
    groups = sum(len(config.groups_at(target)) for target in config.targets)
    return groups * len(config.head_kinds) * (config.gamma + 3)


def position_name(position: int) -> str:
    return f"pos {position}"


@dataclass(frozen=True)
class Statistic:
    """One test of the family: where it looked, what it found."""

    target: str
    head: str
    group: str
    test: str  # JOINT, REPEAT or position_name(j)
    statistic: float  # Pearson chi-square, or the normal score of the repeat test
    dof: int  # 0 for the normal score
    p_value: float
    observations: int
    impossible: int = 0  # observations the target gives probability 0
    rejected: bool = False  # by Holm's procedure at the family's alpha

    def to_json_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Marginal:
    """One sequence position's committed token on its own (shown, not in the family)."""

    target: str
    head: str
    group: str
    position: int
    chi2: float
    dof: int
    p_value: float


def transition_counts(
    decoded: DecodeResult, *, row_group: torch.Tensor, groups: int, vocab_size: int
) -> torch.Tensor:
    """Counts ``[G, gamma+1, V, V]`` of ``(x_{j-1}, x_j)`` at every round position ``j``,
    pooled over rounds, per group of rows (``row_group`` ``[rows]``); ``x_{-1}`` is the
    round's anchor."""
    blocks = decoded.round_blocks.cpu()  # [R, rows, gamma+1]
    _, rows, length = blocks.shape
    vocab = vocab_size
    previous = torch.cat([decoded.round_anchors.cpu().unsqueeze(2), blocks[:, :, :-1]], dim=2)
    group = row_group.cpu().view(1, rows, 1).expand_as(blocks)
    position = torch.arange(length).view(1, 1, length).expand_as(blocks)
    reached = blocks >= 0
    key = ((group * length + position) * vocab + previous) * vocab + blocks
    counts = torch.bincount(key[reached], minlength=groups * length * vocab * vocab)
    return counts.view(groups, length, vocab, vocab).to(torch.float64)


@dataclass(frozen=True)
class CountTable:
    """Observed counts ``[S, C]`` of one chi-square test and their exact law ``[S, C]``
    (strata: the previous token of a transition test; one stratum for a joint)."""

    group: str
    test: str
    observed: torch.Tensor
    expected_probs: torch.Tensor


@dataclass(frozen=True)
class RepeatScore:
    """The repeat test's sums: observed minus expected agreements, and its variance."""

    group: str
    excess: float
    variance: float
    events: int
    impossible: int

    @property
    def z(self) -> float:
        return self.excess / math.sqrt(self.variance) if self.variance > 1e-12 else 0.0

    @property
    def p_value(self) -> float:
        if self.impossible:
            return 0.0
        if self.variance <= 1e-12:
            # a deterministic law (greedy rows): any excess means the impossible happened
            return 0.0 if self.excess > 1e-9 else 1.0
        return normal_sf(self.z)


def repeat_score(
    decoded: DecodeResult, *, rows: torch.Tensor, transition: torch.Tensor, group: str
) -> RepeatScore:
    """The repeat test over the selected rows (``rows`` ``[n]`` indices) under one law
    ``transition`` ``[V, V]`` (``repeat_scores`` of one group)."""
    row_group = torch.full((decoded.round_anchors.shape[1],), -1, dtype=torch.int64)
    row_group[rows.cpu()] = 0
    (score,) = repeat_scores(
        decoded, row_group=row_group, transitions=transition.unsqueeze(0), groups=(group,)
    )
    return score


def repeat_scores(
    decoded: DecodeResult,
    *,
    row_group: torch.Tensor,
    transitions: torch.Tensor,
    groups: Sequence[str],
) -> list[RepeatScore]:
    """The repeat test of every group at once: the rows of group ``g`` (``row_group``
    ``[rows]``; a row outside ``0 .. G-1`` is in none) under ``transitions[g]``
    (``[G, V, V]``), one score per entry of ``groups``.

    For each round ``r`` and each earlier round ``s`` of the row with the same anchor
    ``a`` in the same slot of its call (where noise frozen per slot would repeat), the
    indicator ``x^r_0 == x^s_0`` has mean ``p(x^s_0 | a)`` under the target,
    given everything before round ``r``; the centred sum over all such pairs, divided
    by its standard deviation, is a martingale score, asymptotically normal.
    """
    row_group = row_group.cpu()
    rows = ((row_group >= 0) & (row_group < len(groups))).nonzero().squeeze(1)  # [n]
    group = row_group[rows]  # [n]
    anchors = decoded.round_anchors[:, rows].cpu()  # [R, n]
    first = decoded.round_blocks[:, rows, 0].cpu()  # [R, n]
    slots = decoded.round_slots[:, rows].cpu()  # [R, n]
    transitions = transitions.cpu()
    excess = torch.zeros(rows.shape[0], dtype=torch.float64)  # per row, summed over rounds
    variance = torch.zeros_like(excess)
    events = torch.zeros(rows.shape[0], dtype=torch.int64)
    impossible = torch.zeros_like(events)
    vocab = transitions.shape[-1]
    for r in range(1, anchors.shape[0]):
        same = (anchors[:r] == anchors[r]) & (slots[:r] == slots[r])  # [r, n]
        # earlier[i, b]: how many earlier rounds of row i from the same anchor began with b
        earlier = torch.zeros(anchors.shape[1], vocab, dtype=torch.float64)
        earlier.scatter_add_(1, first[:r].T, same.T.to(torch.float64))
        has_pair = earlier.sum(1) > 0
        law = transitions[group, anchors[r]]  # [n, V]
        mean = (law * earlier).sum(1)
        second = (law * earlier**2).sum(1)
        hit = earlier.gather(1, first[r].unsqueeze(1)).squeeze(1)
        excess += torch.where(has_pair, hit - mean, 0.0)
        variance += torch.where(has_pair, second - mean**2, 0.0)
        events += has_pair
        impossible += has_pair & (law.gather(1, first[r].unsqueeze(1)).squeeze(1) == 0)

    def by_group(values: torch.Tensor) -> list[float]:
        return torch.zeros(len(groups), dtype=values.dtype).index_add_(0, group, values).tolist()

    return [
        RepeatScore(label, e, v, int(n), int(i))
        for label, e, v, n, i in zip(
            groups,
            by_group(excess),
            by_group(variance),
            by_group(events),
            by_group(impossible),
            strict=True,
        )
    ]


@dataclass(frozen=True)
class HeadTables:
    """Everything the tests of one head kind read, before any p-value."""

    target: str
    head: str
    chi2_tables: list[CountTable]  # joint and positions, group by group
    repeats: list[RepeatScore]
    marginal_tables: list[tuple[int, CountTable]]  # (position, table)


def head_tables(
    decoded: DecodeResult,
    *,
    problem: StatsProblem,
    head_kind: str,
    row_group: torch.Tensor,
    marginals: bool = True,
) -> HeadTables:
    """Count what every test of one head kind reads (``row_group`` ``[rows]``); without
    ``marginals``, only what the family's tests read (the marginals are reported, not
    tested)."""
    config = problem.config
    vocab, m = config.vocab_size, config.m
    committed = decoded.committed.cpu()
    row_group = row_group.cpu()
    transitions = transition_counts(
        decoded, row_group=row_group, groups=len(config.groups), vocab_size=vocab
    )  # [G, gamma+1, V, V]
    law, joint_law = problem.transition[head_kind], problem.expected_joint[head_kind]
    labels = [group_label(g) for g in config.groups]
    repeats = repeat_scores(decoded, row_group=row_group, transitions=law, groups=labels)
    tables, marginal_tables = [], []
    for g, group in enumerate(labels):
        rows = torch.nonzero(row_group == g).squeeze(1)
        joint = cell_counts(committed[rows], vocab_size=vocab).unsqueeze(0)
        tables.append(CountTable(group, JOINT, joint, joint_law[g : g + 1]))
        tables += [
            CountTable(group, position_name(j), transitions[g, j], law[g])
            for j in range(config.gamma + 1)
        ]
        for position in range(m if marginals else 0):
            marginal = marginal_probs(joint_law[g], position=position, m=m, vocab_size=vocab)
            counts = cell_counts(committed[rows, position : position + 1], vocab_size=vocab)
            marginal_tables.append(
                (
                    position,
                    CountTable(
                        group, position_name(position), counts.unsqueeze(0), marginal.unsqueeze(0)
                    ),
                )
            )
    return HeadTables(problem.target.name, head_kind, tables, repeats, marginal_tables)


def statistics_of(tables: HeadTables) -> tuple[list[Statistic], list[Marginal]]:
    """The family tests (joint, positions, repeat; group by group) and the marginals."""
    statistics: list[Statistic] = []
    for table in tables.chi2_tables:
        fit = pearson_fit(table.observed, expected_probs=table.expected_probs)
        statistics.append(
            Statistic(
                target=tables.target,
                head=tables.head,
                group=table.group,
                test=table.test,
                statistic=fit.chi2,
                dof=fit.dof,
                p_value=fit.p_value,
                observations=fit.observations,
                impossible=fit.impossible,
            )
        )
    statistics += [
        Statistic(
            target=tables.target,
            head=tables.head,
            group=score.group,
            test=REPEAT,
            statistic=score.z,
            dof=0,
            p_value=score.p_value,
            observations=score.events,
            impossible=score.impossible,
        )
        for score in tables.repeats
    ]
    marginals = []
    for position, table in tables.marginal_tables:
        fit = pearson_fit(table.observed, expected_probs=table.expected_probs)
        marginals.append(
            Marginal(
                tables.target, tables.head, table.group, position, fit.chi2, fit.dof, fit.p_value
            )
        )
    return statistics, marginals
