"""A simple confidence function: a seeded linear probe through a sigmoid.

``confidence[b, k] = sigmoid(h[b, k] . w_h + W1[prev[b, k]] . w_e + bias)`` where
``prev`` is the token step ``k`` was conditioned on (the anchor, then the drafts).
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
        self, sample_hidden: torch.Tensor, anchor_tokens: torch.Tensor, tokens: torch.Tensor
    ) -> torch.Tensor:
        """sample_hidden ``[bs, gamma, H]``, anchor ``[bs]``, tokens ``[bs, gamma]``
        -> float32 ``[bs, gamma]``."""
        embedding = self.markov_head.W1(previous_tokens(anchor_tokens, tokens)).float()
        score = sample_hidden.float() @ self.w_hidden + embedding @ self.w_embedding
        return torch.sigmoid(score + self.bias)
