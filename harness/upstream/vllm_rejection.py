"""The released vLLM 0.33's verifier as a further verifier of the statistical oracle.

``VLLM_REJECTION`` is a ``reference.verifier.Verifier`` that verifies every row of a
round with the installed package's own ``rejection_sample`` (its Triton kernels, run
by Triton's interpreter on a machine without CUDA, ``libdevice.log1p`` given its body
by ``interpreter_log1p``), loaded unchanged by ``harness.upstream.loaders.vllm_loader``. It
reads what vLLM's server passes it, laid out as the server lays it out for a round of
``bs`` requests of ``gamma`` drafts (row ``i`` of the round in request slot ``i``):

- the candidates ``[anchor | drafts]`` of each request, flattened, one logits row per
  candidate (``cu_num_logits``, ``idx_mapping``, ``expanded_idx_mapping`` and
  ``expanded_local_pos`` describe that layout);
- the target's logits of every candidate row as the server's sampler hands them over:
  what the release's own ``Sampler.apply_sampling_params`` returns for the row's request,
  staged as its server stages it (temperature, then min-p, top-k and top-p; no division
  on a greedy row), read from a table it builds once a target and request
  (``harness.upstream.vllm_laws.processed_logits``: a row's result depends on its
  logits and its request alone, and a Markov target's rows are its context tokens);
- the draft's kept step logits as the ``draft_logits`` cache ``[max_num_reqs, gamma,
  V]`` indexed by slot, as the release keeps it (``vllm_eras.release_cache``: before
  temperature, from which it computes ``q = softmax(cache / T)`` itself; 0.25-0.27:
  divided by the temperature, which it reads as they are; from 0.34 in the package's
  own ``DraftLogitsCache``, replicated, ``vllm_loader.replicated_cache``);
- one temperature per slot, the request's (0 on a greedy row): vLLM keeps one
  temperature per request, which its drafter and its verifier both read, so the
  draft's staged copy is not read here;
- one seed per slot and one position per logits row, its noise: on the server's
  plumbing (``VerifierNoise.requests``, ``harness.upstream.vllm_plumbing``) the
  requests' seeds and anchor positions the drafter read, which the decode loop moves
  on by the tokens each row commits; on independent streams seeds derived from the
  decode's verifier seed, each row's positions starting at 0 and advancing likewise.
  The acceptance uniform of a draft is keyed by (seed, position of its row), the
  residual or bonus draw by (seed, position, token): every draw of a decode is at a
  position no earlier round of that row used.

Greedy rows are vLLM's own: at temperature 0 ``rejection_sample`` keeps a draft while
it is the target's argmax and commits the argmax at the first other position (and as
the bonus), so nothing here routes them elsewhere.

The interpreter runs every kernel program as Python over numpy (several programs per
round row), so a decode under this verifier is slow: ``max_rows`` cuts the oracle's
rows per head under it (``oracle_cut``, ``harness.oracles.stats.scope_under``) and the result states
the detection bound at the rows it ran. Its target law is vLLM's own, which is not ours
where top-k, top-p and min-p combine (vLLM reads top-p over the mass min-p and top-k
left, docs/sampling-params.md): under it the oracle judges every group against vLLM's
law (``oracle_law``: what the release's ``Sampler.sample`` draws from,
``harness.upstream.vllm_laws.sampler_law``). See docs/upstream.md ("vLLM's rejection
sampler as a verifier").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.oracle_cut import VLLM_LAW, OracleCut
from harness.upstream.loaders.vllm_loader import (
    interpreter_log1p,
    load_vllm,
    replicated_cache,
)
from harness.upstream.vllm_eras import release_cache
from harness.upstream.vllm_laws import Request, processed_logits
from harness.upstream.vllm_plumbing import RequestPlumbing
from reference.streams import VerifierNoise
from reference.verifier import VerifyResult, VerifyRound, VerifyStep

ROW_CUT = 600  # rows per head (every target) under this verifier: see docs/upstream.md

VERIFIER_CUT = OracleCut(
    rows=ROW_CUT, stage_rows=(ROW_CUT,), by="vllm-rejection (verifier under Triton's interpreter)"
)


@dataclass(frozen=True)
class VllmRejectionVerifier:
    """vLLM's ``rejection_sample`` on every row, greedy rows included."""

    name: str = "vllm-rejection"
    oracle_cut: OracleCut | None = VERIFIER_CUT  # what a decode under it runs
    reads_truncation: bool = True  # each request's, as its server's sampler applies it
    oracle_law: str = VLLM_LAW  # its rows judged against vLLM's own law, not ours
    # each row's request as the server stages it into its sampler (``requests_of``)
    # (a module function, so the verifier crosses to an isolated worker by reference)
    staged: Callable[[VerifyRound], list[Request]] = field(default_factory=lambda: requests_of)

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        rejection_sample = load_vllm().rejection_sample
        shared = noise.requests
        if shared is not None and not isinstance(shared, RequestPlumbing):
            raise TypeError(f"vllm-rejection reads vLLM's request plumbing, not {shared!r}")
        # On the server's plumbing the drafter's seeds and positions, which the decode
        # loop moves on; otherwise seeds and positions of its own.
        own = None if shared is not None else RequestNoise(seed=noise.seed, device=device)
        request_noise = shared or own
        assert request_noise is not None
        table = TargetTable(staged=self.staged)

        def verify(round_: VerifyRound) -> VerifyResult:
            draft = round_.draft
            bs, gamma = draft.tokens.shape
            layout = RoundLayout.of(bs=bs, gamma=gamma, device=draft.tokens.device)
            candidates = torch.cat([round_.anchors.unsqueeze(1), draft.tokens], dim=1)
            greedy = round_.target_greedy
            temperature = torch.where(greedy, 0.0, round_.target_temperatures).float()  # [bs]
            processed = table.rows(round_, candidates)  # [bs, g+1, V]
            processed = processed.reshape(bs * (gamma + 1), -1).contiguous()
            seeds, positions = request_noise.seeds_and_positions(bs=bs, gamma=gamma)
            with interpreter_log1p():
                sampled, num_sampled = rejection_sample(
                    processed,
                    # the cache by slot, as the release keeps it and hands it over
                    replicated_cache(
                        release_cache(
                            draft.step_logits, temperatures=draft.temperatures
                        ).contiguous()
                    ),
                    candidates.reshape(-1).to(torch.int32),
                    layout.cu_num_logits,
                    positions,
                    layout.idx_mapping,
                    layout.expanded_idx_mapping,
                    layout.expanded_local_pos,
                    temperature,
                    seeds,
                    gamma,
                )
            num_committed = num_sampled.long()
            if own is not None:
                own.advance(num_committed)
            kept = torch.arange(gamma + 1, device=sampled.device) < num_committed.unsqueeze(1)
            return VerifyResult(
                committed=torch.where(kept, sampled, -1), num_committed=num_committed
            )

        return verify


