"""Correct draft samplers of other designs: lossless, yet not bit-compatible with ours.

Each keeps the single walk of the fixed sampler and writes, as ``corrected_out``, the
very step logits its tokens were drawn from, so the verifier's ``q`` is right. Only the
way a sampled row draws its token differs:

- ``PrestagedNoiseSampler``: the noise of all ``gamma`` steps is drawn once, in
  ``stage_sampling_params`` (before every call, as the server stages before every
  graph replay), into a ``[max_bs, gamma, V]`` buffer; step ``k`` races on slice ``k``;
- ``UniformGumbelSampler``: Gumbel-max from ``uniform_`` draws,
  ``argmax(logits / T - log(-log U))``;
- ``MultinomialSampler``: ``torch.multinomial(softmax(logits / T), 1)``;
- ``InverseCdfSampler``: one ``uniform_`` draw per row and step, looked up in the
  row's cumulative ``softmax(logits / T)``.

Greedy rows take the argmax in every design.
"""

from __future__ import annotations

from typing import Any

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference import SamplingInfo
from reference.step_samplers import StepSampler, greedy_step
from tests.plugins.races import race_on


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
        return race_on(self, bs=bs, noise_of_step=lambda step_idx: noise[:, step_idx])


class _RowDrawSampler(FixedSampler):
    """The fixed sampler whose sampled rows draw with ``draw(scaled_logits, step_idx)
    -> [bs]``, where ``scaled_logits = float(step logits) / T``; greedy rows take the
    argmax."""

    def draw(self, scaled: torch.Tensor, step_idx: int) -> torch.Tensor:
        raise NotImplementedError

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return greedy_step
        temperatures, greedy = self.temperatures[:bs], self.greedy_mask[:bs]

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            scaled = step_logits.float() / temperatures.float().unsqueeze(-1)  # [bs, V]
            drawn = self.draw(scaled, step_idx)
            return torch.where(greedy, torch.argmax(scaled, dim=-1), drawn)

        return sample_step


class UniformGumbelSampler(_RowDrawSampler):
    """Gumbel-max with the Gumbel noise made from ``uniform_`` draws."""

    def draw(self, scaled: torch.Tensor, step_idx: int) -> torch.Tensor:
        uniform = torch.empty_like(scaled).uniform_()  # [bs, V]
        return torch.argmax(scaled - torch.log(-torch.log(uniform)), dim=-1)


class MultinomialSampler(_RowDrawSampler):
    """``softmax(logits / T)`` then ``torch.multinomial``, as DeepSpec's sampler draws."""

    def draw(self, scaled: torch.Tensor, step_idx: int) -> torch.Tensor:
        return torch.multinomial(torch.softmax(scaled, dim=-1), 1).squeeze(-1)


class InverseCdfSampler(_RowDrawSampler):
    """Inverse-CDF sampling: the first token whose cumulative probability exceeds a
    uniform draw (the last token of positive probability if rounding overshoots)."""

    def uniforms(self, bs: int, step_idx: int) -> torch.Tensor:
        """This step's uniform draw per row ``[bs]``."""
        return torch.empty(bs, device=self.device).uniform_()

    def draw(self, scaled: torch.Tensor, step_idx: int) -> torch.Tensor:
        probs = torch.softmax(scaled, dim=-1)  # [bs, V]
        cdf = torch.cumsum(probs, dim=-1)  # [bs, V]
        targets = self.uniforms(scaled.shape[0], step_idx) * cdf[:, -1]  # [bs]
        tokens = torch.searchsorted(cdf, targets.unsqueeze(-1), right=True).squeeze(-1)
        vocab = scaled.shape[-1]
        last_positive = vocab - 1 - torch.argmax((probs > 0).flip(-1).to(torch.uint8), dim=-1)
        return torch.minimum(tokens, last_positive)
