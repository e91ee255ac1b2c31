"""How many positions and how many rejections a line names: one limit each, whichever
message names them (a check's failure and the ledger's evidence; the statistical verdict
and the oracle's table)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import torch

from harness.pipeline import ledger
from harness.pipeline.check_result import MAX_LISTED, failed
from harness.pipeline.verdicts import MAX_CARRIERS, Statistical
from harness.render import statistics as section


def test_a_failed_check_and_the_ledger_name_the_same_number_of_positions() -> None:
    mask = torch.ones(3, 4, dtype=torch.bool)  # [bs, gamma]: 12 positions
    more = f" and {12 - MAX_LISTED} more"
    check = failed("teacher_forcing", "differs", mask).detail
    evidence = ledger._positions(mask)
    assert check.endswith(more) and evidence.endswith(more)
    assert check.count("(row") == evidence.count("(row") == MAX_LISTED


def test_the_verdict_and_the_oracle_name_the_same_number_of_carriers() -> None:
    names = [f"vanilla/T=1/pos{j}" for j in range(MAX_CARRIERS + 3)]
    statistical = Statistical(ran=True, rejected=True, p_value=0.0, carried_by=tuple(names))
    rejections = [
        SimpleNamespace(target="far", head="vanilla", group="T=1", test=f"pos{j}", p_value=j * 1e-9)
        for j in range(len(names))
    ]
    result = cast(Any, SimpleNamespace(rejections=lambda: rejections))
    for line in (statistical.carriers(), section.carriers(result)):
        assert line.count("vanilla/") == MAX_CARRIERS and line.endswith(" and 3 more")
