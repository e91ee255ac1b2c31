"""The per-call check of the verifier's side of a request's truncation
(``target_truncation``, ``harness.oracles.percall``): on every round, each truncating
request's row of the target law the verifier scored against has exactly the support,
and the values, that ``reference.request_law`` gives for that row's own parameters.

A verifier that drops min-p or top-p fails exactly this check; the designs that are
lossless by construction (our chain verifier, a drafter that truncates its own ``q``
with its own top-k) pass it, and every round's truncating rows are held to it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.oracles import stats
from harness.oracles.decode import life_batches
from harness.oracles.defaults import DEFAULT_TRUNCATED, GREEDY
from harness.oracles.percall import HELD_CHECKS, TARGET_TRUNCATION, held_decode
from harness.oracles.problem import DEFAULT_CONFIG, FAR, StatsProblem, build_problems
from harness.plugins.implementations import Implementation, builtin_implementations
from reference.verifier import CHAIN_VERIFIER, Verifier
from tests.plugins.request_param_defects import DropsMinP, DropsTopP, OwnTopKDrafter

(FIXED,) = builtin_implementations(("fixed",))
SMALL = replace(
    DEFAULT_CONFIG,
    temperatures=(1.0, GREEDY),
    truncated=DEFAULT_TRUNCATED,
    targets=(FAR,),
    head_kinds=("vanilla",),
    rows=600,
    stage_rows=(),
)


@pytest.fixture(scope="module")
def problem() -> StatsProblem:
    (built,) = build_problems(SMALL)
    return built


def truncating_rows(problem: StatsProblem) -> int:
    truncation = problem.sampling_info.truncation
    return int(truncation.truncating_rows(vocab_size=SMALL.vocab_size).sum())


@pytest.mark.parametrize(
    ("verifier", "dropped"), [(DropsMinP(), "min-p 0.2"), (DropsTopP(), "top-p 0.8")]
)
def test_a_verifier_dropping_a_truncation_fails_exactly_target_truncation(
    problem: StatsProblem, verifier: Verifier, dropped: str
) -> None:
    _, held = held_decode(
        FIXED.sampler_class, problem=problem, head_kind="vanilla", seed=0, verifier=verifier
    )
    assert [f.check for f in held.findings] == [TARGET_TRUNCATION]
    (finding,) = held.findings
    assert dropped in finding.expected and finding.round == 0
    assert finding.describe().startswith(
        f"target_truncation [oracle]: far/vanilla under {verifier.name}: round 0, "
    )


@pytest.mark.parametrize(
    "implementation", [FIXED, Implementation("own-top-k", OwnTopKDrafter, "test:OwnTopKDrafter")]
)
def test_the_lossless_designs_hold_every_truncating_row_of_every_round_and_pass(
    problem: StatsProblem, implementation: Implementation
) -> None:
    decoded, held = held_decode(
        implementation.sampler_class,
        problem=problem,
        head_kind="vanilla",
        seed=0,
        verifier=CHAIN_VERIFIER,
    )
    assert held.findings == ()
    assert tuple(held.positions) == HELD_CHECKS
    per_round = truncating_rows(problem) * (SMALL.gamma + 1)
    assert per_round > 0
    assert held.positions[TARGET_TRUNCATION] == per_round * decoded.rounds
    assert held.calls == sum(len(life_batches(problem, r)) for r in range(decoded.rounds))


def test_a_verifier_dropping_min_p_is_not_lossless_by_its_finding_alone(
    problem: StatsProblem,
) -> None:
    result = stats.run_stats(FIXED, problems=(problem,), verifier=DropsMinP())
    assert [f.check for f in result.held_calls.findings] == [TARGET_TRUNCATION]
    assert not result.passed
