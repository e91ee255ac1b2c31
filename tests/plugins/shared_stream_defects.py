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

The ways a drafter can reach the verifier's numbers through the generator itself, each
caught by the exact check ``torch_stream_shared_with_verifier`` and by nothing else of
the lossless tier (``TORCH_GENERATOR_COUPLINGS``):

- ``VerifierUniformsSampler`` above peeks ahead (``get_state``, draw, ``set_state``);
- ``ClonedGeneratorSampler`` peeks through a clone of the generator;
- ``RewoundGeneratorSampler`` draws its block, then puts the generator back to one
  float64 past where the block began: the verifier's coin of step ``k`` is the
  drafter's uniform of step ``k + 1`` of the same row;
- ``ReseededGeneratorSampler`` rebuilds the server's stream on a generator of its own
  from ``torch.initial_seed()`` and never moves torch's: the verifier reads the same
  words.

And three correct designs that touch the generator without sharing it
(``TORCH_GENERATOR_CORRECT``): ``DisjointOffsetSampler`` reads a clone and moves the
generator past what it read, ``SaltedSeedSampler`` draws from a generator of the
server's seed with a salt, ``HashKeySampler`` from one keyed by a hash of the seed and
the call.
"""

from __future__ import annotations

import hashlib
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


def cloned_generator(device: str) -> torch.Generator:
    """A generator of its own standing where torch's generator stands."""
    clone = torch.Generator(device)
    clone.set_state(default_generator(torch.device(device)).get_state())
    return clone


class ClonedGeneratorSampler(VerifierUniformsSampler):
    """Draws its block, then samples its first rows with the block after it, read from a
    clone of the generator: the verifier's acceptance uniforms."""

    def uniform_block(self, bs: int) -> torch.Tensor:
        block = ReservedBlockInverseCdfSampler.uniform_block(self, bs)
        clone = cloned_generator(self.device)  # the planted defect
        after = torch.rand(bs, self.gamma, dtype=torch.float64, generator=clone, device=self.device)
        rows = self.coupled(bs)
        block[:rows] = after[:rows]
        return block


class RewoundGeneratorSampler(ReservedBlockInverseCdfSampler):
    """Draws its block, then rewinds the generator to one float64 past the block's start."""

    def uniform_block(self, bs: int) -> torch.Tensor:
        generator = default_generator(torch.device(self.device))
        start = generator.get_state()
        block = super().uniform_block(bs)
        generator.set_state(start)  # the planted defect: the verifier reads the block again
        torch.rand(1, dtype=torch.float64, device=self.device)  # the next call's block moves
        return block


class ReseededGeneratorSampler(VerifierUniformsSampler):
    """Samples its first rows from a generator of its own seeded with
    ``torch.initial_seed()`` (built on its first call, then drawn on); the others from a
    block of torch's generator."""

    rebuilt: torch.Generator | None = None

    def uniform_block(self, bs: int) -> torch.Tensor:
        if self.rebuilt is None:  # the planted defect: the server's stream, from its seed
            self.rebuilt = torch.Generator(self.device).manual_seed(torch.initial_seed())
        own = torch.rand(bs, self.gamma, dtype=torch.float64, generator=self.rebuilt)
        rows = self.coupled(bs)
        if rows == bs:
            return own.to(self.device)
        block = ReservedBlockInverseCdfSampler.uniform_block(self, bs)
        block[:rows] = own[:rows].to(self.device)
        return block


class DisjointOffsetSampler(ReservedBlockInverseCdfSampler):
    """Correct: reads its block from a clone of the generator, then moves the generator
    past the same stretch."""

    def uniform_block(self, bs: int) -> torch.Tensor:
        clone = cloned_generator(self.device)
        block = torch.rand(bs, self.gamma, dtype=torch.float64, generator=clone, device=self.device)
        super().uniform_block(bs)  # torch's generator moves past what the clone read
        return block


SALT = 0x5EED_DA7A


class SaltedSeedSampler(ReservedBlockInverseCdfSampler):
    """Correct: a generator of its own, seeded with the server's seed and a salt."""

    salted: torch.Generator | None = None

    def uniform_block(self, bs: int) -> torch.Tensor:
        if self.salted is None:
            self.salted = torch.Generator(self.device).manual_seed(torch.initial_seed() ^ SALT)
        return torch.rand(bs, self.gamma, dtype=torch.float64, generator=self.salted)


class HashKeySampler(ReservedBlockInverseCdfSampler):
    """Correct: each call's block from a generator keyed by a hash of the server's seed
    and the call's index."""

    calls = 0

    def uniform_block(self, bs: int) -> torch.Tensor:
        self.calls += 1
        digest = hashlib.sha256(f"draft:{torch.initial_seed()}:{self.calls}".encode()).digest()
        keyed = torch.Generator(self.device).manual_seed(int.from_bytes(digest[:8], "little"))
        return torch.rand(bs, self.gamma, dtype=torch.float64, generator=keyed)


class NearThresholdUniforms(VerifierUniformsSampler):
    """The verifier's acceptance uniforms on 50% of the rows: the family is suspicious at
    the default rows, not decisive (docs/statistics.md, "Sequential stages")."""

    coupled_fraction = 0.5


class NearThresholdResidual(ResidualDrawSampler):
    """The verifier's residual draw on 50% of the rows."""

    coupled_fraction = 0.5


class FainterUniforms(VerifierUniformsSampler):
    """The verifier's acceptance uniforms on 47% of the rows."""

    coupled_fraction = 0.47


# The ways through the generator itself, and the correct designs that touch it.
TORCH_GENERATOR_COUPLINGS: dict[str, type[ReservedBlockInverseCdfSampler]] = {
    "peeks-ahead": VerifierUniformsSampler,
    "clones-the-generator": ClonedGeneratorSampler,
    "rewinds-the-generator": RewoundGeneratorSampler,
    "reseeds-from-initial-seed": ReseededGeneratorSampler,
}
TORCH_GENERATOR_CORRECT: dict[str, type[ReservedBlockInverseCdfSampler]] = {
    "disjoint-offset": DisjointOffsetSampler,
    "salted-seed": SaltedSeedSampler,
    "hash-key": HashKeySampler,
}

# The couplings, by the name a report gives them, and the correct design beside them.
SHARED_STREAM_DEFECTS: dict[str, type[ReservedBlockInverseCdfSampler]] = {
    "drafter-reads-verifier-uniforms": VerifierUniformsSampler,
    "verifier-residual-reuses-draft-noise": ResidualDrawSampler,
}
SHARED_STREAM_CORRECT = {"reserved-block": ReservedBlockInverseCdfSampler}

# Couplings the family at the default rows does not decide; the sequential stages do.
NEAR_THRESHOLD_COUPLINGS: dict[str, type[ReservedBlockInverseCdfSampler]] = {
    "uniforms-on-50%": NearThresholdUniforms,
    "residual-on-50%": NearThresholdResidual,
    "uniforms-on-47%": FainterUniforms,
}
