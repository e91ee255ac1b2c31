"""Every registered check has its phrase in the checks legend, and the legend explains
every code the checks table can show, the life checks' among them."""

from __future__ import annotations

from typing import Any

import pytest

from harness.options import RunOptions
from harness.pipeline.check_phrases import CHECK_PHRASES
from harness.pipeline.checks import CHECK_CODES, CHECKS
from harness.pipeline.compare import compare
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import builtin_implementations
from harness.render.sections import Table
from harness.render.verdicts import comparison_sections
from tests.helpers import judged_records


def test_every_registered_check_has_one_short_phrase_and_no_other_name_has_one() -> None:
    assert set(CHECK_PHRASES) == {check.name for check in CHECKS}
    assert all(0 < len(phrase) <= 80 for phrase in CHECK_PHRASES.values())


@pytest.fixture(scope="module")
def legend() -> Table:
    cases = [c for c in standard_matrix(seed=0) if c.name == "folded-sampled/vanilla"]
    records: list[Any] = compare(cases, builtin_implementations(), options=RunOptions())
    section = next(
        s
        for s in comparison_sections(judged_records(records))
        if s.title == "Checks per implementation"
    )
    return next(b for b in section.blocks if isinstance(b, Table) and b.header[0] == "code")


def test_the_legend_explains_every_code_in_the_order_the_checks_run(legend: Table) -> None:
    assert [row[1] for row in legend.rows] == [check.name for check in CHECKS]
    for code, name, _tier, phrase in legend.rows:
        assert code == CHECK_CODES.get(name, name)  # what a cell of the table shows
        assert phrase == CHECK_PHRASES[name]


def test_the_life_checks_read_as_what_they_hold(legend: Table) -> None:
    rows = {row[1]: row for row in legend.rows}
    assert rows["life_replays"] == (
        "life_replays",
        "life_replays",
        "lossless",
        "every replay of the case's life passes every lossless per-call check",
    )
    assert rows["life_drop_in"] == (
        "life_drop_in",
        "life_drop_in",
        "drop-in",
        "every replay of the life keeps the noise budget and the single walk",
    )
