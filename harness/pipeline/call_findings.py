"""What the exact per-call checks found on the calls the statistical oracle's decodes
made (docs/statistics.md, "Every call of the oracle, held to the per-call checks"), as
plain values: ``CallFinding`` (one check's first violation in one decode, with its
round, call, row, step and token, and how many positions of that decode fail it) and
``HeldCalls`` (how many calls and positions were held to which check, and the findings).
``harness.oracles.percall`` computes them; the statistical part of a lossless verdict
(``harness.pipeline.verdicts.Statistical``) carries them: one finding is a defect,
whatever the p-values say."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ORACLE_SCOPE = "oracle"  # a per-call check seen on the oracle's calls, not on a case


@dataclass(frozen=True)
class CallFinding:
    """The first position of one decode that fails one per-call check."""

    check: str  # the registry's name of the check (``harness.pipeline.checks``)
    target: str
    head: str
    verifier: str
    round: int  # the draft-verify round, from 0
    call: int  # the sampler's call in the decode, from 0
    row: int  # the decode's row
    slot: int  # the row's slot in the call
    step: int  # the draft step, from 0
    token: int  # the token emitted at (row, step)
    expected: str  # what the check expected there, in words
    positions: int  # positions of this decode that fail the check
    calls: int  # calls of this decode with such a position

    def where(self) -> str:
        return (
            f"{self.target}/{self.head} under {self.verifier}: round {self.round}, call "
            f"{self.call}, row {self.row} (slot {self.slot}), step {self.step}"
        )

    def describe(self) -> str:
        """``check [oracle]: where: token t: what was expected (how many)``."""
        return (
            f"{self.check} [{ORACLE_SCOPE}]: {self.where()}: token {self.token}: {self.expected} "
            f"({self.positions} position(s) in {self.calls} call(s) of this decode)"
        )


@dataclass(frozen=True)
class HeldCalls:
    """The oracle's calls held to the per-call checks: how many calls, per check how many
    draft positions, and every finding (one per check and decode)."""

    calls: int = 0
    positions: dict[str, int] = field(default_factory=dict)  # check: positions held to it
    findings: tuple[CallFinding, ...] = ()

    @classmethod
    def merged(cls, parts: Sequence[HeldCalls]) -> HeldCalls:
        positions: dict[str, int] = {}
        for part in parts:
            for check, count in part.positions.items():
                positions[check] = positions.get(check, 0) + count
        return cls(
            calls=sum(part.calls for part in parts),
            positions=positions,
            findings=tuple(f for part in parts for f in part.findings),
        )

    @property
    def failing_positions(self) -> int:
        return sum(f.positions for f in self.findings)

    def describe(self) -> str:
        """What was held, in one clause: ``N calls: check P positions, ...``."""
        if not self.calls:
            return "no call held to the per-call checks"
        held = ", ".join(f"{check} {count:,}" for check, count in self.positions.items())
        return f"{self.calls:,} calls held to the per-call checks (positions: {held})"
