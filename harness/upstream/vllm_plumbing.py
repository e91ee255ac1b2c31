"""vLLM 0.33's plumbing: one request's seed and positions key both the draft's Gumbel
noise and the verifier's draws (docs/upstream.md, "The server's own randomness").

As read from the installed package: every request has one seed in its slot
(``sampling_states.seeds``), copied into the drafter's ``seeds`` and read by
``rejection_sample``. A request whose anchor (its last committed token) sits at
position ``P``:

- draft step ``s`` predicts position ``P + s + 1`` (``sample_pos``) and keys its draw by
  ``P + s``: the hash ``murmur3_hash32`` of the request's seed with the step mixed into
  its high word (``spec_step_seed``), the position plus ``_DRAFT_NOISE_SALT`` (the
  drafting flag), and each token id;
- the verifier's logits row ``i = 0 .. gamma`` of that request is at position
  ``P + i``: the acceptance coin of draft ``i`` is ``tl.rand(seed, P + i)`` (Triton's
  Philox, another function), the residual or bonus draw of row ``i`` the same Murmur3
  hash of the request's seed, unmixed, at ``P + i``, unsalted;
- the request's positions move on by the tokens it commits.

So at the same position the draft of step 0 and the verifier's residual are kept apart
by the salt alone, later steps by the step mixed into the seed too. ``RequestPlumbing``
is that plumbing for the oracle's decode (the drafter and ``vllm-rejection`` read its
seeds and positions); ``observe_draft_keys`` records the keys a call's draft draws
read, computed with the package's own ``spec_step_seed`` and salt, for the exact check
``noise_shared_with_verifier``.
"""

from __future__ import annotations

import hashlib
import importlib
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from harness.plugins.conventions import WORD, DraftKey, KeyedDraws, RequestKeys
from harness.upstream.loaders.vllm_loader import (
    GUMBEL_MODULE,
    SPECULATOR_MODULE,
    with_fixed_costs_cached,
)
from harness.upstream.noise_words import interpreted
from harness.upstream.vllm_keying import draft_salt, keying_of

SEED_BITS = 63
FIRST_POSITION = 0  # each request's first anchor: a one-token prompt
# The second word of the fp64 draw (``murmur3_uniform64``) hashes in this domain; the
# package writes it inline (gumbel.py, murmur3_uniform64), so it is mirrored here.
FP64_DOMAIN = 0x9E3779B9


def seeds_of(seed: int, rows: int, *, label: str) -> list[int]:
    """``rows`` request seeds from ``seed`` (63 bits of sha256 each)."""
    seeds = []
    for row in range(rows):
        digest = hashlib.sha256(f"{label}:{seed}:{row}".encode()).digest()
        seeds.append(int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS))
    return seeds


