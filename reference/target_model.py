"""The synthetic target model of the statistical losslessness oracle.

A seeded first-order Markov chain over a small vocabulary:
``p(x_t | prefix) = softmax(transition_logits[x_{t-1}] / T)`` at the request's
temperature ``T`` (greedy requests: the one-hot argmax), truncated by the request's
top-k, top-p and min-p where they are given (``reference.request_law``). Each row starts from an
anchor drawn uniformly from the vocabulary. Because the chain only looks at the
last token, the exact joint of the first ``m`` tokens after the anchor is a
product of ``m`` transition rows, enumerable over ``V**m`` cells; that is the
expected distribution the oracle compares committed tokens with.
"""

from __future__ import annotations

import torch

from reference.request_law import Truncation


class MarkovTargetModel:
    """``transition_logits[V, V]`` float64: row ``a`` holds the logits of the token after ``a``."""

    def __init__(self, transition_logits: torch.Tensor) -> None:
        if transition_logits.dim() != 2 or transition_logits.shape[0] != transition_logits.shape[1]:
            raise ValueError(
                f"transition_logits must be square [V, V], got {tuple(transition_logits.shape)}"
            )
        if not bool(torch.isfinite(transition_logits).all()):
            raise ValueError("transition_logits must be finite")
        self.transition_logits = transition_logits.to(torch.float64)  # [V, V]

    @property
    def vocab_size(self) -> int:
        return int(self.transition_logits.shape[0])

    @property
    def device(self) -> torch.device:
        return self.transition_logits.device

    def to(self, device: str | torch.device) -> MarkovTargetModel:
        return MarkovTargetModel(self.transition_logits.to(device))

    # -- conditionals -------------------------------------------------------------------------
    def next_token_probs(
        self,
        prev_tokens: torch.Tensor,
        *,
        temperatures: torch.Tensor,
        greedy_mask: torch.Tensor,
        truncation: Truncation | None = None,
    ) -> torch.Tensor:
        """``p(. | prev)`` ``[..., V]`` float64 for prev_tokens ``[...]``.

        temperatures, greedy_mask and ``truncation`` (``None``: none) broadcast against
        ``prev_tokens``; greedy rows get the one-hot argmax of the logits (lowest index on
        ties).
        """
        shape = prev_tokens.shape
        greedy = greedy_mask.expand(shape).reshape(-1)
        # one table row per distinct setting: a few [V, V] softmaxes, then a gather
        setting = torch.where(
            greedy, -1.0, temperatures.to(torch.float64).expand(shape).reshape(-1)
        )
        settings, which = torch.unique(setting, return_inverse=True)  # [U], [N]
        logits = self.transition_logits.unsqueeze(0)  # [1, V, V]
        sampled = torch.softmax(logits / settings.abs().view(-1, 1, 1), dim=-1)  # [U, V, V]
        one_hot = torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        table = torch.where((settings < 0).view(-1, 1, 1), one_hot, sampled)  # [U, V, V]
        probs = table[which, prev_tokens.reshape(-1)].view(*shape, self.vocab_size)
        return probs if truncation is None else truncation.apply(probs)

    def block_probs(
        self,
        *,
        anchor_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        temperatures: torch.Tensor,
        greedy_mask: torch.Tensor,
        truncation: Truncation | None = None,
    ) -> torch.Tensor:
        """Target rows a chain verifier needs: ``[bs, gamma+1, V]`` float64.

        Row ``k`` is ``p(. | anchor, d_0 .. d_{k-1})``; row ``gamma`` is the bonus row
        after all drafts. anchor_tokens ``[bs]``, draft_tokens ``[bs, gamma]``,
        temperatures, greedy_mask and ``truncation`` ``[bs]`` (``None``: none).
        """
        prev = torch.cat([anchor_tokens.unsqueeze(1), draft_tokens], dim=1)  # [bs, gamma+1]
        return self.next_token_probs(
            prev,
            temperatures=temperatures.unsqueeze(1),
            greedy_mask=greedy_mask.unsqueeze(1),
            truncation=None if truncation is None else truncation.unsqueeze(1),
        )

    # -- the start of every row ---------------------------------------------------------------
    def anchor_probs(self) -> torch.Tensor:
        """Distribution of a row's first anchor ``[V]`` float64: uniform."""
        return torch.full(
            (self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64, device=self.device
        )

    def sample_anchors(self, rows: int, *, generator: torch.Generator) -> torch.Tensor:
        """Independent first anchors ``[rows]`` int64 drawn from ``anchor_probs``."""
        return torch.randint(0, self.vocab_size, (rows,), generator=generator, device=self.device)

    # -- the exact expected distribution ------------------------------------------------------
    def joint_probs(
        self, *, m: int, temperature: float, greedy: bool, truncation: Truncation | None = None
    ) -> torch.Tensor:
        """Exact joint of the first ``m`` tokens after a uniform anchor, ``[V**m]`` float64,
        every step truncated by ``truncation`` (scalars; ``None``: none).

        Cells are row-major over ``(x_1, ..., x_m)``: index ``sum_j x_j * V**(m-1-j)``.
        """
        if m <= 0:
            raise ValueError(f"m must be positive, got {m}")
        every_token = torch.arange(self.vocab_size, device=self.device)
        transition = self.next_token_probs(
            every_token,
            temperatures=torch.tensor(temperature, dtype=torch.float64, device=self.device),
            greedy_mask=torch.tensor(greedy, device=self.device),
            truncation=truncation,
        )  # [V, V]: transition[a, x] = p(x | a)
        return self.joint_of(transition, m=m)

    def joint_of(self, transition: torch.Tensor, *, m: int) -> torch.Tensor:
        """The joint of the first ``m`` tokens after a uniform anchor under ``transition``
        ``[V, V]`` (``transition[a, x] = p(x | a)``, a law of this target's rows), laid out
        as ``joint_probs`` lays it out."""
        if m <= 0:
            raise ValueError(f"m must be positive, got {m}")
        vocab = self.vocab_size
        every_token = torch.arange(vocab, device=self.device)
        joint = self.anchor_probs() @ transition  # [V]
        for _ in range(m - 1):
            # the last index of the flattened prefix is the token the next step conditions on
            last = every_token.repeat(joint.numel() // vocab)  # [V**j]
            joint = (joint.unsqueeze(1) * transition[last]).reshape(-1)
        return joint


def make_markov_target(
    *, vocab_size: int, seed: int, logit_scale: float = 1.0
) -> MarkovTargetModel:
    """A seeded Markov target built on the CPU: transition logits ``~ N(0, logit_scale**2)``."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if not logit_scale > 0:
        raise ValueError(f"logit_scale must be positive, got {logit_scale}")
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab_size, vocab_size, generator=generator, dtype=torch.float64)
    return MarkovTargetModel(logits * logit_scale)
