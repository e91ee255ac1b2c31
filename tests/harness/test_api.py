"""The Python API: check_sampler's two verdicts, the assertions, the case strategy, and the
options it takes as one value (a ``RunOptions`` or a profile's name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings

from fixed import DsparkDraftSampler as FixedSampler
from harness.options import Roles
from harness.pipeline.check_result import Tier
from harness.pipeline.matrix import matrix_for, standard_matrix
from harness.testing import (
    PROFILES,
    Case,
    RunOptions,
    assert_drop_in,
    assert_lossless,
    case_strategy,
    check_sampler,
    get_profile,
    options_of,
    register_profile,
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


# -- the options, one value, and its profiles ----------------------------------------------------
def test_the_api_takes_the_options_value_and_changes_to_its_fields() -> None:
    verdict = check_sampler(FixedSampler, cases=CASES, options=RunOptions(stats=False))
    assert verdict.ok and not verdict.statistical.ran  # the value's stats=False held
    changed = options_of("ci", require="lossless", stats=False, oracle_rows=300)
    assert changed == replace(
        get_profile("ci"), stats=False, oracle_rows=300, roles=Roles(require=Tier.LOSSLESS)
    )


def test_named_profiles_in_the_manner_of_hypothesis_settings() -> None:
    assert get_profile("default") == RunOptions()
    ci, thorough = get_profile("ci"), get_profile("thorough")
    assert ci.jobs == 1 and ci.time_limit_s is None and not ci.thorough
    assert thorough.thorough and thorough.oracle_rows > RunOptions().oracle_rows
    assert len(matrix_for(thorough)) > len(matrix_for(ci)) == len(standard_matrix())
    register_profile("mine", RunOptions(seed=7))
    try:
        assert options_of("mine").seed == 7
    finally:
        del PROFILES["mine"]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: get_profile("fast"), ValueError, "unknown profile 'fast': expected one of"),
        (lambda: options_of(stat=False), TypeError, r"unknown options \['stat'\]"),
        (lambda: options_of(verifier_noise="both"), ValueError, "verifier_noise: expected one"),
        (lambda: options_of(options=3), TypeError, "expected a RunOptions or a profile"),  # type: ignore[arg-type]
    ],
)
def test_bad_options_are_refused_with_what_is_expected(
    call: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call()
