"""The statistical oracle's verdict on one implementation, as data: ``StatsResult`` (the
family of tests with Holm's verdict in each, what it ran, its detection bounds), and
what a pass leaves open (``best_bounds``, ``not_ruled_out``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.oracle_cut import ORACLE_LAWS, OUR_LAW, OracleCut
from harness.oracles.fits import JOINT, Marginal, Statistic, position_name
from harness.oracles.power import DetectionBound
from harness.pipeline.call_findings import CallFinding, HeldCalls
from harness.pipeline.coverage import BoundRow
from harness.pipeline.verdicts import Statistical
from harness.wire import answer_types
from reference.decode import DecodeResult
from reference.verifier import CHAIN_VERIFIER


@dataclass(frozen=True)
class Stage:
    """One sequential stage after the family: its strongest test decoded again on fresh
    rows (``harness.oracles.sequential``)."""

    index: int  # 1, 2, ...
    target: str
    head: str
    group: str
    test: str
    rows: int  # rows per head decoded by this stage
    seed: int
    p_value: float
    level: float  # what p is compared with: the stated alpha
    rejected: bool

    def where(self) -> str:
        return f"{self.target}/{self.head}/{self.group}/{self.test}"

    def describe(self) -> str:
        found = "REJECTED" if self.rejected else "not decisive"
        return (
            f"stage {self.index}: {self.where()} on {self.rows:,} fresh rows (seed "
            f"{self.seed}), p={self.p_value:.3g} against {self.level:g}: {found}"
        )


@dataclass(frozen=True)
class StatsResult:
    """The oracle's verdict on one implementation over the whole family of tests."""

    name: str
    rows: dict[str, int]  # per head kind, by target
    alpha: float  # family-wise level
    family_size: int
    statistics: tuple[Statistic, ...]  # Holm's verdict in each ``rejected``
    marginals: tuple[Marginal, ...]
    mean_accepted_length: dict[str, dict[str, float]]  # by target, then head kind
    error: str | None = None  # the implementation raised: no verdict on the distribution
    bounds: tuple[DetectionBound, ...] = ()  # per target and position, at this run's rows
    verifier: str = CHAIN_VERIFIER.name  # whose verification committed the tokens
    not_judged: str | None = None  # why it was not judged (the time limit): never a defect
    cuts: tuple[OracleCut, ...] = ()  # what cut the config it ran (``scope_under``)
    heads_not_run: tuple[tuple[str, str], ...] = ()  # outside its contract: (head kind, why)
    # every decode on its server's own plumbing (True), on independent streams (False);
    # None: nothing decoded
    shared_noise: bool | None = None
    server: str | None = None  # the released server whose plumbing it ran on
    law: str = OUR_LAW  # the law its exact laws followed (ORACLE_LAWS)
    held_calls: HeldCalls = field(default_factory=HeldCalls)  # its calls, held per call
    # the level Holm's correction ran at: alpha less what the sequential stages may spend
    first_alpha: float | None = None
    stages: tuple[Stage, ...] = ()  # the strongest test on fresh rows, when it was unsure
    wall_s: float = field(default=0.0, compare=False)

    @property
    def rejected(self) -> bool:
        return any(s.rejected for s in self.statistics) or any(s.rejected for s in self.stages)

    @property
    def ran(self) -> bool:
        """Whether any row was decoded and judged (not when every head is outside its
        contract)."""
        return bool(self.statistics) or self.error is not None or self.not_judged is not None

    @property
    def passed(self) -> bool:
        """Judged, not rejected, and no call of its decodes failed a per-call check."""
        return (
            self.ran
            and self.error is None
            and self.not_judged is None
            and not self.rejected
            and not self.held_calls.findings
        )

    def scope(self) -> str:
        """What it ran short of the config it was asked for, as one clause ("" when
        nothing was cut or left out)."""
        parts = [f"{kind} head not run ({why})" for kind, why in self.heads_not_run]
        cuts = self.cuts if self.rows else ()  # nothing ran: no rows were cut
        for cut in cuts:  # each as it declares itself: the fewest rows of them all ran
            rounds = "" if cut.rounds is None else f", {cut.rounds} rounds per row"
            only = "" if cut.targets is None else f"{', '.join(cut.targets)} target only, "
            only += "" if cut.heads is None else f"the {', '.join(cut.heads)} head only, "
            kept = (
                f"at most {cut.rows} rows per head{rounds}"
                if cut.truncated
                else f"the temperature groups only{rounds}"  # its rows are the config's
            )
            parts.append(f"cut by {cut.by}: {only}{kept}")
        if cuts:
            ran = ", ".join(f"{target} {rows}" for target, rows in self.rows.items())
            parts.append(f"ran {ran} rows per head")
        return "; ".join(parts)

    @property
    def p_value(self) -> float:
        """The family's adjusted p-value: the family rejects exactly when it is below
        ``first_alpha`` (alpha, less what the stages may spend)."""
        if not self.statistics:
            return math.nan
        return min(1.0, self.family_size * min(s.p_value for s in self.statistics))

    @property
    def test_level(self) -> float:
        """Holm's first threshold: what the smallest p-value is compared with."""
        first = self.alpha if self.first_alpha is None else self.first_alpha
        return first / max(1, self.family_size)

    @property
    def impossible(self) -> int:
        return sum(s.impossible for s in self.statistics if s.test == JOINT)

    def rejections(self) -> list[Statistic]:
        return [s for s in self.statistics if s.rejected]

    def rejected_at_position(self, position: int) -> bool:
        """Whether a test confined to one position rejects: its transition test, or its
        marginal at the family's first threshold."""
        return any(s.rejected for s in self.statistics if s.test == position_name(position)) or any(
            m.p_value < self.test_level for m in self.marginals if m.position == position
        )

    def carrier_names(self) -> tuple[str, ...]:
        """``target/head/group/test`` of each rejection, strongest first (a stage's:
        ``... at stage k``)."""
        staged = tuple(f"{s.where()} at stage {s.index}" for s in self.stages if s.rejected)
        return (*staged, *(where(s) for s in sorted(self.rejections(), key=_by_p)))

    def stages_note(self) -> str:
        """What the sequential stages did, one clause each (``""``: no stage ran)."""
        if not self.stages:
            return ""
        return "sequential " + "; ".join(s.describe() for s in self.stages)

    def statistical(self) -> Statistical:
        """This result as the lossless verdict takes it (what it ran short of the config
        in ``scope``; not run at all when no head was inside its contract)."""
        scope = self.scope()
        if not self.ran:
            return Statistical(ran=False, scope=scope)
        if self.not_judged is not None:
            return Statistical(ran=True, not_judged=self.not_judged, scope=scope)
        if self.error is not None:
            return Statistical(ran=True, error=self.error, scope=scope)
        p = None if math.isnan(self.p_value) else self.p_value
        return Statistical(
            ran=True,
            rejected=self.rejected,
            p_value=p,
            carried_by=self.carrier_names(),
            not_ruled_out="" if self.rejected else not_ruled_out(best_bounds(self.bounds)),
            scope=scope,
            randomness=self.randomness(),
            call_findings=self.held_calls.findings,
            stages=self.stages_note(),
        )

    def randomness(self) -> str:
        """What it was judged on, where that is a released server's own randomness, and
        against what, where that is a server's own law."""
        parts = []
        if self.shared_noise and self.server is not None:
            parts.append(f"judged on {self.server}'s own randomness")
        if self.law != OUR_LAW:
            parts.append(self.law_judged())
        return "; ".join(parts)

    def law_judged(self) -> str:
        """The law its rows were judged against, where that is a server's own ("" ours)."""
        return "" if self.law == OUR_LAW else f"judged against {ORACLE_LAWS[self.law]}"

    def to_json_dict(self) -> dict[str, Any]:
        """Everything but the wall time, so a report's JSON is the same on every run."""
        body = asdict(self)
        del body["wall_s"]
        body.update(
            ran=self.ran,
            rejected=self.rejected,
            passed=self.passed,
            scope=self.scope(),
            p_value=self.p_value,
            test_level=self.test_level,
        )
        return body


