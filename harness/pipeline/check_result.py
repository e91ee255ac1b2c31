"""What a check returns: a named outcome, its tier, why it skipped, and the positions
that show it.

Each check belongs to one of two tiers. ``lossless`` checks are the verifier's
contract — a failure is a correctness bug. ``drop_in`` checks say whether a
sampler is bit-compatible with the reference (same noise budget, one walk, same
tokens and logits); a lossless sampler of another design fails them legitimately.
A skip carries a ``Skip`` code, so that whoever needs to know why a check did not
judge reads the code, never the detail's words. Importable without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

Status = Literal["pass", "fail", "skip"]
MAX_LISTED = 6  # positions named in a failure message


class Word(str, Enum):
    """A closed set of words: each member is its word (equal to it, formatted as it,
    written as it in JSON)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Tier(Word):
    """What a check's failure costs, and what an implementation can be held to. The
    value is the word records use (``"drop_in"``); ``label`` the one people read and
    type (``drop-in``)."""

    LOSSLESS = "lossless"
    DROP_IN = "drop_in"

    @property
    def label(self) -> str:
        return self.value.replace("_", "-")

    def includes(self, tier: Tier) -> bool:
        """Whether being held to this tier means passing the checks of ``tier``: drop-in
        is lossless and more."""
        return tier is Tier.LOSSLESS or self is Tier.DROP_IN

    @classmethod
    def from_label(cls, word: str) -> Tier:
        """The tier a person names (``lossless`` or ``drop-in``); a ``Tier`` as it is."""
        for tier in cls:
            if word in (tier, tier.label):
                return tier
        raise ValueError(f"require must be one of {TIER_LABELS}, got {word!r}")


TIER_LABELS = tuple(tier.label for tier in Tier)  # the words --require takes


class Skip(Word):
    """Why a check skipped, as its record's ``skip`` field says it."""

    NOT_APPLICABLE = "not_applicable"  # the case gives it nothing to judge
    NO_OUTPUT = "no_output"  # the call left no output to judge
    NOT_VISIBLE = "not_visible"  # draws not visible or not replayable: the oracle decides
    NOT_RECORDED = "not_recorded"  # draws were seen but their values not recorded
    NOT_RUN = "not_run"  # what it judges did not happen (no second call, no life)
    OUTSIDE_CONTRACT = "outside_contract"  # the case is outside the sampler's convention


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one implementation and case."""

    name: str
    status: Status
    detail: str = ""
    positions: tuple[tuple[int, int], ...] = field(default=())  # (row, step) that show it
    skip: Skip | None = None  # why it skipped (``None`` unless the status is "skip")

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def passed(name: str, detail: str = "") -> CheckResult:
    return CheckResult(name, "pass", detail)


def skipped(name: str, why: str, *, code: Skip) -> CheckResult:
    return CheckResult(name, "skip", why, skip=code)


def failed(name: str, detail: str, mask: torch.Tensor | None = None) -> CheckResult:
    """A failure; with a ``[bs, gamma]`` mask, the positions are listed in the detail."""
    positions: tuple[tuple[int, int], ...] = ()
    if mask is not None:
        where = mask.nonzero().tolist()
        positions = tuple((int(b), int(k)) for b, k in where)
        listed = ", ".join(f"(row {b}, step {k})" for b, k in positions[:MAX_LISTED])
        more = f" and {len(positions) - MAX_LISTED} more" if len(positions) > MAX_LISTED else ""
        detail = f"{detail} at {listed}{more}"
    return CheckResult(name, "fail", detail, positions)
