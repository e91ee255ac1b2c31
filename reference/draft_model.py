"""The toy draft model standing in for the real DSpark drafter, and the anchor layouts.

The model is an ``lm_head`` (``weight[V_padded, H]`` cropped to ``org_vocab_size``)
plus a Markov head. All weights are drawn on the CPU from the seed, so a seed means
the same numbers on every machine; move the model with ``.to(device)``.

Anchor layouts: with ``sample_from_anchor=True`` a request has ``gamma`` query rows
``[anchor, mask...]`` and all of them feed the lm_head and the head; with ``False``
it has ``gamma + 1`` rows and row 0 (the anchor row) is dropped first.
"""

from __future__ import annotations

import torch
from torch import nn

from reference.heads import MarkovHead, make_markov_head


class LmHead(nn.Module):
    """Vocabulary projection whose weight may be padded past ``org_vocab_size``."""

    def __init__(self, weight: torch.Tensor, *, org_vocab_size: int) -> None:
        super().__init__()
        if not 0 < org_vocab_size <= weight.shape[0]:
            raise ValueError(
                f"org_vocab_size must be in 1..{weight.shape[0]} (the padded vocab), "
                f"got {org_vocab_size}"
            )
        self.weight = nn.Parameter(weight, requires_grad=False)  # [V_padded, H]
        self.org_vocab_size = org_vocab_size

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.weight.t())[:, : self.org_vocab_size]  # [N, V]


class ToyDraftModel(nn.Module):
    """``lm_head`` + ``markov_head`` + the ``sample_from_anchor`` flag."""

    def __init__(self, *, lm_head: LmHead, markov_head: MarkovHead, sample_from_anchor: bool):
        super().__init__()
        if markov_head.vocab_size != lm_head.org_vocab_size:
            raise ValueError(
                f"markov head vocab {markov_head.vocab_size} != lm_head org_vocab_size "
                f"{lm_head.org_vocab_size}"
            )
        self.lm_head = lm_head
        self.markov_head = markov_head
        self.sample_from_anchor = sample_from_anchor

    @property
    def vocab_size(self) -> int:
        return self.lm_head.org_vocab_size

    @property
    def hidden_size(self) -> int:
        return int(self.lm_head.weight.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def compute_base_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        """Base logits ``[N, V]`` for hidden states ``[N, H]``; no auxiliary tap."""
        return self.lm_head(hidden), None


class PrecomputedBaseLogits(ToyDraftModel):
    """A drafter whose lm_head is replaced by a lookup of precomputed base logits, so
    a timing of ``__call__`` leaves out the one matmul a sampler change does not touch.

    Shares the lm_head and Markov head modules (no copy); ``compute_base_logits``
    returns the precomputed ``[bs*gamma, V]`` tensor whatever rows it is given.
    """

    def __init__(self, model: ToyDraftModel, *, base_logits: torch.Tensor) -> None:
        super().__init__(
            lm_head=model.lm_head,
            markov_head=model.markov_head,
            sample_from_anchor=model.sample_from_anchor,
        )
        self.base_logits = base_logits  # [bs*gamma, V]

    def compute_base_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        del hidden  # the lookup stands in for the lm_head
        return self.base_logits, None


def make_toy_draft_model(
    *,
    vocab_size: int,
    hidden_size: int,
    markov_rank: int,
    head_kind: str,
    sample_from_anchor: bool,
    seed: int,
    dtype: torch.dtype = torch.float32,
    vocab_padding: int = 0,
) -> ToyDraftModel:
    """A seeded toy drafter built on the CPU: base logits and step biases of order 1."""
    if vocab_padding < 0:
        raise ValueError(f"vocab_padding must be >= 0, got {vocab_padding}")
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(
        vocab_size + vocab_padding, hidden_size, generator=generator, dtype=torch.float32
    )
    lm_head = LmHead((weight / hidden_size**0.5).to(dtype), org_vocab_size=vocab_size)
    markov_head = make_markov_head(
        head_kind,
        vocab_size=vocab_size,
        rank=markov_rank,
        hidden_size=hidden_size,
        seed=seed + 1,
        dtype=dtype,
    )
    return ToyDraftModel(
        lm_head=lm_head, markov_head=markov_head, sample_from_anchor=sample_from_anchor
    )


def query_rows_per_request(*, gamma: int, sample_from_anchor: bool) -> int:
    """``Q``: ``gamma`` rows when sampling from the anchor, else ``gamma + 1``."""
    return gamma if sample_from_anchor else gamma + 1


def drop_anchor_row(hidden_states: torch.Tensor, *, bs: int, gamma: int) -> torch.Tensor:
    """``[bs*(gamma+1), H] -> [bs, gamma, H]``: drop each request's anchor row."""
    return hidden_states.view(bs, gamma + 1, -1)[:, 1:].contiguous()
