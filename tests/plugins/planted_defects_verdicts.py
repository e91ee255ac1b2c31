"""Samplers with one planted defect each, one per lossless check the verdicts added.

Each is the fixed sampler with a single change, so exactly the named check fails:

- ``OutPastBatchSampler``, ``CorrectedPastBatchSampler``, ``ConfidencePastBatchSampler``:
  also write the rows of the next graph bucket (``no_writes_outside_batch``);
- ``FrozenNoiseSampler``: reseeds a private generator on every call, so every call
  draws the same noise (``fresh_noise``);
- ``InputMutatingSampler``: scales its hidden states in place (``inputs_unchanged``);
- ``WrongTemperatureSampler``: races at three times the staged temperature, so the draws,
  replayed with the staged temperatures, do not explain the tokens (``noise_replay``).
"""

from __future__ import annotations

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference import exponential_race, query_rows_per_request
from reference.step_samplers import StepSampler
from tests.plugins.races import race_on


class OutPastBatchSampler(FixedSampler):
    """Writes the draft tokens, then zeroes ``out[bs*gamma:]`` (another bucket's rows)."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        bs = input_ids.shape[0] // query_rows_per_request(
            gamma=self.gamma, sample_from_anchor=self.model.sample_from_anchor
        )
        self.out[bs * self.gamma :] = 0  # planted: the rows of the next graph bucket


class CorrectedPastBatchSampler(FixedSampler):
    """Also writes the row past the live batch of ``corrected_out``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if self.corrected_out is not None:
            self.corrected_out[-1].zero_()


class ConfidencePastBatchSampler(FixedSampler):
    """Also writes the last row of ``confidence_out``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if self.confidence_out is not None:
            self.confidence_out[-1].fill_(0.5)


class FrozenNoiseSampler(FixedSampler):
    """Draws its noise from a generator reseeded on every call: the same noise each time."""

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return super().step_sampler(bs)
        assert self.exp_noise is not None
        generator = torch.Generator(device=self.device).manual_seed(1234)  # planted: per call
        noise = self.exp_noise[:bs]
        return race_on(self, bs=bs, noise_of_step=lambda _: noise.exponential_(generator=generator))


class InputMutatingSampler(FixedSampler):
    """Samples correctly, then scales ``hidden_states`` in place."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        hidden_states.mul_(2)


class WrongTemperatureSampler(FixedSampler):
    """Races at three times the staged temperature while ``corrected_out`` and the
    staged temperatures say otherwise: ``q`` is not what the tokens were drawn from."""

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return super().step_sampler(bs)
        assert self.exp_noise is not None
        noise = self.exp_noise[:bs]

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            del step_idx
            return exponential_race(
                step_logits,
                temperatures=3 * self.temperatures[:bs],  # planted: not the staged T
                greedy_mask=self.greedy_mask[:bs],
                noise=noise.exponential_(),
            )

        return sample_step
