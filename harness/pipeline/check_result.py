"""What a check returns: a named outcome, its tier, and the positions that show it.

Each check belongs to one of two tiers. ``lossless`` checks are the verifier's
contract — a failure is a correctness bug. ``drop_in`` checks say whether a
sampler is bit-compatible with the reference (same noise budget, one walk, same
tokens and logits); a lossless sampler of another design fails them legitimately.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

Status = Literal["pass", "fail", "skip"]
Tier = Literal["lossless", "drop_in"]
MAX_LISTED = 6  # positions named in a failure message
OUTSIDE_CONTRACT = "outside this contract"  # a case its calling convention cannot express

CHECK_TIERS: dict[str, Tier] = {
    "ran": "lossless",
    "outputs_written": "lossless",
    "no_writes_outside_batch": "lossless",
    "inputs_unchanged": "lossless",
    "state_restored": "lossless",
    "teacher_forcing": "lossless",
    "noise_replay": "lossless",
    "greedy_consistency": "lossless",
    "greedy_rows_argmax": "lossless",
    "support": "lossless",
    "fresh_noise": "lossless",
    "life_replays": "lossless",
    "life_server_buffer": "lossless",
    "life_fresh_noise": "lossless",
    "life_drop_in": "drop_in",
    "noise_budget": "drop_in",
    "single_walk": "drop_in",
    "matches_reference": "drop_in",
}


def tier_of(check_name: str) -> Tier:
    """The tier of a check; a check this table does not know is held as lossless."""
    return CHECK_TIERS.get(check_name, "lossless")


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check on one implementation and case."""

    name: str
    status: Status
    detail: str = ""
    positions: tuple[tuple[int, int], ...] = field(default=())  # (row, step) that show it

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    @property
    def tier(self) -> Tier:
        return tier_of(self.name)


def passed(name: str, detail: str = "") -> CheckResult:
    return CheckResult(name, "pass", detail)


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", why)


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
