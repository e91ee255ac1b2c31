"""The law a request samples from without speculation, in our convention: written once.

For tempered probabilities ``probs = softmax(logits / max(T, 1e-5))`` (float64) and the
request's top-k, top-p and min-p (``reference.sampling_params``), in this order:

1. rank the vocabulary by ``probs``, highest first; equal probabilities rank by token
   id, lowest first (a stable sort): the tie rule at every truncation boundary;
2. top-k: keep ranks ``< k`` (``k == 0``: every rank; ``k == 1`` is greedy, the lowest
   id of the maxima);
3. top-p: keep a rank while the mass of the ranks above it, taken from ``probs``
   before top-k, is ``<= top_p`` (so the top rank always stays, and the token that
   crosses ``top_p`` stays too);
4. min-p: drop a kept token whose probability is ``< min_p * max(probs)``;
5. renormalise what is kept.

Steps 2-4 each only drop tokens, and each reads ``probs`` as they were before any
truncation, as sglang's non-speculative sampler does (docs/sampling-params.md). The
verifier's target law, the oracle's exact law and the checks all call
``truncated_probs``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def truncation_mask(
    probs: torch.Tensor, *, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor
) -> torch.Tensor:
    """``[..., V]`` bool: the tokens the request keeps. probs ``[..., V]``, the
    parameters broadcasting against ``probs[..., 0]``."""
    shape = probs.shape[:-1]
    vocab = probs.shape[-1]
    ranked, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # [..., V]
    rank = torch.arange(vocab, device=probs.device)
    top_k = top_ks.to(probs.device).expand(shape).unsqueeze(-1)  # [..., 1]
    keep = (rank < top_k) | (top_k == 0)
    # the running sum of the ranks above, not cumsum - self: one rounding fewer at the boundary
    mass_above = torch.cat([torch.zeros_like(ranked[..., :1]), ranked.cumsum(-1)[..., :-1]], -1)
    keep &= mass_above <= top_ps.to(probs).expand(shape).unsqueeze(-1)
    keep &= ranked >= min_ps.to(probs).expand(shape).unsqueeze(-1) * ranked[..., :1]
    return torch.zeros_like(keep).scatter_(-1, order, keep)


def top_k_mask(logits: torch.Tensor, *, k: int) -> torch.Tensor:
    """``[..., V]`` bool: the ``k`` most likely tokens of ``logits`` ``[..., V]``, ranked as
    ``truncation_mask`` ranks them (ties: lowest id first): a drafter's own top-k."""
    return truncation_mask(
        logits.to(torch.float64).softmax(-1),
        top_ks=torch.tensor(k, device=logits.device),
        top_ps=torch.tensor(1.0, dtype=torch.float64, device=logits.device),
        min_ps=torch.tensor(0.0, dtype=torch.float64, device=logits.device),
    )


def truncated_probs(
    probs: torch.Tensor, *, top_ks: torch.Tensor, top_ps: torch.Tensor, min_ps: torch.Tensor
) -> torch.Tensor:
    """``probs`` ``[..., V]`` truncated by the request's top-k, top-p and min-p
    (``truncation_mask``) and renormalised."""
    kept = torch.where(
        truncation_mask(probs, top_ks=top_ks, top_ps=top_ps, min_ps=min_ps), probs, 0.0
    )
    return kept / kept.sum(-1, keepdim=True)


@dataclass(frozen=True)
class Truncation:
    """A request's top-k, top-p and min-p, each broadcasting against the rows it truncates."""

    top_ks: torch.Tensor  # int, 0: no top-k
    top_ps: torch.Tensor  # float, 1: no top-p
    min_ps: torch.Tensor  # float, 0: no min-p

    def apply(self, probs: torch.Tensor) -> torch.Tensor:
        """``truncated_probs`` of ``probs`` ``[..., V]`` (a distribution per row) under
        these parameters, on the rows they may truncate (``truncating_rows``); the others
        are left as they are: nothing to drop, nothing to sort."""
        shape = probs.shape[:-1]
        drops = self.truncating_rows(vocab_size=probs.shape[-1]).expand(shape)  # [...]
        truncated = probs.clone()
        truncated[drops] = truncated_probs(
            probs[drops],
            top_ks=self.top_ks.expand(shape)[drops],
            top_ps=self.top_ps.expand(shape)[drops],
            min_ps=self.min_ps.expand(shape)[drops],
        )
        return truncated

    def truncating_rows(self, *, vocab_size: int) -> torch.Tensor:
        """bool, the parameters' broadcast shape: the rows whose parameters may drop a
        token: a top-k in ``2 .. V-1`` (1 is greedy, the argmax either way), a top-p
        below 1 or a min-p above 0."""
        top_ks = self.top_ks
        return ((top_ks > 1) & (top_ks < vocab_size)) | (self.top_ps < 1) | (self.min_ps > 0)

    def truncates(self, *, vocab_size: int) -> bool:
        """Whether any row may drop a token (``truncating_rows``). Reads on the host."""
        return bool(self.truncating_rows(vocab_size=vocab_size).any())

    def select(self, rows: torch.Tensor) -> Truncation:
        """The parameters of ``rows`` (``[n]`` indices into ``[bs]`` parameters)."""
        return Truncation(
            top_ks=self.top_ks[rows], top_ps=self.top_ps[rows], min_ps=self.min_ps[rows]
        )

    def unsqueeze(self, dim: int) -> Truncation:
        return Truncation(
            top_ks=self.top_ks.unsqueeze(dim),
            top_ps=self.top_ps.unsqueeze(dim),
            min_ps=self.min_ps.unsqueeze(dim),
        )
