"""The junction servers of the releases' verifiers (docs/design.md, "A life across the
junction"): each is ``harness.oracles.junction.JunctionServer`` with the buffers its
server keeps a slot between steps and its own verifier entered as its model runner
enters it, so a release's life runs its sampler as the drafter and its verifier on
the slots a life leaves behind.

- ``VllmRejectionServer``: vLLM's own ``rejection_sample`` (from the release's wheel,
  ``harness.upstream.loaders.vllm_loader``) entered as the GPU model runner enters it:
  one logits row per candidate of each request (``gamma + 1`` for a request with drafts,
  one for a request whose prompt had one token left or that resumed), the slot of each
  request as its index into the buffers the runner keeps by slot: the draft logits cache
  ``[max_num_reqs, gamma, V]`` as the release keeps it (``vllm_eras.release_cache``;
  from 0.34 handed over inside its own ``DraftLogitsCache``,
  ``vllm_loader.replicated_cache``), one temperature and one seed a slot, and each
  logits row's slot and local position from the release's own ``expand_idx_mapping``
  (``gpu/input_batch.py``, as the runner calls it). Its ``RequestState``
  (``gpu/states.py``) allocates pinned host memory, which needs a CUDA device: the
  life's slot choice stands in, said so in ``STANDS_IN``.
- ``BlockwiseServer``: sglang's own ``BlockwiseRejection`` (from the release, through
  ``harness.upstream.loaders.sglang_loader``) on the sampled rows with drafts, entered
  with the kept pre-temperature step logits and the staged temperatures of each slot
  and the server's one rejection noise (its key from the server's seed, its step
  counter the calls advance); the greedy rows by the greedy accept (chain on one-hot
  laws), as ``harness.upstream.rejection`` says; a row without drafts (an extend batch
  upstream, sampled by the target's sampler) commits one token from the target, ours.
- ``JunctionServer`` itself is chain's: ours, and the stand-in for a server whose
  verifier the harness does not have.

``junction_server(verifier)`` picks the server by the verifier's name (the era's).
"""

from __future__ import annotations

import importlib

import torch

from harness.oracles.defaults import GREEDY
from harness.oracles.junction import JunctionServer, Poison, Request
from harness.upstream.loaders.sglang_loader import UpstreamUnavailable, load_sglang
from harness.upstream.loaders.vllm_loader import (
    interpreter_log1p,
    load_vllm,
    replicated_cache,
)
from harness.upstream.rejection import BLOCKWISE_REJECTION, committed_block
from harness.upstream.vllm_eras import release_cache
from harness.upstream.vllm_rejection import VLLM_REJECTION
from reference.target_model import MarkovTargetModel
from reference.verifier import DraftBlock, VerifyResult

INPUT_BATCH = "vllm.v1.worker.gpu.input_batch"  # the model runner's input batch, in the wheel


