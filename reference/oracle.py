"""Oracles: the straightforward single-pass proposal and the teacher-forced rebuild.

``ReferenceDraftSampler`` spells the proposal out as its own step loop (gpt-fast
style). It does not use the walk (``sample_block``), the step-sampler wrapper
(``folded_race_sampler``) or ``store_corrected``; it does share with the samplers
under test everything ``DraftSamplerBase`` provides (the buffers, staging the
sampling parameters, the anchor layout and the lm_head in ``prepare_block``, the
fused greedy path and ``emit``, which writes ``out`` and the confidence), the heads'
one-step math (``initial_state``, ``step_bias``) and the plain-torch race
(``exponential_race_torch``, which the samplers' race also runs off CUDA). So it
guards the walk and the wiring of ``__call__``, not the shared pieces; those have
their own tests (heads, step samplers, draft model).

``teacher_forced_logits`` rebuilds the corrected logits a verifier should have seen
from the emitted tokens, with the head's teacher-forced walk (``apply_block_logits``).
"""

from __future__ import annotations

import torch

from reference.block import BlockInputs, previous_tokens
from reference.draft_model import ToyDraftModel
from reference.sampler_base import DraftSamplerBase
from reference.step_samplers import exponential_race_torch


class ReferenceDraftSampler(DraftSamplerBase):
    """A single Markov walk, written out; the ground truth ``fixed`` must equal."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        block = self.prepare_block(hidden_states, input_ids)
        tokens = self.fused_greedy_tokens(block)
        if tokens is None:
            tokens = self._single_walk(block)
        self.emit(block, tokens)

    def _single_walk(self, block: BlockInputs) -> torch.Tensor:
        head, bs, base = self.model.markov_head, block.bs, block.base_logits
        corrected_out = (
            self.corrected_out.view(self.max_bs, self.gamma, -1)
            if self.corrected_out is not None
            else None
        )  # [max_bs, gamma, V]
        state = head.initial_state(bs, like=base)
        prev = block.anchor_tokens
        drafted = []
        for k in range(self.gamma):
            bias, state = head.step_bias(prev, block.sample_hidden[:, k], state)
            step_logits = base[:, k] + bias.to(base.dtype)  # [bs, V]
            if corrected_out is None:
                prev = torch.argmax(step_logits, dim=-1)
            else:
                assert self.exp_noise is not None
                corrected_out[:bs, k] = step_logits
                prev = exponential_race_torch(
                    step_logits,
                    temperatures=self.temperatures[:bs],
                    greedy_mask=self.greedy_mask[:bs],
                    noise=self.exp_noise[:bs].exponential_(),
                )
            drafted.append(prev)
        return torch.stack(drafted, dim=1)  # [bs, gamma]


def teacher_forced_logits(
    *, model: ToyDraftModel, block: BlockInputs, tokens: torch.Tensor
) -> torch.Tensor:
    """Corrected logits ``[bs, gamma, V]`` rebuilt from emitted tokens ``[bs, gamma]``:
    step ``k`` is conditioned on the anchor for ``k = 0``, else on ``tokens[:, k-1]``."""
    return model.markov_head.apply_block_logits(
        block.base_logits,
        token_ids=previous_tokens(block.anchor_tokens, tokens),
        hidden_states=block.sample_hidden,
    )
