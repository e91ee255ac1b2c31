"""The junction servers of the releases' verifiers (docs/design.md, "A life across the
junction"): each is ``harness.oracles.junction.JunctionServer`` with the buffers its
server keeps a slot between steps and its own verifier entered as its model runner
enters it, so a release's life runs its sampler as the drafter and its verifier on
the slots a life leaves behind.

- ``VllmRejectionServer``: vLLM's model runner, run from the release's wheel
  (``harness.upstream.vllm_batch.ReleaseBatch``): its ``RequestState`` gives each
  request its slot and keeps its tokens, its ``Sampler``'s states each slot's
  temperature and seed, and each step's batch (decode rows, rows with one prompt token
  left or resumed, prefill chunks) is built by its own prepare kernels, verified by its
  own ``rejection_sample`` as its ``RejectionSampler`` enters it, and recorded by its own
  ``post_update``; the draft-logits cache ``[max_num_reqs, gamma, V]`` is kept by slot
  as the release keeps it (``vllm_eras.release_cache``; from 0.34 handed over inside its
  own ``DraftLogitsCache``).
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

import operator
from typing import Any

import torch

from harness.oracles.defaults import GREEDY
from harness.oracles.junction import (
    HARNESS_BATCH_BUILDING,
    PRIMARY_POISON,
    TWIN_POISON,
    JunctionServer,
    Poison,
    Request,
    key_part,
)
from harness.upstream.loaders.sglang_loader import UpstreamUnavailable, load_sglang
from harness.upstream.rejection import BLOCKWISE_REJECTION, committed_block
from harness.upstream.vllm_batch import ReleaseBatch
from harness.upstream.vllm_eras import release_cache
from harness.upstream.vllm_rejection import VLLM_REJECTION
from reference.target_model import MarkovTargetModel
from reference.verifier import DraftBlock, VerifyResult


class _ReleaseBuffer:
    """A buffer a release keeps, read on the server by its path (``batch.<...>``)."""

    def __init__(self, path: str) -> None:
        self.read = operator.attrgetter(path)

    def __get__(self, server: object, owner: type | None = None) -> Any:
        return self if server is None else self.read(server)


class VllmRejectionServer(JunctionServer):
    """vLLM's model runner at the junction: its request states, its sampler's per-slot
    states and its speculator's draft-logits cache, by the release's own classes, and
    each step's batch built and verified by its own kernels (``ReleaseBatch``).

    A request's tokens as vLLM keeps them: a prompt of two tokens (a filler, then the
    life's anchor), then what it committed. A request joining with one prompt token left
    has computed one; with a chunk first, none (the chunk computes the filler and samples
    nothing). A steady request's prompt is the filler alone, whose prefill sampled the
    anchor (recorded by the release's ``post_update``); a resumed one recomputes its
    prompt and tokens but the last. The position of a request's first logits row is then
    the life's position of its next token."""

    VERIFIER_READS = (
        "draft_tokens",
        "draft_logits",
        "temperatures",
        "seeds",
        "num_computed_tokens",
        "last_sampled_tokens",
        "all_token_ids",
        "prefill_len",
    )
    # total_len: where post_update puts a step's outputs; the verify itself never reads it
    KEPT = (*VERIFIER_READS, "total_len")
    VERIFIER = VLLM_REJECTION.name
    STANDS_IN = (
        "the target's logits: the harness's Markov target at each logits row's input "
        "token, processed by the release's own apply_sampling_params",
        "its scheduler: which requests run in a step and whether their drafts are "
        "scheduled; the slot a request takes, the batch's inputs, positions and logits "
        "rows, and what is recorded after are the release's own (RequestState, "
        "input_batch's prepare kernels, post_update)",
        "its UvaBuffer's pinned host memory: host memory, its device view the memory "
        "itself (a CPU has no pinned allocator); its sampler's states no request uses",
        "the drafter's noise keys: the seeds and positions its convention gives each row "
        "(harness.upstream.vllm_convention), not the life's requests' own; the verifier "
        "draws under each request's seed and positions from its slot. The drafter and the "
        "verifier on one request seed is the statistical oracle's check, on vLLM's plumbing",
    )
    PROMPT = 2  # a request's prompt tokens: a filler, then its anchor
    # tokens a slot holds: past any request of a life and past every poison's position, so
    # a step that reads a poisoned count of computed tokens reads a poisoned slot, in bounds
    MAX_MODEL_LEN = max(PRIMARY_POISON.position, TWIN_POISON.position) + 512

    def allocate(self, slots: int) -> None:
        self.batch = ReleaseBatch(
            slots=slots,
            gamma=self.gamma,
            vocab_size=self.vocab_size,
            max_model_len=self.MAX_MODEL_LEN,
        )
        self.draft_tokens = self.batch.states.draft_tokens  # [S, gamma] int64, the release's
        self.last_tokens = self.batch.states.last_sampled_tokens[:, 0]  # a view: [S]
        self.draft_logits = self.batch.draft_logits
        self.chunks: list[int] = []  # slots computing a prefill chunk this step

    # the release's buffers, by the names KEPT gives them, read where they are now (a
    # staged write renews some)
    temperatures = _ReleaseBuffer("batch.sampling_states.temperature.gpu")
    seeds = _ReleaseBuffer("batch.sampling_states.seeds.gpu")
    num_computed_tokens = _ReleaseBuffer("batch.states.num_computed_tokens.gpu")
    last_sampled_tokens = _ReleaseBuffer("batch.states.last_sampled_tokens")
    all_token_ids = _ReleaseBuffer("batch.states.all_token_ids.gpu")
    prefill_len = _ReleaseBuffer("batch.states.prefill_len.gpu")
    total_len = _ReleaseBuffer("batch.states.total_len.gpu")

    def poison_slots(self, slots: torch.Tensor, poison: Poison) -> None:
        token = poison.token % self.vocab_size
        states, sampling = self.batch.states, self.batch.sampling_states
        self.draft_tokens[slots] = token
        self.draft_logits[slots] = _poison_logits(self.poison_probs(poison))
        for kept, value in (
            (sampling.temperature, _poison_temperature(poison)),
            (sampling.seeds, poison.seed),
            (states.prefill_len, poison.position),
        ):
            self.batch.stage(kept, slots, value)
        self.batch.set_computed(slots, poison.position)
        for tensor, value in (
            (self.total_len, poison.position),
            (self.last_sampled_tokens, token),
            (self.all_token_ids, token),
        ):
            tensor[slots] = value

    def take_slot(self, free: list[int]) -> int:
        slot = self.batch.next_slot()
        assert slot in free, f"the release's free list gave slot {slot}, not free in the life"
        return slot

    def read_key(self, slot: int) -> tuple[int, int]:
        return int(self.batch.sampling_states.seeds.np[slot]), int(self.num_computed_tokens[slot])

    def write_key(self, slot: int, key: tuple[int, int], *, part: str) -> None:
        if key_part(part) == 0:  # the seed, staged as the sampler stages it
            self.batch.stage(self.batch.sampling_states.seeds, slot, key[0])
        else:
            self.batch.set_computed(slot, key[1])

    def admit(self, slot: int, request: Request) -> None:
        filler = (request.anchor + 1) % self.vocab_size
        steady = request.prompt_left == 0 and not request.committed
        tokens = [filler] if steady else [filler, request.anchor, *request.committed]
        computed = 1 if steady else len(tokens) - request.prompt_left
        taken = self.batch.add(
            str(request.id),
            prompt_len=1 if steady else self.PROMPT,
            tokens=tokens,
            computed=computed,
            max_tokens=request.budget,
            temperature=0.0 if request.temperature == GREEDY else request.temperature,
            seed=request.seed,
        )
        assert taken == slot, f"request {request.id} took slot {taken}, the life gave {slot}"
        if steady:  # its prefill sampled its anchor
            self.batch.record_sampled([slot], [request.anchor])
        self.drafted[slot] = False

    def release(self, slot: int) -> None:
        super().release(slot)
        self.batch.remove(self.batch.states.index_to_req_id[slot])

    def prefill_chunk(self, slots: torch.Tensor) -> None:
        self.chunks += slots.tolist()

    def store_drafts(self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]) -> None:
        del requests  # the speculator writes every drafted slot alike
        self.draft_tokens[slots] = block.tokens.cpu()
        self.draft_logits[slots] = release_cache(
            block.step_logits, temperatures=block.temperatures
        ).float()
        self.drafted[slots] = True

    def verify(
        self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
    ) -> VerifyResult:
        """One step of the model runner: the rows of ``slots`` ``[n]`` (a row with
        drafts scheduled ``gamma + 1`` tokens, one without one) and this step's prefill
        chunks in one batch, by slot, built, verified and recorded by the release."""
        by_slot = {r.slot: r for r in requests}
        batch = sorted([*slots.tolist(), *self.chunks])
        self.chunks = []
        drafts = [self.gamma if s in by_slot and bool(self.drafted[s]) else 0 for s in batch]
        step = self.batch.step(batch, drafts=drafts, target_logits=target.transition_logits)
        at = {slot: row for row, slot in enumerate(batch)}
        rows = [at[s] for s in slots.tolist()]
        for slot, row in zip(slots.tolist(), rows, strict=True):
            request = by_slot[slot]
            self.keys_read.append(
                (
                    request.id,
                    int(step.seeds[row]),
                    int(step.positions[row]),
                    request.seed,
                    request.position,
                )
            )
        counts = step.num_sampled[rows]
        kept = torch.arange(self.gamma + 1) < counts.unsqueeze(1)
        committed = torch.where(kept, step.sampled[rows], -1)
        return VerifyResult(committed=committed, num_committed=counts)

    def write_outputs(self, slots: torch.Tensor, verdict: VerifyResult) -> None:
        """Recorded by the release's ``post_update`` in ``verify``; the drafts are spent."""
        del verdict
        self.drafted[slots] = False


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
        HARNESS_BATCH_BUILDING,
        "its batch (ScheduleBatch, SamplingBatchInfo) imports its server stack, so it is not "
        "run: upstream the verifier reads the step's draft block by batch row "
        "(accept_draft_tokens), rows the batch's filter and merge re-index; here each slot "
        "keeps its copy",
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
