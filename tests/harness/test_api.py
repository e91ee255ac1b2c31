"""The Python API: check_sampler's two verdicts, the assertions and the case strategy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from fixed import DsparkDraftSampler as FixedSampler
from harness.pipeline.matrix import standard_matrix
from harness.testing import (
    Case,
    assert_drop_in,
    assert_lossless,
    case_strategy,
    check_sampler,
)
from tests.plugins.planted_defects_verdicts import FrozenNoiseSampler

CASES = [
    c for c in standard_matrix() if c.name in ("folded-sampled/vanilla", "greedy-fold/vanilla")
]
GUMBEL = "tests.plugins.alternative_samplers:UniformGumbelSampler"


def test_fixed_is_drop_in() -> None:
    verdict = assert_drop_in(FixedSampler, cases=CASES)
    assert (verdict.lossless, verdict.drop_in, verdict.ok) == (True, True, True)
    assert verdict.cases == len(CASES) == 2
    assert verdict.statistical.ran and verdict.statistical.rejected is False


def test_another_design_is_lossless_not_drop_in_with_the_reason() -> None:
    verdict = check_sampler(GUMBEL, cases=CASES)
    assert (verdict.name, verdict.lossless, verdict.drop_in, verdict.ok) == (
        "UniformGumbelSampler",
        True,
        False,
        False,
    )
    assert verdict.summary().startswith("lossless; not drop-in: noise_budget: drew 4 x uniform_")
    # what is required changes ok, not the verdicts: the oracle ran once above
    assert check_sampler(GUMBEL, cases=CASES, require="lossless", stats=False).ok
    with pytest.raises(AssertionError, match=r"matches_reference \[drop_in\]"):
        assert_drop_in(GUMBEL, cases=CASES, stats=False)


def test_assert_lossless_lists_the_failing_check() -> None:
    with pytest.raises(AssertionError, match=r"NOT lossless: fresh_noise") as raised:
        assert_lossless(FrozenNoiseSampler, cases=CASES)
    assert "folded-sampled/vanilla: fresh_noise [lossless]:" in str(raised.value)


def test_require_must_be_a_known_verdict() -> None:
    with pytest.raises(ValueError, match="require must be one of"):
        check_sampler(FixedSampler, cases=CASES, require="perfect")  # type: ignore[arg-type]


@settings(max_examples=8)
@given(case=case_strategy())
def test_fixed_is_drop_in_on_generated_cases(case: Case) -> None:
    verdict = check_sampler(FixedSampler, cases=[case], stats=False)  # the oracle: above
    assert verdict.drop_in, verdict.evidence()
