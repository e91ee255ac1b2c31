"""The suite's memo of oracle decodes (``tests/oracle_memo.py``): an answer is kept only
for exactly the same arguments and code, only when it judged something, and never while
a test must compute afresh."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.defaults import DEFAULT_ROWS
from harness.oracles.problem import StatsConfig
from harness.plugins.implementations import builtin_implementations
from tests.oracle_memo import FRESH, OracleMemo


@dataclass(frozen=True)
class Answer:
    error: str | None = None
    not_judged: str | None = None


def _judged(answer: tuple[Answer, None]) -> bool:
    return answer[0].error is None and answer[0].not_judged is None


@pytest.fixture
def memo(tmp_path: Path) -> OracleMemo:
    return OracleMemo(tmp_path)


def test_the_key_is_every_argument_and_the_sampler(memo: OracleMemo) -> None:
    fixed, legacy = builtin_implementations(("fixed", "legacy"))
    config = StatsConfig()
    key = memo.key("decode", fixed, (config, None, "chain"))
    assert key == memo.key("decode", fixed, (StatsConfig(), None, "chain"))
    others = {
        memo.key("decode", legacy, (config, None, "chain")),
        memo.key("decode", fixed, (StatsConfig(rows=DEFAULT_ROWS + 1), None, "chain")),
        memo.key("decode", fixed, (config, 5.0, "chain")),
        memo.key("decode", fixed, (config, None, "sglang-blockwise")),
        memo.key("power", fixed, (config, None, "chain")),
    }
    assert key not in others and len(others) == 5
    assert memo.key("decode", fixed, (lambda: None,)) is None  # does not pickle: never kept


def test_a_file_plugin_rewritten_in_place_is_another_key(memo: OracleMemo, tmp_path: Path) -> None:
    fixed = builtin_implementations(("fixed",))[0]
    plugin = tmp_path / "mine.py"
    plugin.write_text("A = 1\n")
    spec = type(fixed)(name="mine", sampler_class=fixed.sampler_class, spec=f"{plugin}:Mine")
    before = memo.key("decode", spec, ())
    plugin.write_text("A = 2\n")
    assert memo.key("decode", spec, ()) != before


def test_a_judged_answer_is_computed_once_and_a_failed_one_every_time(memo: OracleMemo) -> None:
    calls: list[str] = []

    def compute(answer: Answer) -> tuple[Answer, None]:
        calls.append("x")
        return answer, None

    for _ in range(3):
        assert memo.answer("judged", lambda: compute(Answer()), keep=_judged) == (Answer(), None)
    failed = Answer(error="raised")
    for _ in range(2):
        assert memo.answer("failed", lambda: compute(failed), keep=_judged) == (failed, None)
    assert len(calls) == 1 + 2 and memo.hits == 2


def test_a_test_that_must_compute_afresh_never_reads_the_memo(memo: OracleMemo) -> None:
    calls: list[str] = []
    memo.answer("k", lambda: calls.append("x") or (Answer(), None), keep=_judged)
    before, FRESH.now = FRESH.now, True
    try:
        memo.answer("k", lambda: calls.append("x") or (Answer(), None), keep=_judged)
    finally:
        FRESH.now = before
    assert len(calls) == 2 and memo.hits == 0
