"""Samplers that emit a wrong token once in about 50,000 draft positions, whose kept
logits still say the right law: too rare for the statistical oracle's tests and for the
small cases of the per-call matrix, seen by the per-call checks on the oracle's own calls.

- ``RareWrongTokenSampler``: the fixed sampler, except that the ``first``-th sampled
  draft position of an instance's life, and every ``EVERY``-th after it, emits its
  neighbour id instead of the token the walk drew and went on from. Positions are counted
  over sampled rows and the steps before the last, in call order, row-major: a wrong
  token there shows in the next step's kept logits (``teacher_forcing``). At the last
  step a wrong token whose logits say the right law is invisible to every per-call check
  (the next call starts from the verifier's anchor); the oracle's tests alone judge it.
- ``RareWrongGreedyTokenSampler``: the same on greedy rows at the last step (from the
  ``first``-th such position): the wrong token is not the argmax of its kept logits
  (``greedy_rows_argmax``), and no later step is conditioned on it.

The counter lives in the instance, so a decode replays: the oracle's far target (5,000
rows per head) reaches ``first`` in each head's decode, the smaller targets do not.
"""

from __future__ import annotations

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference.block import BlockInputs

EVERY = 50_000  # an altered position, then every this many


class RareWrongTokenSampler(FixedSampler):
    """Once in ``EVERY`` sampled positions before the last step: the neighbour token."""

    first = 12_345  # the first altered position of an instance's life (counted from 0)
    counted = 0  # positions of this instance's life counted so far

    def counted_positions(self, bs: int) -> torch.Tensor:
        """``[bs, gamma]`` bool: the positions of this call that the counter counts."""
        mask = ~self.greedy_mask[:bs].unsqueeze(1).expand(bs, self.gamma).clone()
        mask[:, -1] = False
        return mask

    def emit(self, block: BlockInputs, tokens: torch.Tensor) -> None:
        if self.folded_sampling:
            tokens = self.altered(tokens)
        super().emit(block, tokens)

    def altered(self, tokens: torch.Tensor) -> torch.Tensor:
        counted = self.counted_positions(tokens.shape[0]).flatten()  # [bs*gamma], row-major
        index = self.counted + torch.cumsum(counted.long(), 0) - 1  # each counted one's index
        hit = counted & (index >= self.first) & ((index - self.first) % EVERY == 0)
        self.counted += int(counted.sum())
        if not bool(hit.any()):
            return tokens
        vocab = self.model.vocab_size
        flat = tokens.flatten().clone()
        flat[hit] = (flat[hit] + 1) % vocab  # the planted defect
        return flat.view_as(tokens)


class RareWrongGreedyTokenSampler(RareWrongTokenSampler):
    """Once in ``EVERY`` greedy positions at the last step: the neighbour token."""

    first = 2_345  # a far decode has 5,000 such positions per head

    def counted_positions(self, bs: int) -> torch.Tensor:
        mask = torch.zeros(bs, self.gamma, dtype=torch.bool, device=self.greedy_mask.device)
        mask[:, -1] = self.greedy_mask[:bs]
        return mask