class VllmRejectionServer(JunctionServer):
    """vLLM's model runner at the junction: its slot-indexed buffers and its verifier."""

    KEPT = (
        "draft_tokens",
        "draft_logits",
        "temperatures",
        "seeds",
        "positions",
        "outputs",
        "last_tokens",
    )
    VERIFIER_READS = ("draft_tokens", "draft_logits", "temperatures", "seeds", "positions")
    VERIFIER = VLLM_REJECTION.name
    STANDS_IN = (
        "the target's logits: the harness's Markov target, tempered in float32 as the "
        "release's apply_sampling_params hands them to rejection_sample",
        "its request states (gpu/states.py RequestState: which slot a request takes, the "
        "buffers it clears): they allocate pinned host memory, which needs a CUDA device; "
        "the life's slot choice (the lowest free slot) and buffers stand in; the logits "
        "rows' slots and positions come from the release's own expand_idx_mapping",
        "the drafter's noise keys: the seeds and positions its convention gives each row "
        "(harness.upstream.vllm_convention), not the life's requests' own; the verifier "
        "draws under each request's seed and positions from its slot. The drafter and the "
        "verifier on one request seed is the statistical oracle's check, on vLLM's plumbing",
    )

    def __init__(self, *, slots: int, gamma: int, vocab_size: int, poison: Poison) -> None:
        self.draft_logits = torch.empty(slots, gamma, vocab_size)  # [S, gamma, V] float32
        self.temperatures = torch.empty(slots)  # [S] float32: 0 on a greedy request
        super().__init__(slots=slots, gamma=gamma, vocab_size=vocab_size, poison=poison)

    def poison_slots(self, slots: torch.Tensor, poison: Poison) -> None:
        super().poison_slots(slots, poison)
        # the poison's law as logits, and a temperature it alone would give
        self.draft_logits[slots] = _poison_logits(self.draft_probs[slots])
        self.temperatures[slots] = _poison_temperature(poison)

    def admit(self, slot: int, request: Request) -> None:
        super().admit(slot, request)
        self.temperatures[slot] = 0.0 if request.temperature == GREEDY else request.temperature

    def store_drafts(self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]) -> None:
        super().store_drafts(slots, block, requests)
        self.draft_logits[slots] = release_cache(
            block.step_logits, temperatures=block.temperatures
        ).float()

    def verify(
        self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
    ) -> VerifyResult:
        """Every row of ``slots`` ``[n]`` in one call of the release's ``rejection_sample``,
        a row with drafts as ``gamma + 1`` logits rows, one without as one."""
        by_slot = {r.slot: r for r in requests}
        n, gamma = len(slots), self.gamma
        per_request = torch.where(self.drafted[slots], gamma + 1, 1)  # [n]
        cu_num_logits = torch.cat([torch.zeros(1, dtype=torch.int64), per_request.cumsum(0)])
        live = torch.arange(gamma + 1).expand(n, -1) < per_request.unsqueeze(1)  # [n, gamma+1]
        rows = torch.cat([self.last_tokens[slots].unsqueeze(1), self.draft_tokens[slots]], 1)
        candidates = rows[live]  # [num_logits]: each request's anchor, then its drafts
        idx_mapping = slots.to(torch.int32)
        # the logits rows' slots and local positions, by the release's own prepare kernel
        expanded_slots, local = importlib.import_module(INPUT_BATCH).expand_idx_mapping(
            idx_mapping, len(candidates), cu_num_logits.to(torch.int32), gamma + 1
        )
        temperature = self.temperatures[expanded_slots.long()]
        divisor = torch.where(temperature == 0, 1.0, temperature).unsqueeze(1)
        logits = (target.transition_logits[candidates].float() / divisor).contiguous()
        positions = self.positions[expanded_slots.long()] + local
        self.keys_read += [
            (by_slot[s].id, seed, position, by_slot[s].seed, by_slot[s].position)
            for s, seed, position in zip(
                slots.tolist(),
                self.seeds[slots].tolist(),
                self.positions[slots].tolist(),
                strict=True,
            )
        ]
        with interpreter_log1p():
            sampled, num_sampled = load_vllm().rejection_sample(
                logits,
                replicated_cache(self.draft_logits),  # the form the release reads
                candidates.to(torch.int32),
                cu_num_logits.to(torch.int32),
                positions,
                idx_mapping,
                expanded_slots,
                local,
                self.temperatures,
                self.seeds,
                gamma,
            )
        counts = num_sampled.long()
        kept = torch.arange(gamma + 1) < counts.unsqueeze(1)
        return VerifyResult(committed=torch.where(kept, sampled.long(), -1), num_committed=counts)


