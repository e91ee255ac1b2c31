"""Samplers with one planted defect each, to show the harness names the right reason."""

from __future__ import annotations

import time

import torch

from reference.sampler_base import DraftSamplerBase


class StaleCorrectedSampler(DraftSamplerBase):
    """Samples correctly but never copies the corrected logits into ``corrected_out``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        if self.corrected_out is not None:
            self.corrected_out.zero_()
        tokens, _ = self.model.markov_head.sample_block(
            block.base_logits,
            first_prev_tokens=block.anchor_tokens,
            hidden_states=block.sample_hidden,
            sampler=self.step_sampler(block.bs),
            collect_corrected=False,
        )
        self.emit(block, tokens)


class NotASampler:
    """Has no ``stage_sampling_params``: the harness must refuse it as an --impl."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        del hidden_states, input_ids


class RaisingSampler(DraftSamplerBase):
    """Raises on every call: a recorded result, never a crash of the harness."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        raise RuntimeError("planted failure")


class HangingSampler(DraftSamplerBase):
    """Never returns: the per-call time limit must stop it."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        while True:
            time.sleep(0.01)


class HalfWritingSampler(DraftSamplerBase):
    """Writes only the first request's draft tokens."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        tokens, corrected = self.model.markov_head.sample_block(
            block.base_logits,
            first_prev_tokens=block.anchor_tokens,
            hidden_states=block.sample_hidden,
            sampler=self.step_sampler(block.bs),
        )
        if self.corrected_out is not None:
            self.store_corrected(block.bs, corrected)
        self.out[: self.gamma].copy_(tokens[0])


class NanWritingSampler(DraftSamplerBase):
    """Samples correctly, then writes NaN into the corrected logits of step 0."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        tokens, corrected = self.model.markov_head.sample_block(
            block.base_logits,
            first_prev_tokens=block.anchor_tokens,
            hidden_states=block.sample_hidden,
            sampler=self.step_sampler(block.bs),
        )
        assert corrected is not None
        corrected[:, 0] = float("nan")
        self.store_corrected(block.bs, corrected)
        self.emit(block, tokens)


class WrongShapeSampler(DraftSamplerBase):
    """Replaces ``out`` with a buffer of the wrong shape."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        self.out = torch.zeros(1, dtype=torch.int64)
