"""The DSpark draft sampler after the upstream fix: one Markov walk per proposal.

The walk that samples the draft tokens is the walk whose corrected logits the
verifier reads, so ``q`` is the distribution each token was drawn from.
"""

from __future__ import annotations

import torch

from reference.sampler_base import DraftSamplerBase


class DsparkDraftSampler(DraftSamplerBase):
    """Fills ``out`` (and ``corrected_out`` / ``confidence_out``) for one proposal."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        tokens = self.fused_greedy_tokens(block)
        if tokens is None:
            tokens, corrected = self.model.markov_head.sample_block(
                block.base_logits,
                first_prev_tokens=block.anchor_tokens,
                hidden_states=block.sample_hidden,
                sampler=self.step_sampler(block.bs),
                collect_corrected=self.folded_sampling,
            )
            if self.folded_sampling:
                self.store_corrected(block.bs, corrected)
        self.emit(block, tokens)
