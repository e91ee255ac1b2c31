"""Benchmark: legacy vs fixed ``DsparkDraftSampler.__call__``, one group per scenario.

Scenarios (ledger case kinds that run in both samplers; ``docs/design.md``): folded sampling with
sampled rows, folded all-greedy, greedy fold, greedy fold with the fused path. Each
group holds legacy and fixed, so ``--benchmark-group-by=group`` shows them side by
side, and ``--benchmark-compare-fail`` can hold the fixed sampler against a saved
run. The exact work counters of the call (walks, draws, operators, the model's
GEMM FLOPs) go into ``extra_info``. On CUDA the device is synchronised before every
clock read (in the round's setup and at the end of the timed call).

Shape: bs=8, gamma=7, V=32768, r=256, H=256, vanilla head, float32; whole call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
import torch
from pytest_benchmark.fixture import BenchmarkFixture

from harness.case import Case, CaseInputs, build_inputs, make_case
from harness.measure.model import predict_work
from harness.options import RunOptions
from harness.pipeline.runner import run_implementation, same_rng_start
from harness.plugins.implementations import builtin_implementations

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SHAPE: dict[str, int] = {
    "bs": 8,
    "gamma": 7,
    "vocab_size": 32768,
    "markov_rank": 256,
    "hidden_size": 256,
}
ROUNDS = 5
SCENARIOS: dict[str, dict[str, Any]] = {
    "folded, sampled rows": {"greedy_rows": (False,) * 7 + (True,)},
    "folded, all greedy": {"greedy_rows": (True,) * 8},
    "greedy fold": {"greedy_rows": (True,) * 8, "folded_sampling": False},
    "greedy fold, fused path": {
        "greedy_rows": (True,) * 8,
        "folded_sampling": False,
        "fused_greedy": True,
    },
}


@cache
def scenario(name: str) -> tuple[Case, CaseInputs]:
    case = make_case(
        bs=SHAPE["bs"],
        gamma=SHAPE["gamma"],
        vocab_size=SHAPE["vocab_size"],
        hidden_size=SHAPE["hidden_size"],
        markov_rank=SHAPE["markov_rank"],
        device=DEVICE,
        seed=0,
        name=name,
        **SCENARIOS[name],
    )
    return case, build_inputs(case)


def _synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def counters(case: Case, inputs: CaseInputs, implementation: str) -> dict[str, Any]:
    """Exact work of one call (counted) and the model's GEMM FLOPs, for ``extra_info``."""
    (impl,) = builtin_implementations((implementation,))
    result = run_implementation(
        impl, case=case, inputs=inputs, options=RunOptions(record_noise=False)
    )
    assert result.error is None, result.error
    counts = result.work
    predicted = predict_work(case, implementation)
    return {
        "shape": {**SHAPE, "dtype": case.dtype, "device": case.device},
        "walks": counts.walks,
        "fused_calls": counts.fused_calls,
        "sampler_calls": counts.sampler_calls,
        "noise_calls": counts.noise_calls,
        "noise_elements": counts.noise_elements,
        "aten_ops": counts.total_ops,
        "gemm_flops_model": predicted.gemm_flops,
        "walk_gemm_flops_model": predicted.walk.gemm_flops,
        "lm_head_gemm_flops_model": predicted.lm_head.gemm_flops,
    }


def timed_call(case: Case, inputs: CaseInputs, implementation: str) -> Callable[[], None]:
    (impl,) = builtin_implementations((implementation,))
    sampler = impl.sampler_class(
        model=inputs.model,
        gamma=case.gamma,
        max_bs=case.max_bs,
        device=torch.device(case.device),
        folded_sampling=case.folded_sampling,
        fused_greedy=case.fused_greedy,
    )
    sampler.stage_sampling_params(bs=case.bs, sampling_info=inputs.sampling_info)

    def call() -> None:
        with torch.inference_mode():
            sampler(inputs.hidden_states, inputs.input_ids)
        _synchronize()  # the clock is read right after this returns

    return call


@pytest.mark.bench
@pytest.mark.parametrize("implementation", ["legacy", "fixed"])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_bench_sampler_call(benchmark: BenchmarkFixture, name: str, implementation: str) -> None:
    case, inputs = scenario(name)
    benchmark.group = f"sampler call: {name}"
    benchmark.extra_info.update(counters(case, inputs, implementation))
    call = timed_call(case, inputs, implementation)
    with same_rng_start(torch.device(case.device), case.seed):
        benchmark.pedantic(call, setup=_synchronize, rounds=ROUNDS, warmup_rounds=1, iterations=1)
    expected_walks = predict_work(case, implementation).walks
    assert benchmark.extra_info["walks"] == expected_walks
