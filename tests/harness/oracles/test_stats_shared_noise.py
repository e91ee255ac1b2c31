"""The oracle on the server's own randomness: the drafter and the verifier draw from one
plumbing (``BuiltSampler.decode_streams``), so a drafter whose noise is what the
verifier draws next is rejected; on independent streams (the control) it is not, and a
drafter that shares the stream at disjoint offsets passes on both."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness.defaults import VerifierNoise
from harness.oracles import stats
from harness.oracles.problem import DEFAULT_CONFIG, StatsProblem, build_problems
from harness.plugins.implementations import Implementation
from reference.streams import shared_torch_streams
from reference.verifier import CHAIN_VERIFIER
from tests.plugins.shared_stream_defects import SHARED_STREAM_CORRECT, SHARED_STREAM_DEFECTS

ALL = {**SHARED_STREAM_DEFECTS, **SHARED_STREAM_CORRECT}


@pytest.fixture(scope="module", params=list(VerifierNoise), ids=lambda n: n.value)
def problems(request: pytest.FixtureRequest) -> tuple[StatsProblem, ...]:
    return build_problems(replace(DEFAULT_CONFIG, verifier_noise=request.param))


def test_the_shared_generator_is_the_one_the_drafter_draws_from() -> None:
    streams = shared_torch_streams(7, device=torch.device("cpu"))
    assert streams.shared and streams.verifier.generator is torch.default_generator
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(streams.drafter_seed)
        drafted = torch.rand(3)
        verified = torch.rand(3, generator=streams.verifier.generator)
        torch.manual_seed(7)
        assert torch.equal(torch.rand(6), torch.cat([drafted, verified]))  # one stream, in turn


@pytest.mark.parametrize("name", list(ALL))
def test_a_coupling_is_rejected_on_the_shared_plumbing_alone(
    name: str, problems: tuple[StatsProblem, ...]
) -> None:
    noise = problems[0].config.verifier_noise
    result = stats.run_stats(
        Implementation(name, ALL[name], f"test:{name}"),
        problems=problems,
        verifier=CHAIN_VERIFIER,
    )
    assert result.error is None and result.shared_noise is (noise is VerifierNoise.SHARED)
    coupled = name in SHARED_STREAM_DEFECTS and noise is VerifierNoise.SHARED
    assert result.rejected is coupled, (result.p_value, result.rejections()[:3])
