"""The folded step the plug-in samplers here share: the exponential race at the
sampler's staged temperatures and greedy rows, on the noise each sampler chooses."""

from __future__ import annotations

from collections.abc import Callable

import torch

from reference import exponential_race
from reference.sampler_base import DraftSamplerBase
from reference.step_samplers import StepSampler


def race_on(
    sampler: DraftSamplerBase, *, bs: int, noise_of_step: Callable[[int], torch.Tensor]
) -> StepSampler:
    """Step ``k`` races its logits on ``noise_of_step(k)`` (``[bs, V]`` float32) at the
    sampler's temperatures and greedy mask of its first ``bs`` rows."""

    def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
        return exponential_race(
            step_logits,
            temperatures=sampler.temperatures[:bs],
            greedy_mask=sampler.greedy_mask[:bs],
            noise=noise_of_step(step_idx),
        )

    return sample_step
