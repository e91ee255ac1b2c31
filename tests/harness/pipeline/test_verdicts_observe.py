"""RNG recording: every random op, in construction, staging and the call, by calls and
elements; and importing the observer changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import make_case
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation
from reference import SamplingInfo
from tests.helpers import assert_fresh_process_passes

CASE = make_case(bs=2, gamma=3, vocab_size=16, hidden_size=8, markov_rank=4, seed=5)


class EveryRandomOpSampler(FixedSampler):
    """The fixed sampler plus one draw of every kind: some at construction, some when
    staging, some in the call (with and without a generator)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        torch.rand(3, 4)
        torch.randn(5, generator=torch.Generator().manual_seed(0))

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)
        torch.empty(2, 3).uniform_()
        torch.randint(0, 9, (7,))

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        x = torch.zeros(2, 2)
        x.normal_()
        x.bernoulli_(0.5)
        x.random_(0, 4)
        torch.multinomial(torch.ones(3, 5), 2)
        torch.rand_like(x)
        torch.randn_like(x, dtype=torch.float64)
        torch.randint_like(x, 3)
        torch.rand(4, generator=torch.Generator().manual_seed(1))


def test_every_random_op_is_counted_by_phase_calls_and_elements() -> None:
    impl = Implementation("every", EveryRandomOpSampler, "tests")
    rng = run_case(CASE, [impl]).results["every"].work.rng
    # the runner constructs without staging, then stages before the call
    assert rng["construction"] == {"rand": [1, 12], "randn": [1, 5]}
    assert rng["staging"] == {"randint": [1, 7], "uniform_": [1, 6]}
    assert rng["call"] == {
        "bernoulli_": [1, 4],
        "exponential_": [CASE.gamma, CASE.gamma * CASE.bs * CASE.vocab_size],
        "multinomial": [1, 6],
        "normal_": [1, 4],
        "rand": [1, 4],
        "rand_like": [1, 4],
        "randint_like": [1, 4],
        "randn_like": [1, 4],
        "random_": [1, 4],
    }


def test_the_call_alone_is_counted_as_work() -> None:
    impl = Implementation("every", EveryRandomOpSampler, "tests")
    work = run_case(CASE, [impl]).results["every"].work
    assert work.noise_calls == CASE.gamma
    assert "aten.randn" not in work.op_counts and "aten.uniform_" not in work.op_counts
    assert work.op_counts["aten.multinomial"] == 1


@pytest.mark.e2e
def test_observing_a_call_leaves_the_environment_and_modules_as_found() -> None:
    probe = (
        "import os, sys; before = dict(os.environ); import torch; "
        "from harness.pipeline.observe import DispatchObserver; "
        "observer = DispatchObserver(record_noise=True); "
        "exec('with observer: torch.empty(3).exponential_()'); "
        "assert observer.draws, 'no draw observed'; "
        "assert dict(os.environ) == before, 'environment changed'; "
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'"
    )
    assert_fresh_process_passes(probe)
