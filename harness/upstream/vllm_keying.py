"""How a vLLM release keys its noise, read from its own Gumbel module: the model the
exact key check (``noise_shared_with_verifier``) holds a call's draft draws against.

Every DSpark release of vLLM keys a draw by the request's seed and a position word, and
the verifier of that release reads the same request's seed at the positions of its
logits rows; what differs between eras is the function of (seed, position word) and
what the acceptance coins read (docs/releases.md, "How each vLLM era keys its noise"):

- 0.25-0.30 (the module has no ``murmur3_hash32``): the Gumbel key of a draw is
  ``tl.randint(seed, position)``, the first word of Triton's Philox block at (seed,
  position), and each token's uniform is ``tl.rand`` of that key and the token id. The
  verifier's residual and bonus draws take their key the same way at the position of
  their row, and its acceptance coin is ``tl.rand(seed, position)``: the same Philox
  block's first word. So one (seed, position) pair is both a verifier row's coin and
  the key of its residual, and a draft draw at that pair shares both. 0.29 and 0.30
  add ``_DRAFT_NOISE_SALT`` to a draft draw's position (``is_drafting``); 0.25-0.28
  have no salt.
- 0.31 and later (``murmur3_hash32``): the words are the Murmur3 hash of the seed
  (0.33 on: with the step mixed in, ``spec_step_seed``), the salted position and the
  token id; the acceptance coins stay on Philox (``tl.rand``), another function.

The position words are compared modulo 2^32 (``RequestKeys.meets``): exact while
positions stay below 2^32, as every request's do here. Two distinct (seed, position)
pairs whose Philox keys collide in 32 bits share noise too; that event (about 2^-32 a
pair) is left to the statistical oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class NoiseKeying:
    """One era's function of (seed, position word), as the check's evidence names it."""

    hash: str  # what a key feeds: the words of the draft's and the residual's noise
    coins: str  # what the verifier's acceptance coins read, in words


MURMUR3 = NoiseKeying(
    hash="murmur3_hash32",
    coins="Philox (tl.rand) at (seed, position): another function, no Murmur3 key",
)
PHILOX = NoiseKeying(
    hash="Philox (tl.randint(seed, position), the key of each token's tl.rand)",
    coins=(
        "tl.rand(seed, position), the first word of the same Philox block whose "
        "tl.randint keys that row's residual: counted among the keys above"
    ),
)


def keying_of(gumbel: ModuleType) -> NoiseKeying:
    """The keying of the release whose Gumbel module (``vllm.v1.worker.gpu.sample.gumbel``)
    is ``gumbel``: Murmur3 where it defines ``murmur3_hash32``, else Triton's Philox."""
    return MURMUR3 if hasattr(gumbel, "murmur3_hash32") else PHILOX


def draft_salt(gumbel: ModuleType) -> int:
    """What the release adds to a draft draw's position (``_DRAFT_NOISE_SALT``; 0.25-0.28
    have none: a draft draw is keyed as the verifier's at the same position)."""
    salt = getattr(gumbel, "_DRAFT_NOISE_SALT", 0)
    return int(getattr(salt, "value", salt))
