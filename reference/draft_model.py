"""The toy draft model standing in for the real DSpark drafter, and the anchor layouts.

The model is an ``lm_head`` (``weight[V_padded, H]`` cropped to ``org_vocab_size``)
plus a Markov head. All weights are drawn on the CPU from the seed, so a seed means
the same numbers on every machine; move the model with ``.to(device)``.

A drafter may have a reduced draft vocabulary: ``draft_vocab_ids``, the sorted target
ids it can propose. In target space it is the same model with its base logits ``-inf``
outside those ids, so every sampler and check sees an honest drafter whose support is
the subset (docs/design.md, "A reduced draft vocabulary").

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
    """``lm_head`` + ``markov_head`` + the ``sample_from_anchor`` flag, and the draft
    vocabulary when it is reduced."""

    draft_vocab_ids: torch.Tensor | None  # [Vd] sorted target ids; None: every id
    off_draft_vocab: torch.Tensor | None  # [V] bool: True outside the draft vocabulary

    def __init__(
        self,
        *,
        lm_head: LmHead,
        markov_head: MarkovHead,
        sample_from_anchor: bool,
        draft_vocab_ids: torch.Tensor | None = None,
    ):
        super().__init__()
        if markov_head.vocab_size != lm_head.org_vocab_size:
            raise ValueError(
                f"markov head vocab {markov_head.vocab_size} != lm_head org_vocab_size "
                f"{lm_head.org_vocab_size}"
            )
        self.lm_head = lm_head
        self.markov_head = markov_head
        self.sample_from_anchor = sample_from_anchor
        off_draft_vocab = None
        if draft_vocab_ids is not None:
            off_draft_vocab = draft_vocab_mask(draft_vocab_ids, vocab_size=self.vocab_size)
        self.register_buffer("draft_vocab_ids", draft_vocab_ids)
        self.register_buffer("off_draft_vocab", off_draft_vocab)

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
        """Base logits ``[N, V]`` for hidden states ``[N, H]`` (``-inf`` outside a reduced
        draft vocabulary); no auxiliary tap."""
        logits = self.lm_head(hidden)
        if self.off_draft_vocab is not None:
            logits = logits.masked_fill(self.off_draft_vocab, float("-inf"))
        return logits, None


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
            draft_vocab_ids=model.draft_vocab_ids,
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
    draft_vocab: int = 0,
) -> ToyDraftModel:
    """A seeded toy drafter built on the CPU: base logits and step biases of order 1.

    ``draft_vocab > 0`` reduces its draft vocabulary to that many target ids, a sorted
    subset drawn from the seed after the weights (the weights are those of the
    full-vocabulary drafter of the same seed)."""
    if vocab_padding < 0:
        raise ValueError(f"vocab_padding must be >= 0, got {vocab_padding}")
    if not (draft_vocab == 0 or 0 < draft_vocab < vocab_size):
        raise ValueError(
            f"draft_vocab must be 0 (the full vocabulary) or in 1..{vocab_size - 1} "
            f"(fewer than vocab_size), got {draft_vocab}"
        )
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(
        vocab_size + vocab_padding, hidden_size, generator=generator, dtype=torch.float32
    )
    draft_vocab_ids = None
    if draft_vocab:
        draft_vocab_ids = torch.randperm(vocab_size, generator=generator)[:draft_vocab].sort()[0]
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
        lm_head=lm_head,
        markov_head=markov_head,
        sample_from_anchor=sample_from_anchor,
        draft_vocab_ids=draft_vocab_ids,
    )


def draft_vocab_mask(draft_vocab_ids: torch.Tensor, *, vocab_size: int) -> torch.Tensor:
    """``[V]`` bool: the target ids outside the draft vocabulary ``draft_vocab_ids`` (a
    strictly increasing int64 vector of target ids, fewer than ``vocab_size``)."""
    ids = draft_vocab_ids
    if ids.dtype != torch.int64 or ids.dim() != 1 or not 0 < ids.numel() < vocab_size:
        raise ValueError(
            f"draft_vocab_ids must be int64 [Vd] with 0 < Vd < vocab_size={vocab_size}, "
            f"got {ids.dtype} {list(ids.shape)}"
        )
    if bool((ids[1:] <= ids[:-1]).any()) or int(ids[0]) < 0 or int(ids[-1]) >= vocab_size:
        raise ValueError(
            f"draft_vocab_ids must be strictly increasing target ids in [0, {vocab_size})"
        )
    return torch.ones(vocab_size, dtype=torch.bool, device=ids.device).index_fill_(0, ids, False)


def query_rows_per_request(*, gamma: int, sample_from_anchor: bool) -> int:
    """``Q``: ``gamma`` rows when sampling from the anchor, else ``gamma + 1``."""
    return gamma if sample_from_anchor else gamma + 1


def drop_anchor_row(hidden_states: torch.Tensor, *, bs: int, gamma: int) -> torch.Tensor:
    """``[bs*(gamma+1), H] -> [bs, gamma, H]``: drop each request's anchor row."""
    return hidden_states.view(bs, gamma + 1, -1)[:, 1:].contiguous()