class RequestPlumbing:
    """The requests of one decode as vLLM's server keys them: a seed and an anchor
    position per row (rows known on the first round); the decode loop says which rows
    each call drafts (``start_round``) and what each row committed (``commit``)."""

    def __init__(self, *, seed: int, device: torch.device) -> None:
        self.seed = seed
        self.device = device
        self.seeds: torch.Tensor | None = None  # [rows] int64
        self.positions: torch.Tensor | None = None  # [rows] int64: each anchor's position
        self.first: torch.Tensor | None = None  # [rows]: each request's first anchor position
        self._calls: deque[torch.Tensor] = deque()

    def start_round(self, batches: Sequence[torch.Tensor]) -> None:
        if self.seeds is None:
            rows = sum(int(b.shape[0]) for b in batches)
            self.seeds = torch.tensor(
                seeds_of(self.seed, rows, label="vllm-request"), dtype=torch.int64
            ).to(self.device)
            self.positions = torch.full((rows,), FIRST_POSITION, dtype=torch.int64).to(self.device)
            self.first = self.positions.clone()
        self._calls = deque(b.to(self.device) for b in batches)

    def next_call(self) -> torch.Tensor:
        """The decode rows the next draft call of the round drafts, in batch order."""
        if not self._calls:
            raise RuntimeError("a draft call outside a decode round of this plumbing")
        return self._calls.popleft()

    def commit(self, num_committed: torch.Tensor) -> None:
        assert self.positions is not None
        self.positions = self.positions + num_committed.to(self.positions)

    def seeds_and_positions(self, *, bs: int, gamma: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What ``rejection_sample`` reads for a round of every row (row ``i`` in slot
        ``i``): ``[bs]`` seeds and ``[bs * (gamma + 1)]`` positions, each request's
        anchor position then one more per draft."""
        if self.seeds is None or self.positions is None or self.seeds.shape[0] != bs:
            raise ValueError(f"the plumbing holds no round of {bs} rows")
        steps = torch.arange(gamma + 1, dtype=torch.int64, device=self.device)
        return self.seeds, (self.positions.unsqueeze(1) + steps).reshape(-1)

    def verifier_keys(self, rows: torch.Tensor, *, gamma: int) -> tuple[RequestKeys, ...]:
        """Each of ``rows``' verifier keys over the decode so far, this round included."""
        assert self.seeds is not None and self.positions is not None and self.first is not None
        return tuple(
            RequestKeys(
                row=b,
                seed=int(self.seeds[row]),
                first=int(self.first[row]),
                last=int(self.positions[row]) + gamma,
                domains=(0,),
            )
            for b, row in enumerate(rows.tolist())
        )


def sequence_keys(
    seeds: torch.Tensor, starts: torch.Tensor, *, end: int
) -> tuple[RequestKeys, ...]:
    """The verifier's keys of requests whose sequences start at ``starts`` when every
    block is verified: each request's seed at its positions up to ``end`` past its start
    (the harness's own requests, outside a decode)."""
    return tuple(
        RequestKeys(row=b, seed=int(seed), first=int(start), last=int(start) + end, domains=(0,))
        for b, (seed, start) in enumerate(zip(seeds.tolist(), starts.tolist(), strict=True))
    )


@dataclass
class DraftReads:
    """The arguments of each ``gumbel_sample`` call a draft call made (its keys)."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def keys(self, *, max_bs: int) -> tuple[DraftKey, ...]:
        """Each sampled draw's key, through the package's own ``spec_step_seed`` (where
        it has one: before 0.33 every step is keyed by the request's seed as it is) and
        ``_DRAFT_NOISE_SALT`` (where it has one: 0.25-0.28 add none); row ``b`` of the
        batch in slot ``max_bs - 1 - b``."""
        gumbel = importlib.import_module(GUMBEL_MODULE)
        salt = draft_salt(gumbel)
        step_seed = getattr(gumbel, "spec_step_seed", None)  # 0.33 on; 0.31-0.32: none
        mix = None if step_seed is None else interpreted(step_seed)
        keys = []
        for call in self.calls:
            slots, temperature, seeds = call["slots"], call["temperature"], call["seeds"]
            live = (slots >= 0) & (temperature[slots.clamp_min(0)] != 0)
            rows = slots[live]
            if rows.numel() == 0:
                continue
            seed = seeds[rows].numpy().astype(np.int64)
            step = call["step"]
            if step is not None and mix is not None:  # the cache column: mixed into the seed
                seed = mix(seed, np.full_like(seed, step))
            position = call["pos"][live]
            word = (position + (salt if call["drafting"] else 0)) % WORD
            domains = (0, FP64_DOMAIN) if call["fp64"] else (0,)
            for slot, s, p, w in zip(
                rows.tolist(), seed.tolist(), position.tolist(), word.tolist(), strict=True
            ):
                keys.append(
                    DraftKey(
                        row=max_bs - 1 - slot,
                        step=-1 if step is None else step,
                        position=p,
                        seed=int(s),
                        word=int(w),
                        domains=domains,
                    )
                )
        return tuple(keys)

    def drafting(self) -> dict[int, bool]:
        """Each step's drafting flag as the call passed it."""
        return {c["step"]: c["drafting"] for c in self.calls if c["step"] is not None}


@contextmanager
def observe_draft_keys() -> Iterator[DraftReads]:
    """Record what each ``gumbel_sample`` call of the speculator module is handed (the
    speculator's ``_sample_logits`` looks the name up there when it runs); the
    package's function is called unchanged, with the interpreter's fixed costs cached
    (``with_fixed_costs_cached``), and put back after the block."""
    module: Any = importlib.import_module(SPECULATOR_MODULE)
    sample = module.gumbel_sample
    sample_cached = with_fixed_costs_cached(sample)
    reads = DraftReads()

    def recording_sample(
        logits: torch.Tensor,
        expanded_idx_mapping: torch.Tensor,
        temperature: torch.Tensor,
        seed: torch.Tensor,
        pos: torch.Tensor,
        *args: Any,
        **kwargs: Any,
    ) -> torch.Tensor:
        # 0.25-0.27 name the cache and its column output_processed_logits(_col)
        column = kwargs.get("logits_cache_col", kwargs.get("output_processed_logits_col"))
        cached = kwargs.get("logits_cache", kwargs.get("output_processed_logits")) is not None
        reads.calls.append(
            {
                "slots": expanded_idx_mapping.detach().long().cpu().clone(),
                "temperature": temperature.detach().float().cpu().clone(),
                "seeds": seed.detach().cpu().clone(),
                "pos": pos.detach().long().cpu().clone(),
                "step": int(column) if cached and column is not None else None,
                "drafting": bool(kwargs.get("is_drafting", args[1] if len(args) > 1 else False)),
                "fp64": bool(kwargs.get("use_fp64", False)),
            }
        )
        return sample_cached(logits, expanded_idx_mapping, temperature, seed, pos, *args, **kwargs)

    module.gumbel_sample = recording_sample
    try:
        yield reads
    finally:
        module.gumbel_sample = sample


def keyed_draws(reads: DraftReads, *, max_bs: int, verifier: tuple[RequestKeys, ...]) -> KeyedDraws:
    """The call's draft keys and the verifier's, in the keying of the package's own
    Gumbel module (``vllm_keying``)."""
    keying = keying_of(importlib.import_module(GUMBEL_MODULE))
    draft = reads.keys(max_bs=max_bs)
    return KeyedDraws(hash=keying.hash, draft=draft, verifier=verifier, coins=keying.coins)
