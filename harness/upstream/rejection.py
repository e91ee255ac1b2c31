"""The released server's verifier as a second verifier of the statistical oracle.

``BLOCKWISE_REJECTION`` is a ``reference.verifier.Verifier`` that verifies every
sampled row with sglang 0.5.23's own ``BlockwiseRejection`` (its torch path on the
CPU: accept iff ``log p(x) > log u + log q(x)``, the residual ``max(p - q, 0)`` or the
bonus row drawn by Gumbel-max, its own counter-based noise), loaded unchanged from
the installed package. It reads what the server passes it: the candidates ``[anchor |
drafts]``, the target logits before temperature, the draft's kept step logits and its
staged temperatures. Its noise is the package's ``make_rejection_noise`` of the seed
the decode's plumbing gives (the server's random seed, from which the server's worker
builds it too).

Greedy rows (``top_k <= 1``) are not its rows: the server accepts them with its greedy
accept and takes each row from one path or the other (``SelectMixedAccept``); a batch
with greedy rows does not even reach the block-wise kernel upstream, because a row
with ``top_k = 1`` asks for top-k sampling. Here the greedy rows are verified by
``chain_verify`` on one-hot laws, which is that greedy accept: a draft is kept while it
is the target's argmax, and the first other position takes the argmax. See
docs/upstream.md ("The math").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.upstream.loaders.sglang_loader import UpstreamUnavailable, load_sglang
from reference.streams import VerifierNoise
from reference.verifier import (
    VerifyResult,
    VerifyRound,
    VerifyStep,
    chain_verify,
    draft_distribution,
)


def committed_block(
    *, draft_tokens: torch.Tensor, accepted: torch.Tensor, bonus: torch.Tensor
) -> VerifyResult:
    """``[bs, gamma+1]`` committed tokens from accepted lengths and the token after them."""
    bs, gamma = draft_tokens.shape
    positions = torch.arange(gamma + 1, device=draft_tokens.device)
    padded = torch.cat([draft_tokens, torch.full_like(draft_tokens[:, :1], -1)], dim=1)
    committed = torch.where(positions < accepted.unsqueeze(1), padded, -1)
    committed[torch.arange(bs, device=draft_tokens.device), accepted] = bonus
    return VerifyResult(committed=committed, num_committed=accepted + 1)


@dataclass(frozen=True)
class BlockwiseRejectionVerifier:
    """sglang's ``BlockwiseRejection`` on the sampled rows, the greedy accept on the rest."""

    name: str = "sglang-blockwise"

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        loaded = load_sglang()
        rejection = loaded.BlockwiseRejection
        if rejection is None:  # a release from before the module (0.5.22)
            raise UpstreamUnavailable(f"sglang {loaded.version} ships no block-wise rejection")
        # its key and step counter, from the server seed as the worker builds them
        rejection_noise = loaded.make_rejection_noise(noise.seed, device)
        greedy_generator = noise.generator  # never decides a draw

        def verify(round_: VerifyRound) -> VerifyResult:
            draft, target = round_.draft, round_.target
            bs = draft.tokens.shape[0]
            candidates = torch.cat([round_.anchors.unsqueeze(1), draft.tokens], dim=1)
            accepted = torch.empty(bs, dtype=torch.int64, device=candidates.device)
            bonus = torch.empty_like(accepted)
            sampled = ~round_.target_greedy
            if bool(sampled.any()):
                rows = sampled.nonzero().squeeze(1)
                target_logits = target.transition_logits[candidates[rows]]  # [n, gamma+1, V]
                length, token, _ = rejection.execute(
                    candidates=candidates[rows],
                    target_logits=target_logits.reshape(-1, target.vocab_size).float(),
                    draft_logits=draft.step_logits[rows],
                    target_temperatures=round_.target_temperatures[rows].float(),
                    draft_temperatures=draft.temperatures[rows],
                    noise=rejection_noise,
                )
                accepted[rows], bonus[rows] = length.long(), token.long()
            greedy = round_.target_greedy
            if bool(greedy.any()):
                rows = greedy.nonzero().squeeze(1)
                one_hot = chain_verify(
                    target_probs=target.block_probs(
                        anchor_tokens=round_.anchors[rows],
                        draft_tokens=draft.tokens[rows],
                        temperatures=round_.target_temperatures[rows],
                        greedy_mask=greedy[rows],
                    ),
                    draft_probs=draft_distribution(
                        draft.step_logits[rows],
                        temperatures=draft.temperatures[rows],
                        greedy_mask=draft.greedy_mask[rows],
                    ),
                    draft_tokens=draft.tokens[rows],
                    generator=greedy_generator,
                )
                accepted[rows] = one_hot.accepted
                bonus[rows] = one_hot.committed.gather(1, one_hot.accepted.unsqueeze(1)).squeeze(1)
            return committed_block(draft_tokens=draft.tokens, accepted=accepted, bonus=bonus)

        return verify


BLOCKWISE_REJECTION = BlockwiseRejectionVerifier()
