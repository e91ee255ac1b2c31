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
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

Status = Literal["pass", "fail", "skip"]
MAX_LISTED = 6  # positions named in a failure message


class Tier(StrEnum):
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


class Skip(StrEnum):
    """Why a check skipped, as its record's ``skip`` field says it."""

    NOT_APPLICABLE = "not_applicable"  # the case gives it nothing to judge
    NO_OUTPUT = "no_output"  # the call left no output to judge
    NOT_VISIBLE = "not_visible"  # draws not visible or not replayable: the oracle decides
    NOT_RECORDED = "not_recorded"  # draws were seen but their values not recorded
    NOT_RUN = "not_run"  # what it judges did not happen (no second call, no life)


CHECK_TIERS: dict[str, Tier] = {
    "ran": Tier.LOSSLESS,
    "outputs_written": Tier.LOSSLESS,
    "no_writes_outside_batch": Tier.LOSSLESS,
    "inputs_unchanged": Tier.LOSSLESS,
    "state_restored": Tier.LOSSLESS,
    "teacher_forcing": Tier.LOSSLESS,
    "noise_replay": Tier.LOSSLESS,
    "greedy_consistency": Tier.LOSSLESS,
    "greedy_rows_argmax": Tier.LOSSLESS,
    "support": Tier.LOSSLESS,
    "fresh_noise": Tier.LOSSLESS,
    "life_replays": Tier.LOSSLESS,
    "life_server_buffer": Tier.LOSSLESS,
    "life_fresh_noise": Tier.LOSSLESS,
    "life_drop_in": Tier.DROP_IN,
    "noise_budget": Tier.DROP_IN,
    "single_walk": Tier.DROP_IN,
    "matches_reference": Tier.DROP_IN,
}


def tier_of(check_name: str) -> Tier:
    """The tier of a check; a check this table does not know is held as lossless."""
    return CHECK_TIERS.get(check_name, Tier.LOSSLESS)


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

    @property
    def tier(self) -> Tier:
        return tier_of(self.name)


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
