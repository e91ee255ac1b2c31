"""The random streams of one decode: where the drafter's noise and the verifier's draws
come from, derived from one seed (``DecodeStreams``).

``independent_streams`` gives the anchors, the drafter (torch's global RNG) and the
verifier streams of their own, a control; ``shared_torch_streams`` is our convention's
and the PR-era server's plumbing: the drafter and the verifier draw in turn from
torch's one generator, disjoint because each draw advances it. A released server's
plumbing is another ``DecodeStreams`` (``harness.upstream``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch


class RequestStreams(Protocol):
    """A server whose streams are keyed per request (vLLM: each request's seed and
    positions key the drafter's and the verifier's draws): the decode loop tells it
    which rows each call of a round drafts, before the round, and how many tokens each
    row committed, after it; the drafter and the verifier read it."""

    def start_round(self, batches: Sequence[torch.Tensor]) -> None: ...

    def commit(self, num_committed: torch.Tensor) -> None: ...


def derived_seeds(seed: int, count: int) -> list[int]:
    """Independent seeds for the streams of one run, derived from its seed."""
    generator = torch.Generator().manual_seed(seed)
    return [int(s) for s in torch.randint(0, 2**62, (count,), generator=generator)]


@dataclass(frozen=True)
class VerifierNoise:
    """What a verifier draws from in one decode: the seed a verifier with counter-based
    streams derives them from (the server's), the torch generator a verifier that
    draws from torch's RNG reads (on a shared plumbing, the drafter's own), and, where
    the server keys its draws per request, the requests' keys the drafter reads too."""

    seed: int
    generator: torch.Generator = field(compare=False)
    requests: RequestStreams | None = field(default=None, compare=False)


@dataclass(frozen=True)
class DecodeStreams:
    """Every random stream of one decode: the first anchors' seed, the seed torch's
    global RNG (a drafter drawing from it) starts at, and what the verifier draws from.
    ``shared``: the drafter's and the verifier's streams come from one source, as a
    server derives them (otherwise independent, a control); ``server``: the released
    server whose plumbing this is (``None``: ours, the PR-era server's or none);
    ``requests``: the per-request keys a server's drafter and verifier both read (also
    on ``verifier``), kept up to date by the decode loop."""

    anchor_seed: int
    drafter_seed: int
    verifier: VerifierNoise
    shared: bool
    server: str | None = None
    requests: RequestStreams | None = field(default=None, compare=False)


def independent_streams(seed: int, *, device: torch.device) -> DecodeStreams:
    """Three independent streams from ``seed``: anchors, the drafter's, the verifier's."""
    anchor_seed, verifier_seed, noise_seed = derived_seeds(seed, 3)
    return DecodeStreams(
        anchor_seed=anchor_seed,
        drafter_seed=noise_seed,
        verifier=VerifierNoise(
            seed=verifier_seed, generator=torch.Generator(device).manual_seed(verifier_seed)
        ),
        shared=False,
    )


def default_generator(device: torch.device) -> torch.Generator:
    """Torch's own generator of ``device``: what a draw without ``generator=`` reads."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    return torch.default_generator


def shared_torch_streams(seed: int, *, device: torch.device) -> DecodeStreams:
    """The PR-era server's plumbing: torch's generator seeded with the server seed, the
    drafter's noise and the verifier's draws taken from it in turn (each draw advances
    it, so the two never read the same numbers unless one rewinds it)."""
    anchor_seed = derived_seeds(seed, 3)[0]
    return DecodeStreams(
        anchor_seed=anchor_seed,
        drafter_seed=seed,
        verifier=VerifierNoise(seed=seed, generator=default_generator(device)),
        shared=True,
    )
