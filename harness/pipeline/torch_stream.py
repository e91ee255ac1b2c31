"""Where a CPU torch generator stands in its stream: the seed it was seeded with and the
32-bit words of Mersenne Twister drawn since (``spot_of``), read from its state.

Torch's CPU generator is an MT19937: its state (``get_state()``) holds the seed, the
624-word block it reads from and how many words of that block it has handed out. A
block follows from the one before by the twist, so the position of a state in its
seed's stream is the index of its block in that seed's chain (``SEARCHED_BLOCKS`` at
most) times 624, plus the words read of it. Two generators seeded alike read one
stream, whichever object holds it: a clone, a rewound state or a generator seeded anew
from ``torch.initial_seed()`` all land on positions of the server's stream, and a
generator of a salted seed on another stream (docs/verdicts.md, "One torch generator").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

WORDS_PER_BLOCK = 624
SEARCHED_BLOCKS = 1 << 12  # 2.5 million words past the seed
# ``CPUGeneratorImplState``: the seed (uint64), words left (int32), seeded (int32), the
# next word's index in the block (uint64), the block (624 x uint64), a normal cache
_SEED, _LEFT, _NEXT = slice(0, 8), slice(8, 12), slice(16, 24)
_BLOCK = slice(24, 24 + 8 * WORDS_PER_BLOCK)
STATE_BYTES = 5056


@dataclass(frozen=True)
class StreamSpot:
    """A point of a generator's stream: its seed, and the words drawn since seeding
    (``None``: not within ``SEARCHED_BLOCKS`` of the seed)."""

    seed: int
    word: int | None

    def describe(self) -> str:
        at = "past the searched stretch" if self.word is None else f"word {self.word}"
        return f"{at} of the stream of seed {self.seed}"


@dataclass
class _Chain:
    """The blocks of one seed's stream searched so far, each with its index."""

    seeded: bytes  # the seeded generator's state
    blocks: dict[bytes, int]
    last: bytes


_chains: dict[int, _Chain] = {}  # by seed


def _field(state: bytes, part: slice, dtype: type) -> int:
    return int(np.frombuffer(state[part], dtype=dtype)[0])


def _twisted(seeded: bytes, block: bytes) -> bytes:
    """The block that follows ``block`` in the stream: a scratch generator is put on its
    last word and draws one."""
    state = bytearray(seeded)
    state[_BLOCK] = block
    state[_LEFT] = np.int32(1).tobytes()  # no word left: the next draw twists
    scratch = torch.Generator()
    scratch.set_state(torch.frombuffer(state, dtype=torch.uint8))
    torch.rand(1, generator=scratch)
    return scratch.get_state().numpy().tobytes()[_BLOCK]


def _block_index(seed: int, block: bytes) -> int | None:
    """The index of ``block`` in the chain of ``seed`` (0: the seeded, untwisted block)."""
    chain = _chains.get(seed)
    if chain is None:
        seeded = torch.Generator().manual_seed(seed).get_state().numpy().tobytes()
        chain = _chains[seed] = _Chain(seeded, {seeded[_BLOCK]: 0}, seeded[_BLOCK])
    while block not in chain.blocks and len(chain.blocks) < SEARCHED_BLOCKS:
        chain.last = _twisted(chain.seeded, chain.last)
        chain.blocks.setdefault(chain.last, len(chain.blocks))
    return chain.blocks.get(block)


def spot_of(state: torch.Tensor) -> StreamSpot:
    """Where a CPU generator whose ``get_state()`` is ``state`` stands in its stream."""
    raw = state.numpy().tobytes()
    if len(raw) != STATE_BYTES:
        raise ValueError(f"not a CPU generator's state: {len(raw)} bytes, not {STATE_BYTES}")
    seed = _field(raw, _SEED, np.uint64)
    index = _block_index(seed, raw[_BLOCK])
    if index is None:
        return StreamSpot(seed, None)
    drawn = 0 if index == 0 else (index - 1) * WORDS_PER_BLOCK + _field(raw, _NEXT, np.uint64)
    return StreamSpot(seed, drawn)