def best_bounds(bounds: Sequence[DetectionBound]) -> tuple[BoundRow, ...]:
    """Per committed position, the bound at the target that sees the most there."""
    by_position: dict[int, DetectionBound] = {}
    for bound in bounds:
        held = by_position.get(bound.position)
        if held is None or _fraction_key(bound) < _fraction_key(held):
            by_position[bound.position] = bound
    return tuple(
        BoundRow(
            position=b.position,
            fraction=b.fraction,
            confined_fraction=b.confined_fraction,
            target=b.target,
            rows=b.rows,
        )
        for _, b in sorted(by_position.items())
    )


def _fraction_key(bound: DetectionBound) -> float:
    return math.inf if bound.fraction is None else bound.fraction


def not_ruled_out(bounds: Sequence[BoundRow]) -> str:
    """What a pass leaves open: defects smaller than the bound at each position."""
    if not bounds:
        return ""
    parts = ", ".join(
        f"pos {b.position} " + ("any" if b.fraction is None else f"{b.fraction:.2g}")
        for b in bounds
    )
    return (
        "not ruled out: a defect committing a fixed token on fewer than this fraction of "
        f"the rows at a committed position: {parts}"
    )


def _by_p(statistic: Statistic) -> float:
    return statistic.p_value


def where(statistic: Statistic) -> str:
    """``target/head/group/test``: where one test looked."""
    return f"{statistic.target}/{statistic.head}/{statistic.group}/{statistic.test}"


answer_types(
    StatsResult,
    Statistic,
    Marginal,
    DetectionBound,
    OracleCut,
    Stage,
    DecodeResult,
    HeldCalls,
    CallFinding,
)
