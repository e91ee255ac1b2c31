"""Functional plug-ins: a block sampler function judged like any sampler class.

``race_block`` (the reference written as a function) is clean on every standard
case and bit-exact against the reference in float32; ``two_walk_block`` (the
double-walk bug as a function) fails teacher forcing on every sampled case; a
function of the wrong shape is refused before the first case, and one that
returns the wrong shape is a recorded failure naming the shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.pipeline.compare import CaseVerdict, evaluate_run
from harness.pipeline.control_flow import legacy_pass1_error
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.runner import run_case
from harness.plugins.implementations import (
    ImplementationError,
    parse_impl_spec,
    select_implementations,
)
from tests.helpers import REPO_ROOT
from tests.session_share import computed_once

MODULE = "tests.plugins.functional_samplers"


@pytest.fixture(scope="module")
def matrix_verdicts(tmp_path_factory: pytest.TempPathFactory) -> list[CaseVerdict]:
    """The standard matrix for the reference and both block functions (once a session)."""
    return computed_once(tmp_path_factory, "functional-matrix-verdicts", _matrix_verdicts)


def _matrix_verdicts() -> list[CaseVerdict]:
    implementations = select_implementations(
        ["reference"], [f"race={MODULE}:race_block", f"two={MODULE}:two_walk_block"]
    )
    return [
        evaluate_run(run_case(case, implementations), require_observable=True)
        for case in standard_matrix()
    ]


def test_a_function_is_wrapped_into_a_sampler_class() -> None:
    implementation = parse_impl_spec(f"race={MODULE}:race_block")
    assert implementation.kind == "function"
    assert implementation.sampler_class.__name__ == "Functional[race_block]"


def test_a_function_in_a_source_file_loads_too() -> None:
    implementation = parse_impl_spec("race=tests/plugins/functional_samplers.py:race_block")
    assert (implementation.kind, implementation.era) == ("function", None)


def test_the_reference_as_a_function_is_clean_and_bit_exact(matrix_verdicts) -> None:
    for verdict in matrix_verdicts:
        label = verdict.case.label()
        assert [c.name for c in verdict.failed_checks("race")] == [], label
        (match,) = [c for c in verdict.checks["race"] if c.name == "matches_reference"]
        if verdict.case.dtype == "float32":
            assert match.detail == "bit-exact", label


def test_the_double_walk_as_a_function_fails_teacher_forcing(matrix_verdicts) -> None:
    sampled = [
        v for v in matrix_verdicts if v.case.has_sampled_rows and legacy_pass1_error(v.case) is None
    ]
    assert len(sampled) >= 5
    for verdict in sampled:
        failed = {c.name for c in verdict.failed_checks("two")}
        assert {"teacher_forcing", "single_walk"} <= failed, verdict.case.label()


def test_a_function_of_the_wrong_shape_is_refused_listing_what_is_missing() -> None:
    with pytest.raises(ImplementationError) as raised:
        parse_impl_spec(f"bad={MODULE}:positional_block")
    message = str(raised.value)
    missing = ("hidden_states", "temperatures", "greedy_mask", "markov_head", "folded_sampling")
    for keyword in missing:
        assert f"does not accept the keyword {keyword}=" in message
    # base_logits and anchor_tokens are positional-or-keyword: fine
    assert len(message.splitlines()[0].split("; ")) == len(missing)
    assert "expected def sample(*, base_logits" in message


def test_a_function_returning_the_wrong_shape_is_a_recorded_failure() -> None:
    (case,) = standard_matrix()[:1]
    wrong = parse_impl_spec(f"wrong={MODULE}:wrong_shape_block")
    error = run_case(case, [wrong]).results["wrong"].error
    assert error is not None
    assert error.type == "ValueError"
    assert f"tokens must be [bs={case.bs}, gamma={case.gamma}]" in error.message


def test_the_cli_judges_a_function(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--only", "reference,fixed", "--no-stats", "--quiet"]  # loading it
    assert main([*argv, "--out-dir", str(tmp_path), "--impl", f"race={MODULE}:race_block"]) == 0
    assert "race: clean on" in capsys.readouterr().out


def test_the_documented_example_is_clean_and_bit_exact(tmp_path: Path) -> None:
    doc = (REPO_ROOT / "docs" / "plugins.md").read_text()
    example = doc.split("## Functional plug-ins", 1)[1].split("```python\n", 1)[1].split("```")[0]
    assert len(example.strip().splitlines()) <= 14
    path = tmp_path / "my_sampler.py"
    path.write_text(example)
    implementations = select_implementations(["reference"], [f"mine={path}:sample"])
    for case in standard_matrix()[:6]:
        verdict = evaluate_run(run_case(case, implementations), require_observable=True)
        assert [c.name for c in verdict.failed_checks("mine")] == [], case.label()
        (match,) = [c for c in verdict.checks["mine"] if c.name == "matches_reference"]
        assert case.dtype != "float32" or match.detail == "bit-exact", case.label()
