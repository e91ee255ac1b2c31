"""The runner: same RNG start for every implementation, caller's state untouched,
failures recorded rather than raised, and exact observation of the work done."""

from __future__ import annotations

import torch

from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.helpers import small_case
from tests.plugins.broken_samplers import RaisingSampler

CASE = small_case(seed=11, vocab_size=64, hidden_size=16, confidence=False)


def test_caller_rng_state_is_left_untouched() -> None:
    torch.manual_seed(2024)
    before = torch.get_rng_state()
    run_case(CASE, builtin_implementations())
    assert torch.equal(torch.get_rng_state(), before)


def test_every_implementation_starts_from_the_same_rng_state() -> None:
    run = run_case(CASE, builtin_implementations())
    reference, fixed, legacy = (run.results[n] for n in ("reference", "fixed", "legacy"))
    # The first gamma draws are the same tensors for all three: same start, same stream.
    for k in range(CASE.gamma):
        assert torch.equal(reference.noise_draws[k], fixed.noise_draws[k])
        assert torch.equal(fixed.noise_draws[k], legacy.noise_draws[k])


def test_runs_replay_bit_for_bit() -> None:
    first = run_case(CASE, builtin_implementations())
    second = run_case(CASE, builtin_implementations())
    for name in first.results:
        assert torch.equal(first.results[name].tokens, second.results[name].tokens)
        assert torch.equal(first.results[name].corrected, second.results[name].corrected)


def test_an_implementation_that_raises_is_a_recorded_result() -> None:
    raising = Implementation("raising", RaisingSampler, "tests")
    run = run_case(CASE, [*builtin_implementations(("fixed",)), raising])
    assert run.results["fixed"].ok
    error = run.results["raising"].error
    assert error is not None
    assert (error.type, error.message) == ("RuntimeError", "planted failure")


def test_observers_count_walks_steps_and_noise_exactly() -> None:
    run = run_case(CASE, builtin_implementations())
    fixed, legacy, reference = (run.results[n].work for n in ("fixed", "legacy", "reference"))
    assert (fixed.walks, fixed.head_steps, fixed.sampler_calls) == (1, 4, 4)
    assert (legacy.walks, legacy.head_steps, legacy.sampler_calls) == (2, 8, 8)
    assert (reference.walks, reference.head_steps) == (0, 4)
    assert fixed.noise_calls == 4 and legacy.noise_calls == 8
    assert fixed.noise_elements == 4 * 3 * 64 and legacy.noise_elements == 2 * 4 * 3 * 64
    assert fixed.op_counts["aten.exponential_"] == 4


def test_observed_head_is_restored_after_the_run() -> None:
    run = run_case(CASE, builtin_implementations(("fixed",)))
    head = run.inputs.model.markov_head
    assert "sample_block" not in vars(head) and "step_bias" not in vars(head)
