"""Two laws of a request held against each other, row by row: what a release row says of
its verify target against its own server's non-speculative sampler.

``compare_rows`` holds one parameter set's rows of the two laws (each ``[rows, V]``, a
distribution a row): a row differs when the supports differ (exact) or when the
renormalised values differ by more than ``VALUE_TOLERANCE`` (both float32, the same math
in other orders). ``LawComparison`` gathers every set of the grid, alone and mixed, and
says the finding and what was not run. Each server reads its two laws from its own
package: ``harness.upstream.sglang_laws``, ``harness.upstream.vllm_laws``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from harness.upstream.releases.era_parts import ServerLaws


class ParameterSet(Protocol):
    """A request's parameters as the grid names them (``harness.oracles.defaults``)."""

    @property
    def temperature(self) -> float: ...
    @property
    def top_k(self) -> int: ...  # 0: none, 1: greedy
    @property
    def top_p(self) -> float: ...
    @property
    def min_p(self) -> float: ...
    @property
    def greedy(self) -> bool: ...

    @property
    def label(self) -> str: ...


VALUE_TOLERANCE = 1e-5  # float32, renormalised: far above rounding, far below any truncation


@dataclass(frozen=True)
class SetComparison:
    """One parameter set's rows in one batch: how many differ, and how."""

    batch: str  # "alone" or "mixed"
    group: str  # the set's label
    rows: int
    differing: int = 0
    kept_extra: int = 0  # tokens the verify target keeps that the server's sampler drops
    dropped_extra: int = 0  # tokens it drops that the sampler keeps
    max_gap: float = 0.0
    not_run: str = ""  # why this batch's verify target could not be built here

    def line(self) -> str:
        return f"{self.group} ({self.batch}): {self.counts()}"

    def counts(self) -> str:
        """How its rows differ, in words (why not run, where it was not)."""
        if self.not_run:
            return f"not run: {self.not_run}"
        return (
            f"{self.differing} of {self.rows} rows differ; the verify target keeps "
            f"{self.kept_extra} token(s) its sampler drops and drops {self.dropped_extra} it "
            f"keeps (largest gap {self.max_gap:.3g})"
        )


@dataclass(frozen=True)
class LawComparison:
    """Every set of the grid, alone and mixed, for one release."""

    laws: ServerLaws
    sets: tuple[SetComparison, ...]
    notes: tuple[str, ...] = ()  # what of the two laws' code did not run, a line each

    @property
    def differing(self) -> tuple[SetComparison, ...]:
        return tuple(s for s in self.sets if s.differing)

    @property
    def judged(self) -> list[str]:
        return [f"{s.group} ({s.batch})" for s in self.sets if not s.not_run]

    def evidence(self) -> str:
        """The finding's words: which function differs from which, and where (a set that
        differs alike alone and mixed named once, with both batches)."""
        by: dict[str, list[SetComparison]] = {}
        for s in self.differing:
            by.setdefault(f"{s.group}: {s.counts()}", []).append(s)
        lines = []
        for alike in by.values():
            batches = ", ".join(s.batch for s in alike)
            lines.append(f"{alike[0].group} ({batches}): {alike[0].counts()}")
        return (
            f"its DSpark verify's target ({self.laws.verify_target}, {self.laws.branch}) is "
            f"not its server's own law ({self.laws.sampler}): " + "; ".join(lines)
        )

    def not_run(self) -> list[str]:
        """What of the grid was not run, a line a batch and reason, then a line a note."""
        by: dict[tuple[str, str], list[str]] = {}
        for s in self.sets:
            if s.not_run:
                by.setdefault((s.batch, s.not_run), []).append(s.group)
        return [
            f"its verify target against its sampler, {batch} batch: {', '.join(groups)}: "
            f"not run: {why}"
            for (batch, why), groups in by.items()
        ] + [f"its verify target against its sampler: {note}" for note in self.notes]


def compare_rows(
    batch: str, member: ParameterSet, *, target: torch.Tensor, server: torch.Tensor
) -> SetComparison:
    target = target / target.sum(-1, keepdim=True)
    kept, allowed = target > 0, server > 0
    extra, dropped = kept & ~allowed, allowed & ~kept
    gap = (target - server).abs().amax(-1)
    differs = extra.any(-1) | dropped.any(-1) | (gap > VALUE_TOLERANCE)
    return SetComparison(
        batch,
        member.label,
        rows=target.shape[0],
        differing=int(differs.sum()),
        kept_extra=int(extra.sum()),
        dropped_extra=int(dropped.sum()),
        max_gap=float(gap.max()),
    )


__all__ = ["VALUE_TOLERANCE", "LawComparison", "ParameterSet", "SetComparison", "compare_rows"]
