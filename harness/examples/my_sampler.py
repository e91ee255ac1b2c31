"""A sampler to copy: the fixed DSpark sampler whose sampled rows draw their token by
multinomial sampling instead of the exponential race.

It keeps the single walk, so each token is drawn from the very step logits written to
``corrected_out``: lossless, and not drop-in (it consumes other random numbers than the
reference). Copy this file as ``my_sampler.py``, change ``sample_step`` and run
``python -m harness compare --only reference --impl mine=my_sampler.py:MySampler``.
"""

from __future__ import annotations

import torch

from fixed import DsparkDraftSampler
from reference.step_samplers import StepSampler, greedy_step


class MySampler(DsparkDraftSampler):
    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:  # the greedy fold: every row takes the argmax
            return greedy_step
        temperatures, greedy = self.temperatures[:bs], self.greedy_mask[:bs]

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            scaled = step_logits.float() / temperatures.unsqueeze(-1)  # [bs, V]
            drawn = torch.multinomial(torch.softmax(scaled, dim=-1), 1).squeeze(-1)  # [bs]
            return torch.where(greedy, scaled.argmax(dim=-1), drawn)

        return sample_step
