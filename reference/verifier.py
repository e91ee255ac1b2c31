"""Chain speculative verification: the verifier, what it is handed and what it returns.

``chain_verify`` is standard speculative (rejection) sampling over a chain of
``gamma`` drafts, vectorised over rows, drawing from its own generator: draft
``x`` at position ``k`` is accepted with probability ``min(1, p(x)/q(x))``; the
first rejection is replaced by a draw from ``normalize(max(0, p - q))``; when
every draft is accepted a bonus token comes from the next target row. It is
lossless exactly when ``q`` is the distribution each draft token was drawn from.
``draft_distribution`` is the one place ``q = softmax(corrected / T)`` is computed.

The verifier is a plain value (``Verifier``): ``CHAIN_VERIFIER`` (``chain_verify``)
by default, or any other model of the server's verifier, such as the released
server's block-wise rejection (``harness.upstream``). Each round of a decode
(``reference.decode``) hands it one ``VerifyRound``, with the ``DraftBlock`` it read of
the sampler's public interface (``read_draft_block``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from reference.request_law import Truncation
from reference.streams import VerifierNoise
from reference.streams import derived_seeds as derived_seeds
from reference.target_model import MarkovTargetModel


@dataclass(frozen=True)
class VerifyResult:
    """One verification round. Tokens past ``num_committed`` are ``-1``."""

    committed: torch.Tensor  # [bs, gamma+1] int64
    num_committed: torch.Tensor  # [bs] int64, accepted drafts + 1
    # [bs, gamma+1, V]: the target law the drafts were scored against, where the verifier
    # states it (None: it does not), for the per-call check of each request's truncation
    target_probs: torch.Tensor | None = None

    @property
    def accepted(self) -> torch.Tensor:
        return self.num_committed - 1


def draft_distribution(
    corrected_logits: torch.Tensor, *, temperatures: torch.Tensor, greedy_mask: torch.Tensor
) -> torch.Tensor:
    """The ``q`` a verifier scores drafts with: ``[bs, gamma, V]`` float64.

    corrected_logits ``[bs, gamma, V]``, temperatures and greedy_mask ``[bs]``.
    Sampled rows: ``softmax(corrected / T)``; greedy rows: the one-hot argmax.
    """
    logits = corrected_logits.to(torch.float64)
    sampled = torch.softmax(logits / temperatures.to(torch.float64).view(-1, 1, 1), dim=-1)
    if not bool(greedy_mask.any()):
        return sampled
    one_hot = torch.zeros_like(sampled).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return torch.where(greedy_mask.view(-1, 1, 1), one_hot, sampled)


def sample_categorical(probs: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
    """One draw per row from unnormalised non-negative weights ``[bs, V]`` (inverse CDF)."""
    uniforms = torch.rand(
        probs.shape[0], generator=generator, dtype=probs.dtype, device=probs.device
    )
    return categorical_at(probs, uniforms=uniforms)


def categorical_at(probs: torch.Tensor, *, uniforms: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF draw of each row of weights ``[bs, V]`` at its uniform ``[bs]``."""
    cdf = probs.cumsum(dim=-1)  # [bs, V]
    threshold = uniforms.to(cdf.dtype).unsqueeze(1) * cdf[:, -1:]
    # token i wins when cdf[i-1] <= t < cdf[i]: a zero-weight token (flat cdf) never does
    return (cdf <= threshold).sum(dim=-1).clamp_max(probs.shape[-1] - 1)


def chain_verify(
    *,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    generator: torch.Generator,
) -> VerifyResult:
    """Chain speculative sampling.

    target_probs ``[bs, gamma+1, V]`` (row ``k`` conditioned on the anchor and the
    first ``k`` drafts), draft_probs ``[bs, gamma, V]``, draft_tokens ``[bs, gamma]``.
    The acceptance uniforms ``[bs, gamma]`` are drawn first, then the residual's.
    """
    bs, gamma = draft_tokens.shape
    dtype, device = target_probs.dtype, target_probs.device
    accept = torch.rand(bs, gamma, generator=generator, dtype=dtype, device=device)
    residual = torch.rand(bs, generator=generator, dtype=dtype, device=device)
    return chain_verify_at(
        target_probs=target_probs,
        draft_probs=draft_probs,
        draft_tokens=draft_tokens,
        accept_uniforms=accept,
        residual_uniforms=residual,
    )


