"""Samplers wrong only over a server's life or at production shapes, and two correct
designs whose draws the harness cannot replay from the call itself.

Each defect is the fixed sampler with one change that a single call on one case does
not show:

- ``FirstCallLogitsSampler``: keeps the base logits of a bucket's first call and reuses
  them on every later call of that batch size;
- ``StagesOncePerBucketSampler``: stages sampling parameters only for a batch size it
  has not seen;
- ``OwnOutBufferSampler``: ignores the ``out=`` tensor it was given and writes its own;
- ``FusedForEveryHeadSampler``: takes the vanilla fused greedy path for gated and RNN
  heads too (their gate and recurrence are dropped);
- ``WrongFromThirdCallSampler``: from its third call on, leaves ``corrected_out`` as the
  previous call wrote it;
- ``LongBlockSampler``: at ``gamma >= 6`` writes the base logits of steps 5 and later as
  their corrected logits (the Markov bias left out);
- ``MidBatchSampler``: at ``8 < bs < 1000`` does the same for rows 8 and later;
- ``AlternatingNoiseSampler``: draws from one of two generators reseeded in turn, so
  every other call repeats the noise;
- ``ExtraWalkFromThirdCallSampler``: from its third call on, runs a warm-up walk first
  (drop-in only: the tokens are right);
- ``TruncationAsGreedyOnRestageSampler``: from its third staging on, stages a sampled
  request that carries a truncation (top-k, top-p or min-p) as greedy.

Correct designs: ``DoubleBufferedNoiseSampler`` draws the next call's noise at the end
of each call (the first call's at construction); ``NumpyNoiseSampler`` takes its noise
from a numpy generator, which the harness cannot see.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import TOP_K_ALL
from reference import BlockInputs, SamplingInfo
from reference.step_samplers import StepSampler
from tests.plugins.races import race_on

WIDE_ROWS = 8  # MidBatchSampler: rows past this one lose the bias
LONG_STEPS = 5  # LongBlockSampler: steps from this one lose the bias


class FirstCallLogitsSampler(FixedSampler):
    """Caches the base logits per batch size: right on a bucket's first call only."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cached_logits: dict[int, torch.Tensor] = {}

    def prepare_block(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> BlockInputs:
        block = super().prepare_block(hidden_states, input_ids)
        base = self.cached_logits.setdefault(block.bs, block.base_logits)  # planted
        return replace(block, base_logits=base)


class StagesOncePerBucketSampler(FixedSampler):
    """Skips staging for a batch size it has staged before."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.staged_sizes: set[int] = set()

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        if bs in self.staged_sizes:
            return  # planted: "this bucket is already staged"
        self.staged_sizes.add(bs)
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)


class OwnOutBufferSampler(FixedSampler):
    """Allocates its own token buffer, whatever ``out=`` the server passed."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "out": None})  # planted


class FusedForEveryHeadSampler(FixedSampler):
    """Runs the vanilla head's fused greedy walk, ``argmax(base + W2 . W1[prev])``, on any
    head when the flag is on: a gated head's gate and an RNN head's state are dropped."""

    def fused_greedy_tokens(self, block: BlockInputs) -> torch.Tensor | None:
        if self.folded_sampling or not self.fused_greedy:
            return None
        head = self.model.markov_head
        tokens = torch.empty(block.base_logits.shape[:2], dtype=torch.int64, device=self.device)
        w2_t = head.W2.weight.float().t()  # [r, V]
        prev = block.anchor_tokens
        for k in range(self.gamma):  # planted: for gated and rnn heads too
            logits = torch.addmm(block.base_logits[:, k].float(), head.W1(prev).float(), w2_t)
            prev = logits.argmax(dim=-1)
            tokens[:, k] = prev
        return tokens


class WrongFromThirdCallSampler(FixedSampler):
    """From its third call on, does not refresh ``corrected_out``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        self.calls += 1
        if self.calls < 3:  # planted: stale corrected logits from the third call
            super().store_corrected(bs, corrected)


class _BiasDroppedSampler(FixedSampler):
    """Writes the base logits as corrected logits wherever ``dropped`` says."""

    def dropped(self, bs: int) -> tuple[slice, slice] | None:
        raise NotImplementedError

    def prepare_block(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> BlockInputs:
        block = super().prepare_block(hidden_states, input_ids)
        self.base_logits = block.base_logits
        return block

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        where = self.dropped(bs)
        if where is not None and corrected is not None:
            corrected = corrected.clone()
            corrected[where] = self.base_logits[where]  # planted
        super().store_corrected(bs, corrected)


class LongBlockSampler(_BiasDroppedSampler):
    """Wrong only at ``gamma >= 6``."""

    def dropped(self, bs: int) -> tuple[slice, slice] | None:
        return (slice(None), slice(LONG_STEPS, None)) if self.gamma >= 6 else None


class MidBatchSampler(_BiasDroppedSampler):
    """Wrong only at ``8 < bs < 1000``."""

    def dropped(self, bs: int) -> tuple[slice, slice] | None:
        return (slice(WIDE_ROWS, None), slice(None)) if 8 < bs < 1000 else None


class AlternatingNoiseSampler(FixedSampler):
    """Two generators reseeded in turn: consecutive calls differ, every other one repeats."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return super().step_sampler(bs)
        assert self.exp_noise is not None
        self.calls += 1
        seed = 1000 + self.calls % 2  # planted: two noise streams, each restarted
        generator = torch.Generator(device=self.device).manual_seed(seed)
        noise = self.exp_noise[:bs]
        return race_on(self, bs=bs, noise_of_step=lambda _: noise.exponential_(generator=generator))


class ExtraWalkFromThirdCallSampler(FixedSampler):
    """From its third call on, a greedy warm-up walk runs before the real one."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls = 0

    def prepare_block(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> BlockInputs:
        block = super().prepare_block(hidden_states, input_ids)
        self.calls += 1
        if self.calls >= 3:  # planted: a second walk per call
            self.model.markov_head.sample_block(
                block.base_logits,
                first_prev_tokens=block.anchor_tokens,
                hidden_states=block.sample_hidden,
                sampler=lambda logits, step: logits.argmax(dim=-1),
                collect_corrected=False,
            )
        return block


class TruncationAsGreedyOnRestageSampler(FixedSampler):
    """Right on the stagings of one case's calls; from its third on (a life's restaging),
    a sampled row with a truncation is staged greedy."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stagings = 0

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)
        self.stagings += 1
        if self.stagings > 2 and sampling_info is not None:  # planted
            top_ks, top_ps, min_ps = (
                getattr(sampling_info, name)[:bs].to(self.greedy_mask.device)
                for name in ("top_ks", "top_ps", "min_ps")
            )
            truncating = ((top_ks > 1) & (top_ks < TOP_K_ALL)) | (top_ps < 1) | (min_ps > 0)
            self.greedy_mask[:bs] |= truncating