class TargetTable:
    """The release's target logits of every (request, context token) a decode meets
    (``processed_logits``), built once a target and request."""

    def __init__(self, *, staged: Callable[[VerifyRound], list[Request]]) -> None:
        self._staged = staged
        self._target: object = None
        self._by_request: dict[Request, torch.Tensor] = {}  # [V, V] float32 each

    def rows(self, round_: VerifyRound, candidates: torch.Tensor) -> torch.Tensor:
        """``[bs, gamma+1, V]``: the processed logits of each candidate row of the round."""
        target = round_.target
        if target is not self._target:
            self._target, self._by_request = target, {}
        requests = self._staged(round_)
        distinct = list(dict.fromkeys(requests))
        missing = [r for r in distinct if r not in self._by_request]
        if missing:
            logits = target.transition_logits.to("cpu", torch.float32)  # [V, V]
            table = processed_logits(logits, requests=missing)  # [len(missing), V, V]
            self._by_request.update(zip(missing, table, strict=True))
        table = torch.stack([self._by_request[r] for r in distinct]).to(candidates.device)
        which = torch.tensor([distinct.index(r) for r in requests], device=candidates.device)
        return table[which.unsqueeze(1), candidates]


def requests_of(round_: VerifyRound) -> list[Request]:
    """Each row's request as its server stages it: greedy, or its temperature and its
    truncation (a top-k of none, or of the whole vocabulary, as none)."""
    vocab = round_.target.transition_logits.shape[-1]
    bs = round_.target_greedy.shape[0]
    greedy = round_.target_greedy.tolist()
    temperatures = round_.target_temperatures.tolist()
    truncation = round_.target_truncation
    top_ks = [0] * bs if truncation is None else truncation.top_ks.expand(bs).tolist()
    top_ps = [1.0] * bs if truncation is None else truncation.top_ps.expand(bs).tolist()
    min_ps = [0.0] * bs if truncation is None else truncation.min_ps.expand(bs).tolist()
    return [
        Request(temperature=0.0, greedy=True)
        if greedy[i]
        else Request(
            temperature=temperatures[i],
            top_k=top_ks[i] if 1 < top_ks[i] < vocab else 0,
            top_p=top_ps[i],
            min_p=min_ps[i],
        )
        for i in range(bs)
    ]


