"""Markov heads: the per-step bias that conditions draft token ``k`` on token ``k-1``.

One forward of the draft model gives base logits for a whole block of ``gamma``
positions. A Markov head walks the block left to right: at step ``k`` it adds a
bias that depends on the previously chosen token (and, for the gated and rnn
kinds, on the step's hidden state) and a step sampler picks token ``k`` from the
resulting *corrected logits*.

This module owns the three upstream head kinds, the sampling walk
(``sample_block``), its teacher-forced twin (``apply_block_logits``) and the
vanilla head's fused greedy fast path.
"""

from __future__ import annotations

from typing import Literal, cast

import torch
from torch import nn

from reference.step_samplers import StepSampler

HeadKind = Literal["vanilla", "gated", "rnn"]
HEAD_KINDS: tuple[HeadKind, ...] = ("vanilla", "gated", "rnn")


class MarkovHead(nn.Module):
    """Base of the three head kinds: ``W1 = Embedding(V, r)``, ``W2 = Linear(r, V)``.

    Subclasses define ``step_embedding`` (``step_bias`` is ``W2`` of it); the walk
    itself is shared. ``state`` threads
    the rnn recurrence through the walk (``None`` for stateless heads).
    """

    kind: HeadKind
    needs_hidden_states: bool = False

    def __init__(self, *, vocab_size: int, rank: int, hidden_size: int) -> None:
        super().__init__()
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if rank <= 0:
            raise ValueError(f"markov rank must be positive, got {rank}")
        if hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {hidden_size}")
        self.vocab_size = vocab_size
        self.rank = rank
        self.hidden_size = hidden_size
        self.W1 = nn.Embedding(vocab_size, rank)
        self.W2 = nn.Linear(rank, vocab_size, bias=False)

    # -- one step ---------------------------------------------------------------------------
    def initial_state(self, bs: int, *, like: torch.Tensor) -> torch.Tensor | None:
        """Recurrent state at the start of a block (``None`` for stateless heads)."""
        del bs, like
        return None

    def step_embedding(
        self,
        embedding: torch.Tensor,
        hidden_k: torch.Tensor | None,
        state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The step's embedding ``[bs, r]`` that ``W2`` projects to its bias, from
        ``W1[prev]`` (``embedding``), and the state carried to the next step."""
        raise NotImplementedError

    def step_bias(
        self,
        prev_tokens: torch.Tensor,
        hidden_k: torch.Tensor | None,
        state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Bias ``[bs, V]`` for one step given the previous tokens ``[bs]``."""
        step_embedding, state = self.step_embedding(self.W1(prev_tokens), hidden_k, state)
        return self.W2(step_embedding), state

    # -- whole block ------------------------------------------------------------------------
    def _check_block(self, base_logits: torch.Tensor, hidden_states: torch.Tensor | None) -> None:
        if base_logits.dim() != 3 or base_logits.shape[-1] != self.vocab_size:
            raise ValueError(
                f"base_logits must be [bs, L, V={self.vocab_size}], got {tuple(base_logits.shape)}"
            )
        if not self.needs_hidden_states:
            return
        if hidden_states is None:
            raise ValueError(f"the {self.kind} Markov head requires hidden_states, got None")
        bs, length = base_logits.shape[:2]
        expected = (bs, length, self.hidden_size)
        if tuple(hidden_states.shape) != expected:
            raise ValueError(
                f"the {self.kind} Markov head needs hidden_states of shape {expected} "
                f"[bs, L, H], got {tuple(hidden_states.shape)}"
            )

    def _walk(
        self,
        base_logits: torch.Tensor,
        *,
        first_prev_tokens: torch.Tensor,
        prev_token_at: StepSampler,
        hidden_states: torch.Tensor | None,
        collect_corrected: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The left-to-right walk shared by sampling and teacher forcing.

        ``prev_token_at(step_logits, k)`` returns the token emitted at step ``k``,
        which becomes the previous token of step ``k + 1``.
        """
        self._check_block(base_logits, hidden_states)
        bs, length, vocab = base_logits.shape
        tokens = torch.empty(bs, length, dtype=torch.int64, device=base_logits.device)
        corrected = (
            torch.empty(bs, length, vocab, dtype=base_logits.dtype, device=base_logits.device)
            if collect_corrected
            else None
        )  # [bs, L, V]
        if length == 0:
            return tokens, corrected
        state = self.initial_state(bs, like=base_logits)
        prev = first_prev_tokens
        for k in range(length):
            hidden_k = hidden_states[:, k] if hidden_states is not None else None
            bias, state = self.step_bias(prev, hidden_k, state)
            step_logits = base_logits[:, k] + bias.to(base_logits.dtype)  # [bs, V]
            if corrected is not None:
                corrected[:, k] = step_logits
            prev = prev_token_at(step_logits, k)
            tokens[:, k] = prev
        return tokens, corrected

    def sample_block(
        self,
        base_logits: torch.Tensor,
        *,
        first_prev_tokens: torch.Tensor,
        hidden_states: torch.Tensor | None,
        sampler: StepSampler,
        collect_corrected: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Walk the block, sampling each step from its corrected logits.

        base_logits ``[bs, L, V]``, first_prev_tokens ``[bs]`` (the anchor),
        hidden_states ``[bs, L, H]`` or None. Returns tokens ``[bs, L]`` int64 and,
        when ``collect_corrected``, the corrected logits ``[bs, L, V]``.
        """
        return self._walk(
            base_logits,
            first_prev_tokens=first_prev_tokens,
            prev_token_at=sampler,
            hidden_states=hidden_states,
            collect_corrected=collect_corrected,
        )

    def apply_block_logits(
        self,
        base_logits: torch.Tensor,
        *,
        token_ids: torch.Tensor,
        hidden_states: torch.Tensor | None,
    ) -> torch.Tensor:
        """Teacher-forced corrected logits ``[bs, L, V]``: step ``k`` is conditioned
        on the given ``token_ids[:, k]`` (the previous token of that step)."""
        if token_ids.shape != base_logits.shape[:2]:
            raise ValueError(
                f"token_ids must be [bs, L] = {tuple(base_logits.shape[:2])}, "
                f"got {tuple(token_ids.shape)}"
            )
        next_prev = token_ids.roll(-1, dims=1)  # step k hands token_ids[:, k+1] to step k+1
        _, corrected = self._walk(
            base_logits,
            first_prev_tokens=token_ids[:, 0] if token_ids.shape[1] else token_ids[:, :0],
            prev_token_at=lambda _logits, k: next_prev[:, k],
            hidden_states=hidden_states,
            collect_corrected=True,
        )
        return cast(torch.Tensor, corrected)

    def sample_block_greedy_fused(
        self, base_logits: torch.Tensor, *, first_prev_tokens: torch.Tensor
    ) -> torch.Tensor | None:
        """Fused greedy fast path; only the vanilla head has one (``None`` otherwise)."""
        del base_logits, first_prev_tokens
        return None


class VanillaMarkovHead(MarkovHead):
    """``bias = W2(W1[prev])``; ignores hidden states."""

    kind: HeadKind = "vanilla"

    def step_embedding(
        self,
        embedding: torch.Tensor,
        hidden_k: torch.Tensor | None,
        state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        del hidden_k
        return embedding, state

    def sample_block_greedy_fused(
        self, base_logits: torch.Tensor, *, first_prev_tokens: torch.Tensor
    ) -> torch.Tensor | None:
        """Greedy walk with the step logits accumulated in float32.

        ``argmax(base[:, k] + W2 . W1[prev])`` computed as one fp32 ``addmm`` per step,
        never rounded to the model dtype; on near-ties it can legitimately differ
        from the step loop, which rounds the step logits to the model dtype.
        """
        self._check_block(base_logits, None)
        bs, length, _ = base_logits.shape
        tokens = torch.empty(bs, length, dtype=torch.int64, device=base_logits.device)
        w2_t = self.W2.weight.float().t()  # [r, V]
        prev = first_prev_tokens
        for k in range(length):
            embedding = self.W1(prev).float()  # [bs, r]
            prev = torch.argmax(torch.addmm(base_logits[:, k].float(), embedding, w2_t), dim=-1)
            tokens[:, k] = prev
        return tokens


class GatedMarkovHead(MarkovHead):
    """``g = sigmoid(gate(cat[h_k, e]))``, ``bias = W2(g * e)`` with ``e = W1[prev]``."""

    kind: HeadKind = "gated"
    needs_hidden_states = True

    def __init__(self, *, vocab_size: int, rank: int, hidden_size: int) -> None:
        super().__init__(vocab_size=vocab_size, rank=rank, hidden_size=hidden_size)
        self.gate = nn.Linear(hidden_size + rank, rank)

    def step_embedding(
        self,
        embedding: torch.Tensor,
        hidden_k: torch.Tensor | None,
        state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert hidden_k is not None  # guaranteed by _check_block
        gate = torch.sigmoid(self.gate(torch.cat([hidden_k, embedding], dim=-1)))
        return gate * embedding, state


class RnnMarkovHead(MarkovHead):
    """A gated recurrence over the block: state ``s`` starts at zeros per call,
    ``(a, c, o) = split(joint(cat[s, e, h_k]))``, ``s = g*s + (1-g)*tanh(c)`` with
    ``g = sigmoid(a)``, ``bias = W2(tanh(o))``."""

    kind: HeadKind = "rnn"
    needs_hidden_states = True

    def __init__(self, *, vocab_size: int, rank: int, hidden_size: int) -> None:
        super().__init__(vocab_size=vocab_size, rank=rank, hidden_size=hidden_size)
        self.joint = nn.Linear(2 * rank + hidden_size, 3 * rank)

    def initial_state(self, bs: int, *, like: torch.Tensor) -> torch.Tensor | None:
        return torch.zeros(bs, self.rank, dtype=self.W1.weight.dtype, device=like.device)

    def step_embedding(
        self,
        embedding: torch.Tensor,
        hidden_k: torch.Tensor | None,
        state: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert hidden_k is not None and state is not None  # guaranteed by _check_block
        a, c, o = self.joint(torch.cat([state, embedding, hidden_k], dim=-1)).split(self.rank, -1)
        gate = torch.sigmoid(a)
        state = gate * state + (1 - gate) * torch.tanh(c)
        return torch.tanh(o), state


_HEAD_CLASSES: dict[str, type[MarkovHead]] = {
    "vanilla": VanillaMarkovHead,
    "gated": GatedMarkovHead,
    "rnn": RnnMarkovHead,
}


def make_markov_head(
    kind: str,
    *,
    vocab_size: int,
    rank: int,
    hidden_size: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
    bias_scale: float = 1.0,
) -> MarkovHead:
    """A Markov head of the given kind with seeded weights, built on the CPU.

    Weights are drawn from a private ``torch.Generator`` so the global RNG is not
    touched; ``W2`` is scaled so the step bias is of order ``bias_scale``.
    """
    if kind not in _HEAD_CLASSES:
        raise ValueError(f"unknown Markov head kind {kind!r}; expected one of {HEAD_KINDS}")
    with torch.random.fork_rng(devices=[]):  # nn layers' default init must not move the global RNG
        head = _HEAD_CLASSES[kind](vocab_size=vocab_size, rank=rank, hidden_size=hidden_size)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in head.named_parameters():
            fan_in = param.shape[-1] if param.dim() > 1 and not name.startswith("W1") else 1
            scale = bias_scale if name.startswith("W2") else 1.0
            param.copy_(
                torch.randn(param.shape, generator=generator, dtype=torch.float32)
                * scale
                / fan_in**0.5
            )
    return head.to(dtype).requires_grad_(False)
