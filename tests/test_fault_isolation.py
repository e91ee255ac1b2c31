"""A broken implementation is a reported failure with its reason; the run goes on."""

from __future__ import annotations

import pytest

from harness.pipeline.case import make_case
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins import broken_samplers

CASE = make_case(
    bs=3,
    gamma=4,
    vocab_size=48,
    hidden_size=8,
    markov_rank=4,
    greedy_rows=(False, True, False),
    confidence=True,
    seed=3,
)


@pytest.mark.parametrize(
    ("sampler_class", "failed_check", "reason"),
    [
        (broken_samplers.RaisingSampler, "ran", "RuntimeError: planted failure"),
        (broken_samplers.WrongShapeSampler, "ran", "OutputError: out must be an int64 vector"),
        (broken_samplers.HalfWritingSampler, "outputs_written", "token ids outside [0, 48)"),
        (broken_samplers.NanWritingSampler, "outputs_written", "corrected_out unwritten or not"),
        (broken_samplers.StaleCorrectedSampler, "teacher_forcing", "corrected_out differs"),
    ],
)
def test_broken_implementation_is_flagged_and_the_others_still_run(
    sampler_class: type, failed_check: str, reason: str
) -> None:
    broken = Implementation("broken", sampler_class, "tests")
    run = run_case(CASE, [*builtin_implementations(), broken])
    verdict = evaluate_run(run, require_observable=False)
    failed = {c.name: c.detail for c in verdict.failed_checks("broken")}
    assert failed_check in failed, failed
    assert reason in failed[failed_check]
    assert not verdict.failed_checks("fixed")
    assert verdict.ledger is not None and verdict.ledger.holds


def test_hanging_implementation_is_stopped_by_the_time_limit() -> None:
    run_case(CASE, builtin_implementations())  # warm up, so only the hang meets the limit
    hanging = Implementation("hanging", broken_samplers.HangingSampler, "tests")
    run = run_case(CASE, [hanging, *builtin_implementations()], time_limit_s=2.0)
    error = run.results["hanging"].error
    assert error is not None and error.type == "CallTimeout"
    assert "time limit of 2 s" in error.message
    verdict = evaluate_run(run, require_observable=False)
    assert not verdict.failed_checks("fixed")
    assert verdict.ledger is not None and verdict.ledger.holds
