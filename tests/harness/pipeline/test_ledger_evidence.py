"""What the ledger's evidence says, word for word, on the case kinds whose evidence
could be misread: each class names what happened in legacy's call, in the words of
``docs/design.md`` ("The ledger")."""

from __future__ import annotations

from typing import Any

from harness.case import Case, make_case
from harness.pipeline.compare import evaluate_run
from harness.pipeline.ledger import LedgerEntry
from harness.pipeline.runner import run_case
from harness.plugins.implementations import builtin_implementations

SHAPE = {"bs": 2, "gamma": 4, "vocab_size": 32, "markov_rank": 4, "hidden_size": 16}


def _ledger(case: Case) -> LedgerEntry:
    run = run_case(case, builtin_implementations(("legacy", "fixed")))
    ledger = evaluate_run(run, require_observable=True).ledger
    assert ledger is not None and ledger.holds, ledger
    return ledger


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