class _StepNoiseSampler(FixedSampler):
    """Races step ``k`` on ``self.step_noise[:bs, k]``; subclasses say when it is drawn."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_noise = torch.empty(
            self.max_bs, self.gamma, self.model.vocab_size, device=self.device
        )  # [max_bs, gamma, V] float32

    def step_sampler(self, bs: int) -> StepSampler:
        if not self.folded_sampling:
            return super().step_sampler(bs)
        noise = self.step_noise[:bs]
        return race_on(self, bs=bs, noise_of_step=lambda step_idx: noise[:, step_idx])


class DoubleBufferedNoiseSampler(_StepNoiseSampler):
    """Draws the next call's noise at the end of each call (the first at construction):
    a correct design whose draws explain the previous call's tokens, not the next."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.draw_next()

    def draw_next(self) -> None:
        for k in range(self.gamma):
            self.step_noise[:, k].copy_(torch.empty_like(self.step_noise[:, k]).exponential_())

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if self.folded_sampling:
            self.draw_next()  # ready for the next replay


class NumpyNoiseSampler(_StepNoiseSampler):
    """Exponential noise from a numpy generator: no torch draw for the harness to see."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rng = np.random.default_rng(2026)

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        drawn = self.rng.exponential(size=tuple(self.step_noise.shape))
        self.step_noise.copy_(torch.from_numpy(drawn))
        super().__call__(hidden_states, input_ids)
