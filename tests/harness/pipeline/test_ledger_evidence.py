"""What the ledger's evidence says, word for word, on the case kinds whose evidence
could be misread: each class names what happened in legacy's call, in the words of
``docs/design.md`` ("The ledger")."""

from __future__ import annotations

from typing import Any

from harness.case import Case, make_case
from harness.pipeline.compare import evaluate_run
from harness.pipeline.ledger import LedgerEntry
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins.broken_samplers import RaisingSampler

SHAPE = {"bs": 2, "gamma": 4, "vocab_size": 32, "markov_rank": 4, "hidden_size": 16}


def _ledger(case: Case) -> LedgerEntry:
    run = run_case(case, builtin_implementations(("legacy", "fixed")))
    ledger = evaluate_run(run, require_observable=True).ledger
    assert ledger is not None and ledger.holds, ledger
    return ledger


def _no_anchor(**options: Any) -> Case:
    return make_case(**{**SHAPE, **options}, sample_from_anchor=False)


def _greedy_fold(**options: Any) -> Case:
    return make_case(**SHAPE, greedy_rows=(True, True), folded_sampling=False, **options)


def test_the_fused_path_is_a_discarded_result_with_one_extra_walk_not_a_double_walk() -> None:
    ledger = _ledger(_greedy_fold(fused_greedy=True))
    assert ledger.observed == {"fused_result_discarded"}
    assert ledger.evidence == {
        "fused_result_discarded": (
            "legacy computes the fused result and discards it, emitting the tokens of 1 walk "
            "run after it; fixed emits the fused result (1 extra walk vs none)"
        )
    }


def test_the_loop_path_is_a_double_walk() -> None:
    ledger = _ledger(_greedy_fold())
    assert ledger.observed == {"double_walk"}
    assert ledger.evidence == {"double_walk": "2 walks vs 1"}


def test_a_hidden_state_head_rejecting_the_wrong_view_is_the_documented_bug() -> None:
    # 2 requests x (4 + 1) rows x H=16 viewed as [2, 4, -1]: rows of 5 * 16 / 4 = 20
    ledger = _ledger(_no_anchor(head_kind="gated"))
    assert ledger.evidence == {
        "legacy_raises": (
            "ValueError: the gated Markov head needs hidden_states of shape (2, 4, 16) "
            "[bs, L, H], got (2, 4, 20) — the documented bug: legacy's first walk takes "
            "hidden_states.view(bs, gamma, -1), whose rows in the layout with the anchor row "
            "(5 rows per request) are 20 wide, not H=16: the gated head reads hidden states "
            "and rejects them"
        )
    }


def test_a_view_that_fails_when_gamma_does_not_divide_h_is_the_documented_bug() -> None:
    ledger = _ledger(_no_anchor(hidden_size=18))
    assert ledger.evidence == {
        "legacy_raises": (
            "RuntimeError: shape '[2, 4, -1]' is invalid for input of size 180 — the "
            "documented bug: legacy's first walk takes hidden_states.view(bs, gamma, -1), "
            "which fails in the layout with the anchor row (5 rows per request) when gamma "
            "does not divide H (gamma=4, H=18)"
        )
    }


def test_a_raise_the_bug_does_not_predict_is_not_called_the_documented_bug() -> None:
    raising = Implementation("raising", RaisingSampler, "tests.plugins.broken_samplers")
    case = _no_anchor(head_kind="gated")  # the bug predicts a ValueError here
    run = run_case(case, [raising, *builtin_implementations(("fixed",))])
    ledger = evaluate_run(run, require_observable=True, pair=("raising", "fixed")).ledger
    assert ledger is not None and ledger.holds
    assert ledger.evidence == {"legacy_raises": "RuntimeError: planted failure"}
