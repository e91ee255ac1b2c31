"""A module of our own writing, shaped like sglang 0.5.16's draft-sampling module (the
contract of docs/releases.md, "sglang 0.5.16"): a graph-folded sampler that drafts
greedily and keeps no step logits, and the module functions the proposer calls for any
other batch. It imports the names that era's file imports (a worker type among them),
so the releases loader's surface is exercised end to end; nothing here is sglang's."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from sglang.srt.environ import envs
from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.speculative.dspark_components.kernels.dspark_draft_model import (
    SampleStepTokens,
)


@dataclass(frozen=True)
class DraftBlockResult:
    draft_tokens: torch.Tensor
    corrected_logits: torch.Tensor | None
    greedy_mask: torch.Tensor
    temperatures: torch.Tensor


def _argmax_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
    del step_idx
    return step_logits.argmax(dim=-1)


class DsparkDraftSampler:
    """Greedy only: one argmax walk of the head, tokens into ``out``."""

    def __init__(self, *, model, gamma, max_bs, device, confidence_fn=None, out=None):
        self.model = model
        self.gamma = int(gamma)
        rows = int(max_bs) * self.gamma
        self.out = torch.empty(rows, dtype=torch.int64, device=device) if out is None else out
        self.confidence_fn = confidence_fn
        self.confidence_out = (
            None
            if confidence_fn is None
            else torch.empty(int(max_bs), self.gamma, dtype=torch.float32, device=device)
        )

    def __call__(self, hidden_states, input_ids):
        bs = hidden_states.shape[0] // self.gamma
        base, tap = self.model.compute_base_logits(hidden_states)
        anchor = input_ids.view(bs, self.gamma)[:, 0]
        hidden = hidden_states.view(bs, self.gamma, -1)
        tokens, _ = self.model.markov_head.sample_block(
            base.view(bs, self.gamma, -1),
            first_prev_tokens=anchor,
            hidden_states=hidden,
            sampler=_argmax_step,
        )
        self.out[: tokens.numel()].copy_(tokens.reshape(-1))
        if self.confidence_out is not None:
            self.confidence_out[:bs].copy_(
                self.confidence_fn(
                    draft_hidden=hidden,
                    anchor_tokens=anchor,
                    draft_tokens=tokens,
                    confidence_tap=tap,
                )
            )


def resolve_greedy_mask(*, bs, sampling_info, device):
    if sampling_info is None:
        return torch.ones(bs, dtype=torch.bool, device=device)
    return (sampling_info.top_ks <= 1).view(-1)


def sample_draft_block(
    *, base_logits, anchor_tokens, draft_hidden, sampling_info, markov_head, device
):
    """The eager block: an exponential race per step on fresh noise."""
    bs = base_logits.shape[0]
    greedy_mask = resolve_greedy_mask(bs=bs, sampling_info=sampling_info, device=device)
    temperatures = sampling_info.temperatures.view(-1).to(torch.float32).clamp_min(1e-5)
    assert envs.SGLANG_DSPARK_FAST_SAMPLING.get()

    def step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
        del step_idx
        noise = torch.empty(step_logits.shape, dtype=torch.float32, device=device)
        return SampleStepTokens.execute(
            step_logits=step_logits,
            temperatures=temperatures,
            greedy_mask=greedy_mask,
            exp_noise=noise.exponential_(1),
        )

    tokens, corrected = markov_head.sample_block(
        base_logits, first_prev_tokens=anchor_tokens, hidden_states=draft_hidden, sampler=step
    )
    return DraftBlockResult(tokens, corrected, greedy_mask, temperatures)


def propose(batch: ScheduleBatch) -> None:
    """The worker's side, never run by the harness: its names are stand-ins."""
    batch.forward()
