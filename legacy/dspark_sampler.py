"""The DSpark draft sampler before the upstream fix: two Markov walks per proposal.

Kept faithful on purpose, defects included: pass 1 fills ``corrected_out`` (and is
given the raw ``hidden_states.view(bs, gamma, -1)``), then pass 2 runs
unconditionally and its tokens overwrite everything, the fused greedy result too.
"""

from __future__ import annotations

import torch

from reference.sampler_base import DraftSamplerBase
from reference.step_samplers import greedy_step


class DsparkDraftSampler(DraftSamplerBase):
    """Fills ``out`` (and ``corrected_out`` / ``confidence_out``) for one proposal."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        tokens = self.fused_greedy_tokens(block)
        if tokens is None:
            sampler = self.step_sampler(block.bs)
            tokens, corrected = self.model.markov_head.sample_block(
                block.base_logits,
                first_prev_tokens=block.anchor_tokens,
                hidden_states=hidden_states.view(block.bs, self.gamma, -1),
                sampler=sampler,
                collect_corrected=self.folded_sampling,
            )
            if self.folded_sampling:
                self.store_corrected(block.bs, corrected)
        else:
            sampler = greedy_step
        tokens, _ = self.model.markov_head.sample_block(
            block.base_logits,
            first_prev_tokens=block.anchor_tokens,
            hidden_states=block.sample_hidden,
            sampler=sampler,
        )
        self.emit(block, tokens)