@dataclass(frozen=True)
class RoundLayout:
    """How the server lays out a round of ``bs`` requests of ``gamma + 1`` logits rows
    each, request ``i`` in slot ``i``."""

    cu_num_logits: torch.Tensor  # [bs + 1] int32: where each request's rows start
    idx_mapping: torch.Tensor  # [bs] int32: each request's slot
    expanded_idx_mapping: torch.Tensor  # [bs * (gamma + 1)] int32: each row's slot
    expanded_local_pos: torch.Tensor  # [bs * (gamma + 1)] int32: each row's index in its request

    @classmethod
    def of(cls, *, bs: int, gamma: int, device: torch.device) -> RoundLayout:
        per_request = gamma + 1
        slots = torch.arange(bs, dtype=torch.int32, device=device)
        return cls(
            cu_num_logits=torch.arange(bs + 1, dtype=torch.int32, device=device) * per_request,
            idx_mapping=slots,
            expanded_idx_mapping=slots.repeat_interleave(per_request),
            expanded_local_pos=torch.arange(per_request, dtype=torch.int32, device=device).repeat(
                bs
            ),
        )


class RequestNoise:
    """The per-request seeds (derived from the decode's verifier seed on the first
    round, when the rows are known) and each request's position, which advances by the
    tokens it commits."""

    def __init__(self, *, seed: int, device: torch.device) -> None:
        self._generator = torch.Generator().manual_seed(seed)
        self._device = device
        self._seeds: torch.Tensor | None = None  # [rows] int64
        self._positions: torch.Tensor | None = None  # [rows] int64: each anchor's position

    def seeds_and_positions(self, *, bs: int, gamma: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``[bs]`` int64 seeds and ``[bs * (gamma + 1)]`` int64 positions of this round's
        logits rows (the anchor's position, then one more per draft)."""
        if self._seeds is None or self._positions is None:
            self._seeds = torch.randint(
                0, 2**62, (bs,), generator=self._generator, dtype=torch.int64
            ).to(self._device)
            self._positions = torch.zeros(bs, dtype=torch.int64, device=self._device)
        if self._seeds.shape[0] != bs:
            raise ValueError(
                f"a decode verifies the same {self._seeds.shape[0]} rows every round, got {bs}"
            )
        steps = torch.arange(gamma + 1, dtype=torch.int64, device=self._device)
        return self._seeds, (self._positions.unsqueeze(1) + steps).reshape(-1)

    def advance(self, num_committed: torch.Tensor) -> None:
        assert self._positions is not None
        self._positions = self._positions + num_committed.to(self._positions)


VLLM_REJECTION = VllmRejectionVerifier()
