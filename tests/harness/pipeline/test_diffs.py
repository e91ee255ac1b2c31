"""``max |diff|`` in a failing check's detail: a number where one is defined, and where
an entry is infinite, what the maximum leaves out and why (never ``nan``)."""

from __future__ import annotations

import math

import torch

from harness.case import make_case
from harness.pipeline.checks import Subject
from harness.pipeline.checks.walk import check_teacher_forcing
from harness.pipeline.diffs import max_abs_diff_text
from harness.pipeline.runner import run_case
from harness.plugins.implementations import builtin_implementations

INF = math.inf


def test_finite_entries_give_the_plain_maximum() -> None:
    actual = torch.tensor([[1.0, 2.0, 3.0]])
    assert max_abs_diff_text(actual, torch.tensor([[1.0, 2.5, 2.0]])) == "max |diff| 1"


def test_minus_inf_on_both_sides_is_equal_and_left_out_of_the_maximum() -> None:
    # a reduced draft vocabulary: the same columns are -inf in both tensors
    actual = torch.tensor([[-INF, 2.0, -INF, 3.0]])
    expected = torch.tensor([[-INF, 2.25, -INF, 3.0]])
    assert max_abs_diff_text(actual, expected) == (
        "max |diff| 0.25 where both sides are finite; -inf on both sides at 2 entries, equal"
    )


def test_minus_inf_against_a_finite_value_is_counted_with_the_finite_maximum() -> None:
    actual = torch.tensor([[-INF, 2.0, 1.0]])
    expected = torch.tensor([[0.5, 2.5, 1.0]])
    assert max_abs_diff_text(actual, expected) == (
        "max |diff| 0.5 where both sides are finite; "
        "-inf against a finite value at 1 entry, |diff| inf"
    )


def test_nan_and_no_finite_entry_say_the_maximum_is_undefined() -> None:
    actual = torch.tensor([[-INF, math.nan]])
    expected = torch.tensor([[1.0, 1.0]])
    assert max_abs_diff_text(actual, expected) == (
        "max |diff| undefined: -inf against a finite value at 1 entry, |diff| inf; NaN at 1 entry"
    )


def test_legacy_teacher_forcing_on_a_reduced_vocabulary_states_a_finite_maximum() -> None:
    case = make_case(bs=2, gamma=4, vocab_size=32, hidden_size=16, markov_rank=4, draft_vocab=8)
    run = run_case(case, builtin_implementations(("legacy",)))
    detail = check_teacher_forcing(Subject(run, run.results["legacy"])).detail
    assert "nan" not in detail
    assert detail.startswith(
        "corrected_out differs from the logits rebuilt from the emitted tokens (max |diff| "
    )
    # 24 of the 32 columns are off the draft vocabulary at each of the 2 x 4 positions
    assert "where both sides are finite; -inf on both sides at 192 entries, equal)" in detail
