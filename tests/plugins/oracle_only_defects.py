"""Samplers that are not lossless, yet pass every per-call check: only the statistical
oracle can see their defect, so every path that says "lossless" must run it.

- ``ReusedUniformInverseCdfSampler``: the correct ``InverseCdfSampler`` with one change,
  step 1 reuses step 0's uniform draw; each token's marginal law is right, the joint
  of the first two is not, and its draws (``uniform_`` of ``[bs]``) are not replayable;
- ``CorrectOnlyWhenObservedSampler``: the fixed sampler, bit for bit, while a
  ``TorchDispatchMode`` is active (the harness's per-call observer); without one it
  races every step on step 0's noise (``ReusedNoiseSampler``). The oracle decodes
  unobserved.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from fixed import DsparkDraftSampler as FixedSampler
from reference.step_samplers import StepSampler
from tests.plugins.alternative_samplers import InverseCdfSampler
from tests.plugins.stats_defects import ReusedNoiseSampler


class ReusedUniformInverseCdfSampler(InverseCdfSampler):
    """Inverse-CDF sampling whose step 1 looks up step 0's uniform again."""

    step0_uniform: torch.Tensor | None = None  # [bs]

    def uniforms(self, bs: int, step_idx: int) -> torch.Tensor:
        if step_idx == 1 and self.step0_uniform is not None:  # the planted defect
            return self.step0_uniform
        uniform = super().uniforms(bs, step_idx)
        if step_idx == 0:
            self.step0_uniform = uniform
        return uniform


class CorrectOnlyWhenObservedSampler(ReusedNoiseSampler):
    """The fixed sampler under a dispatch mode; step 0's noise reused without one."""

    def step_sampler(self, bs: int) -> StepSampler:
        if _get_current_dispatch_mode() is not None:  # observed: behave
            return FixedSampler.step_sampler(self, bs)
        return super().step_sampler(bs)
