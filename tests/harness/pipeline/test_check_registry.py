"""The check registry is the one list of checks: the docs' check tables, the tiers, the
table codes and the verdicts' reading of a skip all follow it."""

from __future__ import annotations

import re

import pytest

from harness.pipeline.check_result import TIER_LABELS, Skip, Tier
from harness.pipeline.checks import CHECK_CODES, CHECK_TIERS, CHECKS
from harness.pipeline.verdicts import implementation_verdict
from tests.helpers import REPO_ROOT

TABLE_ROW = re.compile(r"^\| `(\w+)` \| ([\w-]+) \|", re.MULTILINE)


def documented_tiers(doc: str, heading: str) -> dict[str, Tier]:
    """The ``| `check` | tier | ... |`` rows of the table under ``heading`` in ``doc``."""
    text = (REPO_ROOT / "docs" / doc).read_text()
    section = text[text.index(heading) :].split("\n## ")[0]
    return {name: Tier.from_label(tier) for name, tier in TABLE_ROW.findall(section)}


@pytest.mark.parametrize(
    ("doc", "heading"),
    [("design.md", "## The checks"), ("verdicts.md", "## The checks and their tiers")],
)
def test_the_docs_check_table_lists_exactly_the_registered_checks_and_tiers(
    doc: str, heading: str
) -> None:
    assert documented_tiers(doc, heading) == CHECK_TIERS


def test_names_and_codes_are_declared_once() -> None:
    names = [check.name for check in CHECKS]
    assert len(set(names)) == len(names)
    assert len(set(CHECK_CODES.values())) == len(CHECK_CODES)
    assert set(CHECK_CODES) <= set(names)


def test_a_check_is_named_after_its_function() -> None:
    for check in CHECKS:
        assert check.function.__name__ == f"check_{check.name}", check.name


def test_tier_words_round_trip_and_unknown_words_name_the_expected_ones() -> None:
    assert TIER_LABELS == ("lossless", "drop-in")
    for tier in Tier:
        assert Tier.from_label(tier.label) is tier
        assert Tier.from_label(tier) is tier
    assert Tier.DROP_IN == "drop_in" and f"{Tier.DROP_IN}" == "drop_in"
    with pytest.raises(ValueError, match=r"one of \('lossless', 'drop-in'\), got 'drop_in '"):
        Tier.from_label("drop_in ")
    assert Tier.DROP_IN.includes(Tier.LOSSLESS) and Tier.DROP_IN.includes(Tier.DROP_IN)
    assert Tier.LOSSLESS.includes(Tier.LOSSLESS) and not Tier.LOSSLESS.includes(Tier.DROP_IN)


def _record(noise_replay: dict[str, object]) -> dict[str, object]:
    check = {"name": "noise_replay", "tier": "lossless", "positions": [], **noise_replay}
    return {"label": "a case", "implementations": {"impl": {"checks": [check]}}}


def test_replayable_follows_the_skip_code_not_the_words_of_the_detail() -> None:
    hidden = _record({"status": "skip", "detail": "anything", "skip": Skip.NOT_VISIBLE})
    worded = _record({"status": "skip", "detail": "not replayable", "skip": Skip.NOT_RECORDED})
    assert not implementation_verdict([hidden], "impl").replayable
    assert implementation_verdict([worded], "impl").replayable
