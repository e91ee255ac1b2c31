"""Checks: pure functions of a case run that say whether a result is right.

Self-consistency (needs no second implementation), lossless tier: the call ran,
its outputs are written and valid, nothing past the live batch was written, its
inputs are unchanged (``buffers``), teacher forcing, greedy rows are the argmax,
support (``walk``), the recorded draws explain the tokens wherever they are
replayable and every call draws fresh noise (``noise``), and every replay of a
server's life holds to them (``life``). Drop-in tier: the reference's noise budget,
one walk, and (the differential check) equality with the single-pass reference.
Every failing check names the rows, steps and values that show it.

Each check is declared once, in ``CHECKS`` (``registry``): its function, its tier,
what it needs before it judges and its code in the checks table. The order of
``CHECKS`` is the order checks run and are listed in; ``CHECK_TIERS`` and
``run_checks`` are built from it.
"""

from __future__ import annotations

from harness.pipeline.check_result import CheckResult, Status, Tier
from harness.pipeline.checks.registry import (
    CHECK_CODES,
    CHECK_TIERS,
    CHECKS,
    Check,
    Needs,
    run_checks,
    tier_of,
)
from harness.pipeline.checks.subject import Subject

__all__ = [
    "CHECKS",
    "CHECK_CODES",
    "CHECK_TIERS",
    "Check",
    "CheckResult",
    "Needs",
    "Status",
    "Subject",
    "Tier",
    "run_checks",
    "tier_of",
]
