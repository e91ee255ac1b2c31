"""The modelled control flow of one call, and the ledger classes read off it.

One row per ledger case kind (``docs/design.md``, "The ledger"): what legacy and fixed
do, and the divergence classes that must follow. The counted work is held to the same
model in ``tests/harness/measure/test_work_model.py``; the observed divergences in
``tests/harness/test_harness_properties.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.case import Case, make_case
from harness.pipeline.control_flow import Pass, control_flow, legacy_pass1_error
from harness.pipeline.ledger import LEDGER_CLASSES, expected_classes

SHAPE = {"bs": 2, "gamma": 4, "vocab_size": 32, "markov_rank": 4}
SAMPLED, GREEDY = (False, True), (True, True)


def _case(*, hidden: int = 16, greedy: tuple[bool, ...] = SAMPLED, **options: Any) -> Case:
    return make_case(**SHAPE, hidden_size=hidden, greedy_rows=greedy, **options)


KINDS = [
    # case, legacy (raises, walks, fused, corrected from, tokens from), fixed walks, classes
    (
        _case(),
        (None, 2, 0, Pass.WALK_1, Pass.WALK_2),
        1,
        {"double_walk", "noise_doubled", "sampled_tokens_diverge", "teacher_forcing_fails"},
    ),
    (
        _case(greedy=GREEDY),
        (None, 2, 0, Pass.WALK_1, Pass.WALK_2),
        1,
        {"double_walk", "noise_doubled"},
    ),
    (
        _case(greedy=GREEDY, folded_sampling=False),
        (None, 2, 0, None, Pass.WALK_2),
        1,
        {"double_walk"},
    ),
    (
        _case(greedy=GREEDY, folded_sampling=False, fused_greedy=True),
        (None, 1, 1, None, Pass.WALK_1),
        0,
        {"fused_result_discarded"},  # one walk after the fused call, not a double walk
    ),
    (_case(head_kind="gated", sample_from_anchor=False), ("ValueError",), 1, {"legacy_raises"}),
    (_case(head_kind="rnn", sample_from_anchor=False), ("ValueError",), 1, {"legacy_raises"}),
    (_case(hidden=18, sample_from_anchor=False), ("RuntimeError",), 1, {"legacy_raises"}),
    (
        _case(sample_from_anchor=False),
        (None, 2, 0, Pass.WALK_1, Pass.WALK_2),
        1,
        {"double_walk", "noise_doubled", "sampled_tokens_diverge", "teacher_forcing_fails"},
    ),
]


@pytest.mark.parametrize(
    ("case", "legacy", "fixed_walks", "classes"),
    KINDS,
    ids=[f"{case.label()} {case.greedy_rows}" for case, *_ in KINDS],  # stable across hash seeds
)
def test_each_case_kind_has_its_control_flow_and_ledger_classes(
    case: Case, legacy: tuple[object, ...], fixed_walks: int, classes: set[str]
) -> None:
    flow, fixed = control_flow(case, "legacy"), control_flow(case, "fixed")
    assert flow.raises == legacy[0] == legacy_pass1_error(case)
    if flow.raises is None:
        assert (flow.walks, flow.fused_calls, flow.corrected_from, flow.tokens_from) == legacy[1:]
        assert flow.noise_calls == (2 * case.gamma if case.folded_sampling else 0)
        assert flow.pass1_views == int(not case.fused_path_available)
    assert fixed.raises is None and fixed.walks == fixed_walks
    assert fixed.head_steps == (0 if case.fused_path_available else case.gamma)
    assert expected_classes(case) == classes
    assert classes <= set(LEDGER_CLASSES)


def test_the_reference_runs_its_own_loop() -> None:
    flow = control_flow(_case(), "reference")
    assert (flow.walks, flow.own_steps, flow.sampler_calls, flow.noise_calls) == (0, 4, 0, 4)
    fused = control_flow(
        _case(greedy=GREEDY, folded_sampling=False, fused_greedy=True), "reference"
    )
    assert (fused.fused_calls, fused.head_steps, fused.tokens_from) == (1, 0, Pass.FUSED)


def test_only_the_three_built_ins_are_modelled() -> None:
    with pytest.raises(ValueError, match="no control-flow model for 'mine'"):
        control_flow(_case(), "mine")
