"""Samplers with one planted defect each, aimed at one check of ``harness.pipeline.checks``.

Each is the fixed sampler's single walk with one thing done wrong;
``tests/harness/pipeline/test_check_defects.py`` holds each to the check it is aimed at.
"""

from __future__ import annotations

import torch

from reference import folded_race_sampler, greedy_step
from reference.sampler_base import DraftSamplerBase
from reference.step_samplers import StepSampler
from tests.plugins.races import race_on


class _SingleWalk(DraftSamplerBase):
    """The fixed sampler's call, with hooks a defect overrides."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        self.before_walk(block.bs)
        tokens, corrected = self.model.markov_head.sample_block(
            block.base_logits,
            first_prev_tokens=block.anchor_tokens,
            hidden_states=block.sample_hidden,
            sampler=self.walk_sampler(block.bs),
            collect_corrected=self.folded_sampling,
        )
        if self.folded_sampling:
            self.store_corrected(block.bs, self.corrected_to_write(corrected))
        self.emit(block, tokens)
        self.after_walk(block, tokens)

    def before_walk(self, bs: int) -> None:
        del bs

    def walk_sampler(self, bs: int) -> StepSampler:
        return self.step_sampler(bs)

    def corrected_to_write(self, corrected: torch.Tensor | None) -> torch.Tensor | None:
        return corrected

    def after_walk(self, block: object, tokens: torch.Tensor) -> None:
        del block, tokens


class ConfidenceLogitSampler(_SingleWalk):
    """Writes the confidence probe's logit instead of its sigmoid: values outside [0, 1]."""

    def after_walk(self, block: object, tokens: torch.Tensor) -> None:
        assert self.confidence_out is not None
        live = self.confidence_out[: tokens.shape[0]]
        live.copy_(torch.logit(live))


class LogSoftmaxCorrectedSampler(_SingleWalk):
    """Writes ``log_softmax`` of the step logits to ``corrected_out``: the same ``q`` for
    the race, but not the step logits the tokens were conditioned on."""

    def corrected_to_write(self, corrected: torch.Tensor | None) -> torch.Tensor | None:
        assert corrected is not None
        return torch.log_softmax(corrected.float(), dim=-1).to(corrected.dtype)


class DroppedLogitSampler(_SingleWalk):
    """Writes ``-inf`` over the smallest finite corrected logit of every step: an entry the
    drafter's law has, left unwritten (where the base is ``-inf``, ``-inf`` is written)."""

    def corrected_to_write(self, corrected: torch.Tensor | None) -> torch.Tensor | None:
        assert corrected is not None
        smallest = corrected.masked_fill(~corrected.isfinite(), float("inf")).argmin(-1)
        return corrected.scatter(-1, smallest.unsqueeze(-1), float("-inf"))


class NoiseRefreshSampler(_SingleWalk):
    """Redraws the noise buffer once more after the walk ("ready for the next call"):
    ``gamma + 1`` draws per call, the tokens untouched, the draws no longer the
    reference's budget."""

    def after_walk(self, block: object, tokens: torch.Tensor) -> None:
        assert self.exp_noise is not None
        self.exp_noise[: tokens.shape[0]].exponential_()


class NegatedGreedySampler(_SingleWalk):
    """A sign error in the greedy step: greedy folds emit the argmin."""

    def walk_sampler(self, bs: int) -> StepSampler:
        if self.folded_sampling:
            return self.step_sampler(bs)
        return lambda step_logits, step_idx: greedy_step(-step_logits, step_idx)


class UntemperedSampler(_SingleWalk):
    """Ignores the staged temperatures and races at T = 1: at a low staged temperature a
    token can be emitted that has zero probability under its own ``q``."""

    def walk_sampler(self, bs: int) -> StepSampler:
        self.temperatures[:bs] = 1.0
        return self.step_sampler(bs)


class WarmupWalkSampler(_SingleWalk):
    """Runs a discarded greedy walk first ("to warm the head"): two walks per proposal."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        self.model.markov_head.sample_block(
            block.base_logits,
            first_prev_tokens=block.anchor_tokens,
            hidden_states=block.sample_hidden,
            sampler=greedy_step,  # draws no noise: the real walk's draws are untouched
        )
        super().__call__(hidden_states, input_ids)


class GreedyRowsRacedSampler(_SingleWalk):
    """Ignores the greedy mask in a folded batch: greedy rows race on noise like sampled
    ones, so a greedy row can emit a token that is not its argmax."""

    def walk_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return self.step_sampler(bs)
        assert self.exp_noise is not None
        return folded_race_sampler(
            noise_buffer=self.exp_noise[:bs],
            temperatures=self.temperatures[:bs],
            greedy_mask=torch.zeros_like(self.greedy_mask[:bs]),  # planted: no greedy rows
        )


class PrivateGeneratorSampler(_SingleWalk):
    """Draws its ``gamma`` noise tensors from a private generator seeded once: lossless,
    self-consistent, fresh on every call and within the noise budget, but not the
    reference's tokens from the same RNG start."""

    def walk_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return self.step_sampler(bs)
        if not hasattr(self, "generator"):
            self.generator = torch.Generator(device=self.device).manual_seed(20260829)
        noise, generator = self.exp_noise, self.generator
        assert noise is not None
        return race_on(
            self, bs=bs, noise_of_step=lambda _: noise[:bs].exponential_(generator=generator)
        )
