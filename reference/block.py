"""Splitting one proposal's inputs into what the lm_head and the Markov head see.

``prepare_block`` is the common prefix of every draft sampler's ``__call__``
(validation, anchor layout, base logits, anchor tokens) and also what the oracles
use to rebuild a proposal's inputs, so samplers and checks never disagree on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference.draft_model import ToyDraftModel, drop_anchor_row, query_rows_per_request


@dataclass(frozen=True)
class BlockInputs:
    """One proposal's inputs after the anchor layout has been applied."""

    bs: int
    base_logits: torch.Tensor  # [bs, gamma, V], model dtype
    anchor_tokens: torch.Tensor  # [bs] int64
    sample_hidden: torch.Tensor  # [bs, gamma, H], the rows the heads see


def prepare_block(
    *,
    model: ToyDraftModel,
    gamma: int,
    max_bs: int,
    hidden_states: torch.Tensor,
    input_ids: torch.Tensor,
) -> BlockInputs:
    """Validate the inputs of one call and apply the anchor layout.

    hidden_states ``[bs*Q, H]``, input_ids ``[bs*Q]`` integer, where ``Q = gamma``
    when the model samples from the anchor and ``gamma + 1`` otherwise.
    """
    q = query_rows_per_request(gamma=gamma, sample_from_anchor=model.sample_from_anchor)
    if hidden_states.dim() != 2 or hidden_states.shape[1] != model.hidden_size:
        raise ValueError(
            f"hidden_states must be [bs*{q}, H={model.hidden_size}], "
            f"got {tuple(hidden_states.shape)}"
        )
    rows = hidden_states.shape[0]
    if rows == 0 or rows % q:
        raise ValueError(
            f"hidden_states has {rows} rows, not a positive multiple of the {q} query rows "
            f"per request (gamma={gamma}, sample_from_anchor={model.sample_from_anchor})"
        )
    bs = rows // q
    if bs > max_bs:
        raise ValueError(f"batch of {bs} requests exceeds max_bs={max_bs}")
    if input_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"input_ids must be int64 or int32, got {input_ids.dtype}")
    if tuple(input_ids.shape) != (rows,):
        raise ValueError(
            f"input_ids must be [{rows}] to match hidden_states, got {tuple(input_ids.shape)}"
        )
    if model.sample_from_anchor:
        sample_hidden = hidden_states.view(bs, gamma, -1)  # [bs, gamma, H]
        model_hidden = hidden_states
    else:
        sample_hidden = drop_anchor_row(hidden_states, bs=bs, gamma=gamma)  # [bs, gamma, H]
        model_hidden = sample_hidden.view(bs * gamma, -1)
    base_logits, _ = model.compute_base_logits(model_hidden)
    return BlockInputs(
        bs=bs,
        base_logits=base_logits.view(bs, gamma, -1),
        anchor_tokens=input_ids.view(bs, q)[:, 0].long(),
        sample_hidden=sample_hidden,
    )


def previous_tokens(anchor_tokens: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``[bs, L]``: the token each step is conditioned on (anchor, then tokens[:, :-1])."""
    return torch.cat([anchor_tokens.unsqueeze(1), tokens[:, :-1]], dim=1)
