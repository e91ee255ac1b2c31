"""Samplers with one planted losslessness defect each, for the statistical oracle's kill
table: every one must be rejected by the oracle's default run, by that oracle alone.

Each is the fixed sampler with one piece changed, so the defect is the only
difference: how the noise is drawn (reused across steps, shared across rows,
frozen across calls, the Gumbel sign flipped, the temperature ignored, one noise row
per tile of rows at the last step), or what is written (corrected logits divided by
the temperature, shifted by one step, without the Markov bias; the token at the last
draft position altered), or which parameters it draws with (the first ones staged,
for every later call).
"""

from __future__ import annotations

from typing import Any

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference import exponential_race
from reference.block import BlockInputs
from reference.noise_floor import MIN_NOISE
from reference.step_samplers import StepSampler


class _RaceOnNoise(FixedSampler):
    """The fixed sampler whose race takes its noise from ``step_noise(bs, step_idx)``."""

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        raise NotImplementedError

    def race_temperatures(self, bs: int) -> torch.Tensor:
        return self.temperatures[:bs]

    def race_greedy_mask(self, bs: int) -> torch.Tensor:
        return self.greedy_mask[:bs]

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return super().step_sampler(bs)

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            return exponential_race(
                step_logits,
                temperatures=self.race_temperatures(bs),
                greedy_mask=self.race_greedy_mask(bs),
                noise=self.step_noise(bs, step_idx),
            )

        return sample_step


class ReusedNoiseSampler(_RaceOnNoise):
    """Noise drawn once, at step 0, then reused by every step of the walk."""

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        assert self.exp_noise is not None
        if step_idx == 0:
            self.exp_noise[:bs].exponential_()
        return self.exp_noise[:bs]


class SharedNoiseAcrossRowsSampler(_RaceOnNoise):
    """One noise row drawn per step and given to every row of the batch."""

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        assert self.exp_noise is not None
        return self.exp_noise[:1].exponential_().expand(bs, -1)


class TiledNoiseRowSampler(_RaceOnNoise):
    """At the last draft step the rows of each tile of ``TILE_ROWS`` slots share the tile's
    first noise row (a kernel that loads one noise row per tile). Far from the target
    the verifier's residual draws hide it; near the target they cannot."""

    TILE_ROWS = 64

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        assert self.exp_noise is not None
        noise = self.exp_noise[:bs].exponential_()
        if step_idx < self.gamma - 1:
            return noise
        first_of_tile = torch.arange(bs, device=noise.device) // self.TILE_ROWS * self.TILE_ROWS
        return noise[first_of_tile]


class FirstStagedParamsSampler(_RaceOnNoise):
    """Draws with the temperatures and greedy rows staged before its first call: the
    staging of later calls reaches the public buffers (which the verifier reads) but
    never the draw, as a graph that captured its first parameters would."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first_staged: tuple[torch.Tensor, torch.Tensor] | None = None  # [max_bs] each

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        assert self.exp_noise is not None
        return self.exp_noise[:bs].exponential_()

    def first_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.first_staged is None:
            self.first_staged = (self.temperatures.clone(), self.greedy_mask.clone())
        return self.first_staged

    def race_temperatures(self, bs: int) -> torch.Tensor:
        return self.first_parameters()[0][:bs]

    def race_greedy_mask(self, bs: int) -> torch.Tensor:
        return self.first_parameters()[1][:bs]


class FrozenNoiseSampler(_RaceOnNoise):
    """Fresh noise per step and row, but drawn on the first call only and replayed on
    every later call (what a graph that captured its noise as a constant does)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.frozen: torch.Tensor | None = None  # [gamma, max_bs, V]

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        if self.frozen is None:
            shape = (self.gamma, self.max_bs, self.model.vocab_size)
            self.frozen = torch.empty(shape, device=self.device).exponential_()
        return self.frozen[step_idx, :bs]


class TemperatureIgnoredSampler(_RaceOnNoise):
    """Draws at T=1 while ``corrected_out`` (scored at the row's T) says otherwise."""

    def step_noise(self, bs: int, step_idx: int) -> torch.Tensor:
        assert self.exp_noise is not None
        return self.exp_noise[:bs].exponential_()

    def race_temperatures(self, bs: int) -> torch.Tensor:
        return torch.ones_like(self.temperatures[:bs])


