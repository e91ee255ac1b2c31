"""A crash is a result: an implementation that exits, interrupts itself or hangs anywhere
is a recorded failure of that implementation, and the run goes on."""

from __future__ import annotations

import pytest

from harness.case import make_case
from harness.interrupts import stop_on_signals
from harness.options import DEFAULT_OPTIONS, RunOptions
from harness.pipeline.compare import evaluate_run
from harness.pipeline.isolation import make_executor
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins import untrusted_samplers

CASE = make_case(bs=2, gamma=3, vocab_size=40, hidden_size=8, markov_rank=4, seed=11)


def _run_planted(sampler_class: type, *, options: RunOptions = DEFAULT_OPTIONS) -> dict[str, str]:
    planted = Implementation("planted", sampler_class, "tests")
    implementations = [planted, *builtin_implementations()]
    with stop_on_signals(), make_executor(isolate=options.isolate) as executor:
        run = run_case(CASE, implementations, options=options, executor=executor)
    verdict = evaluate_run(run, require_observable=False)
    assert not verdict.failed_checks("fixed") and not verdict.failed_checks("reference")
    return {c.name: c.detail for c in verdict.failed_checks("planted")}


@pytest.mark.parametrize(
    ("sampler_class", "reason"),
    [
        (untrusted_samplers.SystemExitSampler, "raised SystemExit: 0"),
        (untrusted_samplers.KeyboardInterruptSampler, "raised KeyboardInterrupt"),
    ],
)
@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "isolated"])
def test_an_implementation_that_exits_or_interrupts_itself_is_a_recorded_failure(
    sampler_class: type, reason: str, isolate: bool
) -> None:
    assert _run_planted(sampler_class, options=RunOptions(isolate=isolate))["ran"].startswith(
        reason
    )


@pytest.mark.parametrize(
    ("sampler_class", "reason"),
    [
        (untrusted_samplers.ConstructorHangingSampler, "time limit of 1 s"),
        (untrusted_samplers.StagingHangingSampler, "time limit of 1 s"),
        (
            untrusted_samplers.TimeoutSwallowingSampler,
            "time limit of 1 s (the implementation caught the timeout)",
        ),
    ],
)
def test_the_time_limit_covers_construction_staging_and_a_swallowed_timeout(
    sampler_class: type, reason: str
) -> None:
    run_case(CASE, builtin_implementations())  # warm up, so only the planted one meets the limit
    failed = _run_planted(sampler_class, options=RunOptions(time_limit_s=1.0))
    assert failed["ran"].startswith("raised CallTimeout") and reason in failed["ran"]