def chain_verify_at(
    *,
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    accept_uniforms: torch.Tensor,
    residual_uniforms: torch.Tensor,
) -> VerifyResult:
    """``chain_verify`` at given uniforms: ``[bs, gamma]`` for the acceptances and ``[bs]``
    for the residual (or bonus) draw, so a server keying its draws per request (or a
    row with no drafts, ``gamma = 0``: one token from the target) verifies the same way."""
    bs, gamma = draft_tokens.shape
    rows = torch.arange(bs, device=draft_tokens.device)
    p_draft = target_probs[:, :gamma].gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)
    q_draft = draft_probs.gather(-1, draft_tokens.unsqueeze(-1)).squeeze(-1)  # [bs, gamma]
    uniforms = accept_uniforms.to(p_draft.dtype)
    # u < p/q without dividing: q = 0 (a token its own q calls impossible) is accepted iff p > 0
    accept = uniforms * q_draft < p_draft  # [bs, gamma]
    accepted = accept.long().cumprod(dim=1).sum(dim=1)  # [bs], leading accepts
    # at the first rejection q is subtracted; after all gamma accepted it is zero (the bonus)
    bonus_q = draft_probs.new_zeros(bs, 1, target_probs.shape[-1])
    padded_q = torch.cat([draft_probs, bonus_q], dim=1)
    p_next, q_next = target_probs[rows, accepted], padded_q[rows, accepted]  # [bs, V]
    residual = (p_next - q_next).clamp_min(0.0)
    # p == q leaves no residual; a rejection is then impossible unless p(x) = q(x) = 0
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_next)
    extra_token = categorical_at(residual, uniforms=residual_uniforms)  # [bs]
    positions = torch.arange(gamma + 1, device=draft_tokens.device)
    committed = torch.cat([draft_tokens, draft_tokens.new_full((bs, 1), -1)], dim=1)
    committed = torch.where(positions < accepted.unsqueeze(1), committed, -1)
    committed[rows, accepted] = extra_token
    return VerifyResult(committed=committed, num_committed=accepted + 1, target_probs=target_probs)


@dataclass(frozen=True)
class DraftBlock:
    """What a verifier reads of one drafted round (the sampler's outputs, live rows only)."""

    tokens: torch.Tensor  # [bs, gamma] int64
    step_logits: torch.Tensor  # [bs, gamma, V]: the kept pre-temperature logits each draw used
    temperatures: torch.Tensor  # [bs] float32, as staged (clamped)
    greedy_mask: torch.Tensor  # [bs] bool


@dataclass(frozen=True)
class VerifyRound:
    """One round as a verifier sees it: the anchors, the draft block, the target."""

    anchors: torch.Tensor  # [bs] int64
    draft: DraftBlock
    target: MarkovTargetModel
    target_temperatures: torch.Tensor  # [bs] float64 (0 on greedy rows)
    target_greedy: torch.Tensor  # [bs] bool
    # [bs] each: the requests' top-k, top-p, min-p (reference.request_law); None: none
    target_truncation: Truncation | None = None


VerifyStep = Callable[[VerifyRound], VerifyResult]


class Verifier(Protocol):
    """A model of the server's verifier: ``start`` gives one decode's verify step, its
    random streams those ``noise`` gives (so a decode replays)."""

    @property
    def name(self) -> str: ...

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep: ...


@dataclass(frozen=True)
class ChainVerifier:
    """``chain_verify`` on ``q = draft_distribution(...)`` and the target's block rows
    under each request's law (its temperature, then its truncation), drawing from the
    plumbing's torch generator."""

    name: str = "chain"
    reads_truncation: bool = True  # its target law is each request's (reference.request_law)

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        generator = noise.generator

        def verify(round_: VerifyRound) -> VerifyResult:
            draft = round_.draft
            return chain_verify(
                target_probs=round_.target.block_probs(
                    anchor_tokens=round_.anchors,
                    draft_tokens=draft.tokens,
                    temperatures=round_.target_temperatures,
                    greedy_mask=round_.target_greedy,
                    truncation=round_.target_truncation,
                ),  # [bs, gamma+1, V]
                draft_probs=draft_distribution(
                    draft.step_logits,
                    temperatures=draft.temperatures,
                    greedy_mask=draft.greedy_mask,
                ),  # [bs, gamma, V]
                draft_tokens=draft.tokens,
                generator=generator,
            )

        return verify


CHAIN_VERIFIER = ChainVerifier()


def read_draft_block(sampler: Any, rows: int) -> DraftBlock:
    """The draft block of a sampler in our convention (``out``, ``corrected_out``, the
    staged ``temperatures`` and ``greedy_mask``), on the sampler's device; each buffer
    must be a plain tensor (``plain_buffer``)."""
    gamma = int(sampler.gamma)
    out, corrected_out, temperatures, greedy_mask = (
        plain_buffer(sampler, name)
        for name in ("out", "corrected_out", "temperatures", "greedy_mask")
    )
    return DraftBlock(
        tokens=out[: rows * gamma].view(rows, gamma),
        step_logits=corrected_out[: rows * gamma].view(rows, gamma, -1),
        temperatures=temperatures[:rows],
        greedy_mask=greedy_mask[:rows],
    )


def plain_block(block: DraftBlock) -> DraftBlock:
    """``block``, refused (``TypeError``) unless every field is exactly a ``torch.Tensor``
    (whatever convention read it): a subclass decides what its own operators return."""
    for name, value in vars(block).items():
        if type(value) is not torch.Tensor:
            raise TypeError(f"{name} must be a plain torch.Tensor, got {type(value).__qualname__}")
    return block


DraftReader = Callable[[Any, int], DraftBlock]


def plain_buffer(sampler: Any, name: str) -> torch.Tensor:
    """The sampler's buffer ``name``, refused (``TypeError``) unless it is exactly a
    ``torch.Tensor``: a subclass decides what its own operators return."""
    value = getattr(sampler, name, None)
    if type(value) is not torch.Tensor:
        raise TypeError(f"{name} must be a plain torch.Tensor, got {type(value).__qualname__}")
    return value
