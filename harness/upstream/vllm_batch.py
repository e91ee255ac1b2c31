"""A vLLM release's model runner at the junction of its drafter and its verifier, run
from the release's own files (docs/design.md, "A life across the junction").

``ReleaseBatch`` keeps what the GPU model runner keeps between steps, built by the
release's own classes: its request states (``gpu/states.py`` ``RequestState``: the free
slot list a joining request takes its slot from, the prompt and output tokens of each
slot, the prefill length, the computed tokens, the last sampled token and the draft
tokens, which ``add_request`` clears), its sampler's per-slot states (``Sampler`` with
``SamplingStates``: each slot's temperature and seed, staged by ``add_request`` from
the release's ``SamplingParams``) and the draft-logits cache its speculator keeps by
slot. ``step`` builds one batch as the model runner's ``prepare_inputs`` builds it, with
the release's own prepare kernels (``gpu/input_batch.py``: ``prepare_prefill_inputs``,
``prepare_pos_seq_lens``, ``combine_sampled_and_draft_tokens``, ``expand_idx_mapping``),
verifies it as its ``RejectionSampler`` does (the input token and position of each
logits row, gathered as the release gathers them; ``apply_sampling_params``;
``rejection_sample``; ``get_num_sampled_and_rejected``) and records what it sampled
with ``post_update``.

What stands in, and why:

- the pinned host memory of its ``UvaBuffer`` (``gpu/buffer_utils.py``): plain host
  memory whose device view is the memory itself, which is what unified addressing is
  on a CPU; a CPU build of torch has no pinned allocator
  (``harness.upstream.loaders.vllm_host``);
- its sampler's states no request of the life uses, and the choice of top-k/top-p
  path (``harness.upstream.vllm_laws.cpu_answers`` says what and why);
- the target model: each logits row is the harness's Markov target's logits at the
  row's input token;
- the scheduler: which requests run in a step, how many tokens each is scheduled, and
  whether its drafts are (``harness.oracles.junction``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.upstream.loaders.vllm_loader import (
    environment_kept,
    interpreter_log1p,
    load_vllm,
    replicated_cache,
)
from harness.upstream.vllm_laws import call_with, cpu_answers, release_sampler

REQUEST_STATES = "vllm.v1.worker.gpu.states"
INPUT_BATCH = "vllm.v1.worker.gpu.input_batch"
REJECTION_SAMPLER = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"


@contextmanager
def _release_calls() -> Iterator[None]:
    """Every stand-in a call into the release needs on a CPU, for the block."""
    with ExitStack() as stack:
        stack.enter_context(environment_kept())
        stack.enter_context(cpu_answers())
        stack.enter_context(interpreter_log1p())
        yield


@dataclass(frozen=True)
class StepResult:
    """What one step verified, a row per request of the batch, in its order."""

    sampled: torch.Tensor  # [n, gamma+1] int64: the committed tokens (``num_sampled`` live)
    num_sampled: torch.Tensor  # [n] int64: 0 on a prefill chunk
    positions: torch.Tensor  # [n] int64: the position of its first logits row
    seeds: torch.Tensor  # [n] int64: the seed its slot held when it was verified


class ReleaseBatch:
    """The model runner's kept state of ``slots`` requests, by the release's classes."""

    def __init__(self, *, slots: int, gamma: int, vocab_size: int, max_model_len: int) -> None:
        self.slots, self.gamma, self.vocab_size = slots, gamma, vocab_size
        with _release_calls():
            self.states = call_with(
                importlib.import_module(REQUEST_STATES).RequestState,
                max_num_reqs=slots,
                max_model_len=max_model_len,
                max_num_batched_tokens=slots * (gamma + 1),
                num_speculative_steps=gamma,
                vocab_size=vocab_size,
                device=torch.device("cpu"),
            )
            self.sampler, self.params = release_sampler(slots, vocab_size)
            self.input_batch = importlib.import_module(INPUT_BATCH)
            # how its RejectionSampler gathers each logits row's input token and position:
            # its own function from 0.32 (marking the draft rows of a request still in its
            # prefill -1), the rows at logits_indices before
            self.gather_draft_sampled = getattr(
                importlib.import_module(REJECTION_SAMPLER), "gather_draft_sampled", None
            )
        # the draft logits its speculator keeps by slot: [max_num_reqs, gamma, V]
        self.draft_logits = torch.zeros(slots, gamma, vocab_size)

    # -- the per-slot buffers, as the kernels read them -------------------------------
    @property
    def sampling_states(self) -> Any:
        return self.sampler.sampling_states

    @staticmethod
    def stage(kept: Any, slots: torch.Tensor | int, value: float) -> None:
        """Write ``value`` into ``slots`` of ``kept``, a per-slot buffer the release
        stages (``UvaBackedTensor``): its host values, then its device view renewed, as
        the release's staged writes end."""
        kept.np[slots.numpy() if isinstance(slots, torch.Tensor) else slots] = value
        kept.copy_to_uva()

    def set_computed(self, slots: torch.Tensor | int, value: int) -> None:
        """Set the computed tokens of ``slots`` where the release keeps them: the device
        view its kernels read and the host copy its ``RequestState`` keeps beside it."""
        self.states.num_computed_tokens.gpu[slots] = value
        index = slots.numpy() if isinstance(slots, torch.Tensor) else slots
        self.states.num_computed_tokens_np[index] = value

    def next_slot(self) -> int:
        """The slot the next ``add`` takes (``RequestState``'s free list decides)."""
        return int(self.states.free_indices[-1])

    def add(
        self,
        request_id: str,
        *,
        prompt_len: int,
        tokens: list[int],
        computed: int,
        max_tokens: int,
        temperature: float,
        seed: int,
    ) -> int:
        """Admit a request as the model runner's ``add_requests`` does: its request state
        and its sampling parameters staged into the slot ``RequestState`` gives it, then
        applied; the slot."""
        with _release_calls():
            self.states.add_request(request_id, prompt_len, tokens, computed, max_tokens)
            slot = int(self.states.req_id_to_index[request_id])
            call_with(
                self.sampler.add_request,
                req_idx=slot,
                prompt_len=prompt_len,
                sampling_params=self.params(temperature=temperature, seed=seed),
            )
            self.states.apply_staged_writes()
            self.sampler.apply_staged_writes()
        return slot

    def remove(self, request_id: str) -> None:
        """A request leaves (finished or preempted): its slot back on the free list;
        nothing of its buffers is cleared (the release's ``remove_request``)."""
        self.states.remove_request(request_id)

    def record_sampled(self, slots: list[int], tokens: list[int]) -> None:
        """Each of ``slots`` sampled one of ``tokens`` in a step that computed nothing new
        for it: the release's ``post_update`` records it (the last sampled token, the
        output tokens and their count)."""
        n = len(slots)
        with _release_calls():
            self.input_batch.post_update(
                torch.tensor(slots, dtype=torch.int32),
                self.states.num_computed_tokens.gpu,
                self.states.last_sampled_tokens,
                None,
                torch.tensor(tokens, dtype=torch.int64).view(n, 1),
                torch.ones(n, dtype=torch.int32),
                torch.zeros(n, dtype=torch.int32),
                None,
                self.states.all_token_ids.gpu,
                self.states.total_len.gpu,
            )

    def step(
        self, slots: list[int], *, drafts: list[int], target_logits: torch.Tensor
    ) -> StepResult:
        """One batch of the requests in ``slots``, request ``i`` scheduled
        ``drafts[i] + 1`` tokens of which ``drafts[i]`` are its draft tokens, built,
        verified and recorded as the model runner does; ``target_logits`` ``[V, V]``:
        the target's logits at each input token."""
        n, gamma = len(slots), self.gamma
        scheduled = np.asarray(drafts, dtype=np.int32) + 1
        idx_mapping = torch.tensor(slots, dtype=torch.int32)
        query_start_loc = torch.from_numpy(
            np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
        )
        cu_num_logits = query_start_loc.clone()  # one logits row a scheduled token here
        num_tokens = num_logits = int(query_start_loc[-1])
        input_ids = torch.zeros(num_tokens, dtype=torch.int32)
        positions = torch.zeros(num_tokens, dtype=torch.int64)
        seq_lens = torch.zeros(self.slots, dtype=torch.int32)
        states, batch = self.states, self.input_batch
        with _release_calls():
            batch.prepare_prefill_inputs(
                input_ids,
                states.next_prefill_tokens,
                idx_mapping,
                query_start_loc,
                states.all_token_ids.gpu,
                states.prefill_len.gpu,
                states.num_computed_tokens.gpu,
            )
            batch.prepare_pos_seq_lens(
                idx_mapping, query_start_loc, states.num_computed_tokens.gpu, positions, seq_lens
            )
            logits_indices = batch.combine_sampled_and_draft_tokens(
                input_ids,
                idx_mapping,
                states.last_sampled_tokens,
                query_start_loc,
                seq_lens,
                states.prefill_len.gpu,
                states.draft_tokens,
                cu_num_logits,
                num_logits,
                1,
            )
            expanded, local = batch.expand_idx_mapping(
                idx_mapping, num_logits, cu_num_logits, gamma + 1
            )
            draft_sampled, pos = self._gathered(
                input_ids, positions, logits_indices, expanded, local
            )
            logits = target_logits[input_ids[logits_indices].long()].float()
            processed = call_with(
                self.sampler.apply_sampling_params,
                logits=logits,
                expanded_idx_mapping=expanded,
                idx_mapping=idx_mapping,
                idx_mapping_np=idx_mapping.numpy().astype(np.int64),
                pos=pos,
                input_ids=draft_sampled,
                expanded_local_pos=local,
                seq_lens_upper_bound_np=seq_lens[:n].numpy(),
            )
            sampled, num_sampled = load_vllm().rejection_sample(
                processed,
                replicated_cache(self.draft_logits),
                draft_sampled,
                cu_num_logits,
                pos,
                idx_mapping,
                expanded,
                local,
                self.sampling_states.temperature.gpu,
                self.sampling_states.seeds.gpu,
                gamma,
            )
            num_sampled, num_rejected = batch.get_num_sampled_and_rejected(
                num_sampled, seq_lens, cu_num_logits, idx_mapping, states.prefill_len.gpu
            )
            seeds = self.sampling_states.seeds.gpu[idx_mapping.long()].clone()
            batch.post_update(
                idx_mapping,
                states.num_computed_tokens.gpu,
                states.last_sampled_tokens,
                None,
                sampled,
                num_sampled,
                num_rejected,
                query_start_loc,
                states.all_token_ids.gpu,
                states.total_len.gpu,
            )
        return StepResult(
            sampled=sampled.long(),
            num_sampled=num_sampled.long(),
            positions=pos[cu_num_logits[:-1].long()].long(),
            seeds=seeds.long(),
        )

    def _gathered(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        logits_indices: torch.Tensor,
        expanded: torch.Tensor,
        local: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The input token and position of each logits row, as the release's
        ``RejectionSampler`` gathers them (``gather_draft_sampled``)."""
        gather = self.gather_draft_sampled
        if gather is None:
            return input_ids[logits_indices], positions[logits_indices]
        drafts, pos = gather(
            input_ids, positions, logits_indices, expanded, local, self.states.prefill_len.gpu
        )
        return drafts, pos


__all__ = ["ReleaseBatch", "StepResult"]