class BlockwiseServer(JunctionServer):
    """sglang's server at the junction: the kept step logits and staged temperatures of
    each slot, its block-wise rejection and its one rejection noise."""

    KEPT = (
        "draft_tokens",
        "draft_logits",
        "draft_temperatures",
        "outputs",
        "last_tokens",
        "seeds",
        "positions",
    )
    VERIFIER_READS = ("draft_tokens", "draft_logits", "draft_temperatures", "last_tokens")
    VERIFIER = BLOCKWISE_REJECTION.name
    STANDS_IN = (
        "a row without drafts (upstream an extend batch the target's sampler samples): one "
        "token from the target under the request's key (ours); greedy rows: the greedy "
        "accept (chain on one-hot laws), as its server's SelectMixedAccept takes them",
        "its batch (ScheduleBatch, SamplingBatchInfo: the server stack's imports): upstream "
        "the verifier reads the step's draft block by batch row (accept_draft_tokens), rows "
        "the batch's filter and merge re-index; here each slot keeps its copy",
    )
    SERVER_SEED = 0  # the server's random seed, its rejection noise's key

    def __init__(self, *, slots: int, gamma: int, vocab_size: int, poison: Poison) -> None:
        self.draft_logits = torch.empty(slots, gamma, vocab_size)  # [S, gamma, V] float32
        self.draft_temperatures = torch.empty(slots)  # [S] float32, as staged
        super().__init__(slots=slots, gamma=gamma, vocab_size=vocab_size, poison=poison)
        loaded = load_sglang()
        if loaded.BlockwiseRejection is None:  # a release from before the module (0.5.22)
            raise UpstreamUnavailable(f"sglang {loaded.version} ships no block-wise rejection")
        self.rejection = loaded.BlockwiseRejection
        self.noise = loaded.make_rejection_noise(self.SERVER_SEED, torch.device("cpu"))

    def poison_slots(self, slots: torch.Tensor, poison: Poison) -> None:
        super().poison_slots(slots, poison)
        self.draft_logits[slots] = _poison_logits(self.draft_probs[slots])
        self.draft_temperatures[slots] = _poison_temperature(poison)

    def store_drafts(self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]) -> None:
        super().store_drafts(slots, block, requests)
        self.draft_logits[slots] = block.step_logits.float()
        self.draft_temperatures[slots] = block.temperatures.float()

    def verify_rows(
        self,
        rows: torch.Tensor,
        *,
        gamma: int,
        target: MarkovTargetModel,
        requests: list[Request],
    ) -> VerifyResult:
        """The sampled rows of ``rows`` ``[n]`` with drafts by the release's block-wise
        rejection, the rest as ours verifies them."""
        by_slot = {r.slot: r for r in requests}
        greedy = torch.tensor([by_slot[int(s)].temperature == GREEDY for s in rows])
        if gamma == 0 or bool(greedy.all()):
            return super().verify_rows(rows, gamma=gamma, target=target, requests=requests)
        accepted = torch.empty(len(rows), dtype=torch.int64)
        bonus = torch.empty_like(accepted)
        drafts = self.draft_tokens[rows, :gamma]
        if bool(greedy.any()):
            kept = super().verify_rows(rows[greedy], gamma=gamma, target=target, requests=requests)
            accepted[greedy] = kept.num_committed - 1
            bonus[greedy] = kept.committed.gather(1, accepted[greedy].unsqueeze(1)).squeeze(1)
        sampled = rows[~greedy]
        candidates = torch.cat([self.last_tokens[sampled].unsqueeze(1), drafts[~greedy]], 1)
        temperatures = torch.tensor([by_slot[int(s)].temperature for s in sampled])
        length, token, _ = self.rejection.execute(
            candidates=candidates,
            target_logits=target.transition_logits[candidates].reshape(-1, self.vocab_size).float(),
            draft_logits=self.draft_logits[sampled],
            target_temperatures=temperatures,
            draft_temperatures=self.draft_temperatures[sampled],
            noise=self.noise,
        )
        accepted[~greedy], bonus[~greedy] = length.long(), token.long()
        return committed_block(draft_tokens=drafts, accepted=accepted, bonus=bonus)


def _poison_logits(probs: torch.Tensor) -> torch.Tensor:
    """The poison's law ``[..., V]`` as float32 logits."""
    return probs.float().log().clamp(min=-1e4)


def _poison_temperature(poison: Poison) -> float:
    """A temperature only the poison gives (each poison its own)."""
    return 1.0 if poison.probs == "uniform" else 0.25


SERVERS: dict[str, type[JunctionServer]] = {
    JunctionServer.VERIFIER: JunctionServer,
    VllmRejectionServer.VERIFIER: VllmRejectionServer,
    BlockwiseServer.VERIFIER: BlockwiseServer,
}


def junction_server(verifier: str) -> type[JunctionServer]:
    """The junction server of the verifier named ``verifier``; ours (chain) stands in
    for one the harness has no junction server of."""
    return SERVERS.get(verifier, JunctionServer)