class FlippedGumbelSignSampler(FixedSampler):
    """``argmax(probs * E)`` instead of ``argmax(probs / E)``: not the softmax law."""

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return super().step_sampler(bs)
        assert self.exp_noise is not None
        noise, temperatures, greedy = (
            self.exp_noise[:bs],
            self.temperatures[:bs],
            self.greedy_mask[:bs],
        )

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            del step_idx
            noise.exponential_()
            probs = torch.softmax(step_logits.float() / temperatures.unsqueeze(-1), dim=-1)
            row_noise = torch.where(greedy.unsqueeze(-1), 1.0, noise.clamp_min(MIN_NOISE))
            return torch.argmax(probs * row_noise, dim=-1)

        return sample_step


class CorrectedOverTemperatureSampler(FixedSampler):
    """Stores ``corrected / T``: the verifier divides by T again."""

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        assert corrected is not None
        scaled = corrected / self.temperatures[:bs].view(-1, 1, 1).to(corrected.dtype)
        super().store_corrected(bs, scaled)


class ShiftedCorrectedSampler(FixedSampler):
    """Off by one step: row ``k`` of ``corrected_out`` holds step ``k-1``'s logits
    (step 0 keeps its own, so the first committed token stays exact)."""

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        assert corrected is not None
        shifted = torch.cat([corrected[:, :1], corrected[:, :-1]], dim=1)  # [bs, gamma, V]
        super().store_corrected(bs, shifted)


class NoMarkovBiasSampler(FixedSampler):
    """Writes the base logits as ``corrected_out``: the Markov bias is dropped from what
    the verifier scores, though the tokens were drawn with it."""

    def prepare_block(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> BlockInputs:
        self.block = super().prepare_block(hidden_states, input_ids)
        return self.block

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        super().store_corrected(bs, self.block.base_logits)


class LastTokenAlteredSampler(FixedSampler):
    """The token at the last draft position is replaced by its neighbour id."""

    def emit(self, block: BlockInputs, tokens: torch.Tensor) -> None:
        altered = tokens.clone()
        altered[:, -1] = (altered[:, -1] + 1) % self.model.vocab_size
        super().emit(block, altered)


class RareArgmaxLastTokenSampler(FixedSampler):
    """In one slot of every ``EVERY``, the last draft token is the argmax of its step
    logits whatever the noise drew: a fixed token (the most likely) on a fraction of
    rows below the oracle's detection bound, which a pass must leave "not ruled out"
    (not part of the kill table)."""

    EVERY = 64

    def emit(self, block: BlockInputs, tokens: torch.Tensor) -> None:
        altered = tokens.clone()
        rows = torch.arange(0, block.bs, self.EVERY, device=tokens.device)
        assert self.corrected_out is not None
        last_step = self.corrected_out[rows * self.gamma + self.gamma - 1]  # [rows, V]
        altered[rows, -1] = last_step.argmax(dim=-1)
        super().emit(block, altered)


STATS_DEFECTS: dict[str, type[FixedSampler]] = {
    "reused-noise-across-steps": ReusedNoiseSampler,
    "noise-shared-across-rows": SharedNoiseAcrossRowsSampler,
    "temperature-ignored-in-draw": TemperatureIgnoredSampler,
    "corrected-divided-by-T": CorrectedOverTemperatureSampler,
    "corrected-shifted-one-step": ShiftedCorrectedSampler,
    "last-draft-token-altered": LastTokenAlteredSampler,
    "gumbel-sign-flipped": FlippedGumbelSignSampler,
    "markov-bias-dropped": NoMarkovBiasSampler,
    "noise-frozen-across-calls": FrozenNoiseSampler,
    "first-staged-parameters-kept": FirstStagedParamsSampler,
    "noise-row-shared-per-tile": TiledNoiseRowSampler,
}
# Seen only because the oracle restages one instance between calls (``restage``).
LIFE_ONLY = ("first-staged-parameters-kept",)
# Seen only at a target near the draft (``DEFAULT_TARGETS``): far, the residual hides it.
NEAR_TARGET_ONLY = ("noise-row-shared-per-tile",)
