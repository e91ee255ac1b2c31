"""A simple confidence function: a seeded linear probe through a sigmoid.

``confidence[b, k] = sigmoid(h[b, k] . w_h + W1[prev[b, k]] . w_e + bias)`` where
``prev`` is the token step ``k`` was conditioned on (the anchor, then the drafts).

One object serves both calling conventions: ours, positional
``(sample_hidden, anchor_tokens, tokens)``, and the server's, by keyword
``(draft_hidden=, anchor_tokens=, draft_tokens=, confidence_tap=)``.
"""

from __future__ import annotations

import torch
from torch import nn

from reference.block import previous_tokens
from reference.heads import MarkovHead


class LinearProbeConfidence(nn.Module):
    """Confidence per draft token from the hidden state and the Markov embedding."""

    def __init__(self, *, markov_head: MarkovHead, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        hidden, rank = markov_head.hidden_size, markov_head.rank
        self.markov_head = markov_head
        self.w_hidden = nn.Parameter(
            torch.randn(hidden, generator=generator, dtype=torch.float32) / hidden**0.5
        )
        self.w_embedding = nn.Parameter(
            torch.randn(rank, generator=generator, dtype=torch.float32) / rank**0.5
        )
        self.bias = nn.Parameter(torch.randn((), generator=generator, dtype=torch.float32))
        self.requires_grad_(False)

    def forward(
        self,
        draft_hidden: torch.Tensor,
        anchor_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        confidence_tap: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """draft_hidden ``[bs, gamma, H]``, anchor ``[bs]``, draft tokens ``[bs, gamma]``
        -> float32 ``[bs, gamma]``. ``confidence_tap`` (the drafter's auxiliary output,
        ``None`` for the toy drafter) is accepted and unused: the probe needs no tap."""
        del confidence_tap  # the toy drafter has no tap; the server passes one by keyword
        embedding = self.markov_head.W1(previous_tokens(anchor_tokens, draft_tokens)).float()
        score = draft_hidden.float() @ self.w_hidden + embedding @ self.w_embedding
        return torch.sigmoid(score + self.bias)
