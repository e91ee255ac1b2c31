"""Drafters that share torch's one generator with the verifier, as the PR-era server's
drafter and verifier do: one correct design and two couplings.

The server draws the drafter's noise and then the verifier's draws from the same
generator; each draw advances it, so the two never read the same numbers. Each
sampler here is the correct ``InverseCdfSampler`` with its uniforms drawn as one
``[bs, gamma]`` float64 block per call (column ``k`` at step ``k``), the shape and
dtype of the chain verifier's acceptance uniforms:

- ``ReservedBlockInverseCdfSampler`` (correct): the block is drawn, so the generator
  moves past it and the verifier reads what follows: one stream at disjoint offsets;
- ``VerifierUniformsSampler`` (defect): it draws a block (the generator moves on) and
  then samples with the *next* block, read without moving the generator: the numbers
  the verifier draws next as its acceptance uniforms. No offset between the drafter's
  noise and the verifier's;
- ``ResidualDrawSampler`` (defect): its step 0 uses the number the verifier draws for
  its residual (or bonus) draw, after its acceptance uniforms: the verifier's residual
  draw reuses the drafter's noise.

On independent streams (``--verifier-noise independent``) each defect draws fresh
numbers every call (nothing else reads torch's generator, and what it peeks at is
what its next call draws), so it is lossless there: only the server's own plumbing
shows it.

``coupled_fraction`` (1 here) couples only the first rows of each call, that fraction
of them: the coupling's strength, for the detection bound (docs/statistics.md).
"""

from __future__ import annotations

import math

import torch

from reference.streams import default_generator
from tests.plugins.alternative_samplers import InverseCdfSampler


class ReservedBlockInverseCdfSampler(InverseCdfSampler):
    """Inverse-CDF sampling from one ``[bs, gamma]`` float64 block of uniforms per call,
    drawn from torch's generator at step 0."""

    block: torch.Tensor | None = None  # [bs, gamma] float64

    def uniform_block(self, bs: int) -> torch.Tensor:
        """``[bs, gamma]`` float64 uniforms, drawn: the generator moves past them."""
        return torch.rand(bs, self.gamma, dtype=torch.float64, device=self.device)

    def uniforms(self, bs: int, step_idx: int) -> torch.Tensor:
        if step_idx == 0:
            self.block = self.uniform_block(bs)
        assert self.block is not None
        return self.block[:, step_idx].float()

    def peek(self, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
        """The float64 uniforms of ``shapes`` the generator gives next, in turn, read
        without moving it."""
        generator = default_generator(torch.device(self.device))
        state = generator.get_state()
        try:
            return [torch.rand(*shape, dtype=torch.float64, device=self.device) for shape in shapes]
        finally:
            generator.set_state(state)


class VerifierUniformsSampler(ReservedBlockInverseCdfSampler):
    """Draws its block, then samples with the block after it: the verifier's acceptance
    uniforms."""

    coupled_fraction = 1.0

    def coupled(self, bs: int) -> int:
        """How many of the call's first rows the defect reaches."""
        return math.ceil(self.coupled_fraction * bs)

    def uniform_block(self, bs: int) -> torch.Tensor:
        block = super().uniform_block(bs)  # moves the generator on by one block
        (after,) = self.peek((bs, self.gamma))  # the planted defect: what the verifier draws
        rows = self.coupled(bs)
        block[:rows] = after[:rows]
        return block


class ResidualDrawSampler(VerifierUniformsSampler):
    """Draws its block, then takes step 0's uniform from the verifier's residual draw
    (after the verifier's ``[bs, gamma]`` acceptance uniforms)."""

    def uniform_block(self, bs: int) -> torch.Tensor:
        block = ReservedBlockInverseCdfSampler.uniform_block(self, bs)
        _, residual = self.peek((bs, self.gamma), (bs, 1))  # the planted defect
        rows = self.coupled(bs)
        block[:rows, 0] = residual[:rows, 0]
        return block


# The couplings, by the name a report gives them, and the correct design beside them.
SHARED_STREAM_DEFECTS: dict[str, type[ReservedBlockInverseCdfSampler]] = {
    "drafter-reads-verifier-uniforms": VerifierUniformsSampler,
    "verifier-residual-reuses-draft-noise": ResidualDrawSampler,
}
SHARED_STREAM_CORRECT = {"reserved-block": ReservedBlockInverseCdfSampler}
