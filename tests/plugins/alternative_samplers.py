"""Correct draft samplers of other designs: lossless, yet not bit-compatible with ours.

Each keeps the single walk of the fixed sampler and writes, as ``corrected_out``, the
very step logits its tokens were drawn from, so the verifier's ``q`` is right. Only the
way a sampled row draws its token differs:

- ``PrestagedNoiseSampler``: the noise of all ``gamma`` steps is drawn once, in
  ``stage_sampling_params`` (before every call, as the server stages before every
  graph replay), into a ``[max_bs, gamma, V]`` buffer; step ``k`` races on slice ``k``;
- ``UniformGumbelSampler``: Gumbel-max from ``uniform_`` draws,
  ``argmax(logits / T - log(-log U))``;
- ``MultinomialSampler``: ``torch.multinomial(softmax(logits / T), 1)``.

Greedy rows take the argmax in every design.
"""

from __future__ import annotations

from typing import Any

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference import SamplingInfo, exponential_race
from reference.step_samplers import StepSampler, greedy_step


class PrestagedNoiseSampler(FixedSampler):
    """Noise for every step staged before the call, as upstream's NPU path does."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.staged_noise = (
            torch.empty(
                self.max_bs,
                self.gamma,
                self.model.vocab_size,
                dtype=torch.float32,
                device=self.device,
            )  # [max_bs, gamma, V]
            if self.folded_sampling
            else None
        )
        self.staged_bs = 0

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)
        if self.staged_noise is not None:
            self.staged_noise[:bs].exponential_()  # one draw of [bs, gamma, V] per call
        self.staged_bs = bs

    def step_sampler(self, bs: int) -> StepSampler:
        if self.staged_noise is None:
            return greedy_step
        noise = self.staged_noise[:bs]  # [bs, gamma, V]

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            return exponential_race(
                step_logits,
                temperatures=self.temperatures[:bs],
                greedy_mask=self.greedy_mask[:bs],
                noise=noise[:, step_idx],
            )

        return sample_step


class _RowDrawSampler(FixedSampler):
    """The fixed sampler whose sampled rows draw with ``draw(scaled_logits) -> [bs]``,
    where ``scaled_logits = float(step logits) / T``; greedy rows take the argmax."""

    def draw(self, scaled: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return greedy_step
        temperatures, greedy = self.temperatures[:bs], self.greedy_mask[:bs]

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            del step_idx
            scaled = step_logits.float() / temperatures.float().unsqueeze(-1)  # [bs, V]
            return torch.where(greedy, torch.argmax(scaled, dim=-1), self.draw(scaled))

        return sample_step


class UniformGumbelSampler(_RowDrawSampler):
    """Gumbel-max with the Gumbel noise made from ``uniform_`` draws."""

    def draw(self, scaled: torch.Tensor) -> torch.Tensor:
        uniform = torch.empty_like(scaled).uniform_()  # [bs, V]
        return torch.argmax(scaled - torch.log(-torch.log(uniform)), dim=-1)


class MultinomialSampler(_RowDrawSampler):
    """``softmax(logits / T)`` then ``torch.multinomial``, as DeepSpec's sampler draws."""

    def draw(self, scaled: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(torch.softmax(scaled, dim=-1), 1).squeeze(-1)
