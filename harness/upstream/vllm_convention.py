"""vLLM 0.33's calling convention: its DSpark speculator driven through its object seam.

``VllmConvention.build`` makes the package's ``DSparkSpeculator`` (or a subclass of it)
without its ``__init__`` (which needs a whole ``VllmConfig``) and sets the buffers and
model hooks its draft step reads, as the server's model runner leaves them before
``_sample_sequential``:

- ``model``: ``VllmDrafter``, vLLM's model hooks over the case's toy drafter (vanilla
  head only: vLLM's hooks take no hidden state, so the gated and rnn heads are not
  expressible and those cases are outside this contract);
- the server's per-request state, indexed by request *slot*: ``temperature`` (0 on a
  greedy row, vLLM's greedy), ``seeds`` (one per request, derived from the case seed),
  the ``draft_logits[max_bs, gamma, V]`` cache the verifier reads (folded sampling;
  ``None`` for a greedy fold, where the speculator takes the argmax); live row ``b``
  sits in slot ``max_bs - 1 - b``, so a write to a slot no live row holds shows;
- the sampling rows: ``sample_indices`` (the query rows of each request),
  ``sample_idx_mapping`` (their slots; -1 on padding rows), ``sample_pos`` (the
  predicted positions: each request's sequence position plus the step, plus one) and
  ``input_buffers.input_ids`` (the anchors at ``_anchor_idx``);
- ``_draft_topk``: ``None`` (dense) or ``K`` (``_sample_sequential_topk``);
- ``_d2t_scatter_index`` and ``_draft_scatter_buf``: as ``load_draft_model`` sets them
  for a drafter with a reduced draft vocabulary (``Case.draft_vocab``) when the server
  keeps a cache, ``None`` otherwise (``reduced_vocab_state``).

Positions are the server's: each call drafts ``gamma`` positions past the request's
sequence, which then moves ``gamma`` on, as a server commits the block. vLLM's noise
is a counter-based hash of (request seed, step, position, token id): the convention
declares the positions as its noise counter, and the replay (the package's own
``gumbel_sample`` on the kept cache rows at the declared seeds and positions) shows
whether the call used them. In the oracle's decode (``decode_streams``) the seeds and
positions are the decode's requests' (``harness.upstream.vllm_plumbing``), which
``vllm-rejection`` reads too; every call records the keys its draws read, for
``noise_shared_with_verifier``. The sampling math is the package's; the drafter holds
the toy weights. See docs/upstream.md ("vLLM 0.33", "vLLM 0.33's plumbing").
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from harness.oracle_cut import OracleCut
from harness.plugins.conventions import (
    BuiltSampler,
    CallOutputs,
    Convention,
    NoiseCounter,
    OutputError,
    RequestKeys,
    StagedParams,
    poison,
    read_tensor,
)
from harness.plugins.walks import HeadCounts
from harness.upstream.loaders.vllm_loader import (
    TOPK_ATTRIBUTE,
    LoadedVllm,
    installed_version,
    interpreted,
    load_vllm,
    release_oracle_depth,
)
from harness.upstream.vllm_drafter import (
    VllmDrafter,
    observe_speculator_walks,
    reduced_vocab_state,
)
from harness.upstream.vllm_plumbing import (
    DraftReads,
    RequestPlumbing,
    keyed_draws,
    observe_draft_keys,
    seeds_of,
    sequence_keys,
)
from reference.block import prepare_block
from reference.draft_model import query_rows_per_request
from reference.sampling_params import SamplingInfo, stage_sampling_params
from reference.streams import DecodeStreams, VerifierNoise, derived_seeds
from reference.verifier import DraftBlock

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs

POSITION_SPACING = 1 << 20  # request b's sequence starts at (b + 1) * this
# The oracle's decode of this sampler under the interpreter (measured, docs/upstream.md).
SAMPLER_CUT = OracleCut(
    250, "vllm-0.33 (sampler under Triton's interpreter)", ("far",), 12, stage_rows=(250,)
)
# The support scan's batch under the interpreter (a triple a program: docs/releases.md).
SCAN_BATCH = 1024


def outside_contract(
    case: Case, *, sampler_class: type[Any], heads: tuple[str, ...] = ("vanilla",)
) -> str | None:
    """Why the case cannot be expressed in the contract for the class here (``heads``:
    the Markov heads its hooks carry), or ``None``."""
    topk = getattr(sampler_class, TOPK_ATTRIBUTE, None)
    vocab = case.draft_vocab or case.vocab_size
    if topk is not None and topk > vocab:
        return (
            f"the top-K variant takes K={topk} candidates of a draft vocabulary of {vocab}: "
            "K must not exceed it"
        )
    if case.head_kind not in heads:
        return (
            f"vLLM's Markov hooks (markov_embed, markov_bias) take no hidden state: the "
            f"{case.head_kind} head is not expressible in its contract"
        )
    if case.folded_sampling and case.dtype == "bfloat16" and interpreted():
        return "Triton's interpreter has no bfloat16: a sampled bfloat16 call cannot run here"
    return None


def request_seeds(case: Case) -> list[int]:
    """Each slot's request seed, from the case seed (63 bits of sha256)."""
    return seeds_of(case.seed, case.max_bs, label="vllm-seed")


@dataclass
class _InputBuffers:
    """The one field of vLLM's ``InputBuffers`` the draft step reads."""

    input_ids: torch.Tensor


class VllmSampler(BuiltSampler):
    """The package's speculator, its drafter, and the server state the harness owns."""

    convention = "vllm-0.33"

    def __init__(self, *, sampler: Any, model: VllmDrafter, case: Case, loaded: LoadedVllm):
        self.sampler = sampler
        self.model = model
        self.loaded = loaded
        self._gamma = case.gamma
        self.max_bs = case.max_bs
        self.rows_per_request = query_rows_per_request(
            gamma=case.gamma, sample_from_anchor=case.sample_from_anchor
        )
        self.sample_from_anchor = case.sample_from_anchor
        self.sequence_start = torch.arange(1, case.max_bs + 1, dtype=torch.int64) * (
            POSITION_SPACING
        )
        self.offset = 0  # positions drafted so far past each sequence start
        self._counter_start = 0
        self._candidates: torch.Tensor | None = None
        self.bs = 0
        self.confidence = case.confidence
        self.server_seeds = torch.tensor(request_seeds(case), dtype=torch.int64)  # by slot
        self.plumbing: RequestPlumbing | None = None  # the oracle's decode: the server's
        self._call_positions = self._positions(case.max_bs, offset=0)  # [max_bs, gamma]
        self._call_verifier: tuple[RequestKeys, ...] = ()  # the verifier's, the last call's rows
        self._reads = DraftReads()

    @property
    def gamma(self) -> int:
        return self._gamma

    def slots(self, rows: int) -> torch.Tensor:
        """The request slot of each of the first ``rows`` batch rows."""
        return self.max_bs - 1 - torch.arange(rows, device=self.sampler.seeds.device)

    def seek_noise(self, counter: int) -> None:
        self.offset = counter

    def decode_streams(self, *, seed: int, device: torch.device) -> DecodeStreams:
        """The server's plumbing from the decode's seed (``RequestPlumbing``): from now
        on each call drafts its rows with their requests' seeds and anchor positions,
        and ``vllm-rejection`` verifies them on the same seeds and positions; the chain
        verifier draws from a torch generator of its own (it has no per-request keys)."""
        self.plumbing = RequestPlumbing(seed=seed, device=device)
        anchor_seed, chain_seed, _ = derived_seeds(seed, 3)
        return DecodeStreams(
            anchor_seed=anchor_seed,
            drafter_seed=seed,  # torch's RNG: the package's draft call never reads it
            verifier=VerifierNoise(
                seed=seed,
                generator=torch.Generator(device).manual_seed(chain_seed),
                requests=self.plumbing,
            ),
            shared=True,
            server=f"vLLM {self.loaded.version}",
            requests=self.plumbing,
        )

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        """What the server hands the draft step: each request's temperature (0 when it is
        greedy, ``top_k <= 1``) and seed in its slot."""
        temperatures = torch.ones(bs, dtype=torch.float32)
        greedy = torch.ones(bs, dtype=torch.bool)
        stage_sampling_params(
            bs=bs, sampling_info=sampling_info, temperatures=temperatures, greedy_mask=greedy
        )
        if sampling_info is not None:  # vLLM keeps the request's own temperature
            temperatures = sampling_info.temperatures.float().cpu()
        slots = self.slots(bs)
        device = self.sampler.temperature.device
        self.sampler.temperature[slots] = torch.where(greedy, 0.0, temperatures).to(device)
        self.bs = bs

    def _positions(self, bs: int, *, offset: int) -> torch.Tensor:
        """``[bs, gamma]``: the predicted position of each step (``sample_pos``) when the
        sequences are ``offset`` positions past their start."""
        steps = torch.arange(self.gamma, dtype=torch.int64)
        start = self.sequence_start[:bs] + offset
        return start.unsqueeze(1) + steps.unsqueeze(0) + 1

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        sampler, gamma, q = self.sampler, self.gamma, self.rows_per_request
        block = prepare_block(
            model=self.model.toy,
            gamma=gamma,
            max_bs=self.max_bs,
            hidden_states=hidden_states,
            input_ids=input_ids,
        )  # the harness's own validation of the server's inputs, and its base logits
        bs = block.bs
        self._candidates = self.contract_candidates(block.base_logits)
        device = hidden_states.device
        rows = bs * gamma
        first = 0 if self.sample_from_anchor else 1
        query = torch.arange(gamma, device=device) + first
        sampler.sample_indices[:rows] = (
            torch.arange(bs, device=device).unsqueeze(1) * q + query
        ).reshape(-1)
        sampler.sample_idx_mapping.fill_(-1)
        slots = self.slots(bs)
        sampler.sample_idx_mapping[:rows] = slots.repeat_interleave(gamma)
        if self.plumbing is None:  # the harness's own requests, moved on a block a call
            positions = self._positions(bs, offset=self.offset)
            self._call_verifier = sequence_keys(
                self.server_seeds[slots.cpu()], self.sequence_start[:bs], end=self.offset + gamma
            )
        else:  # the decode's requests: their seeds in these slots, their anchor positions
            decode_rows = self.plumbing.next_call()
            assert self.plumbing.seeds is not None and self.plumbing.positions is not None
            sampler.seeds[slots] = self.plumbing.seeds[decode_rows].to(sampler.seeds)
            steps = torch.arange(gamma, dtype=torch.int64, device=decode_rows.device)
            positions = self.plumbing.positions[decode_rows].unsqueeze(1) + steps + 1
            self._call_verifier = self.plumbing.verifier_keys(decode_rows, gamma=gamma)
        self._call_positions = positions.cpu()
        sampler.sample_pos[:rows] = positions.reshape(-1).to(device)
        sampler.input_buffers.input_ids[: bs * q] = input_ids.to(torch.int64)
        self._counter_start = self.offset
        with observe_draft_keys() as reads:
            sampler._sample_sequential(bs, hidden_states)
        self._reads = reads
        self.offset += gamma  # the server commits the block: every sequence moves on

    def contract_candidates(self, base_logits: torch.Tensor) -> torch.Tensor | None:
        """``[bs, gamma, V]`` bool: the top-K variant's candidates, the ``K`` largest base
        logits of each position (chosen once per block, as the variant does); ``None``
        for the dense variant."""
        topk = self.sampler._draft_topk
        if topk is None:
            return None
        chosen = base_logits.topk(topk, dim=-1).indices
        return torch.zeros_like(base_logits, dtype=torch.bool).scatter_(-1, chosen, True)

    def cache(self) -> torch.Tensor | None:
        return read_tensor(self.sampler, "draft_logits")  # [max_bs, gamma, V] or None

    def draft_block(self, rows: int) -> DraftBlock:
        cache = self.cache()
        if cache is None:
            raise OutputError("a greedy fold keeps no draft_logits for a verifier to read")
        staged = self.staged(rows)
        return DraftBlock(
            tokens=self.sampler.draft_tokens[:rows],
            step_logits=cache[self.slots(rows)],
            temperatures=staged.temperatures,
            greedy_mask=staged.greedy_mask,
        )

    def staged(self, rows: int) -> StagedParams:
        """The first ``rows`` requests' staging as a verifier reads it: greedy where the
        slot's temperature is 0 (then ``T = 1``), else the slot's temperature."""
        temperatures = self.sampler.temperature[self.slots(rows)].clone()
        greedy = temperatures == 0
        return StagedParams(temperatures=torch.where(greedy, 1.0, temperatures), greedy_mask=greedy)

    def _buffers(self) -> dict[str, torch.Tensor | None]:
        return {
            "draft_tokens": read_tensor(self.sampler, "draft_tokens"),
            "draft_logits": self.cache(),
            "draft_token_confidence_probs": read_tensor(
                self.sampler, "draft_token_confidence_probs"
            ),
        }

    def poison(self) -> None:
        for buffer in self._buffers().values():
            poison(buffer)
        self._reads = DraftReads()  # the next call's reads only

    def observe_walks(self) -> AbstractContextManager[HeadCounts]:
        return observe_speculator_walks(self.sampler, self.model)

    def _tokens(self, case: Case) -> torch.Tensor:
        tokens = read_tensor(self.sampler, "draft_tokens")
        expected = (self.max_bs, case.gamma)
        if tokens is None or tokens.dtype != torch.int64 or tuple(tokens.shape) != expected:
            raise OutputError(f"draft_tokens must be int64 {list(expected)}, got {tokens!r}")
        return tokens

    def read_tokens(self, case: Case) -> torch.Tensor:
        """The speculator's ``draft_tokens`` alone: without ``read``'s replay of the
        call's noise (``declared_stream_tokens``, as many kernel programs as the call),
        which the support scan does not read."""
        return self._tokens(case)[: case.bs].clone()

    def read(self, case: Case) -> CallOutputs:
        buffers = self._buffers()
        tokens = self.read_tokens(case)
        expected = (self.max_bs, case.gamma)
        slots = self.slots(case.bs)
        staged = self.staged(case.bs)
        counter = NoiseCounter(key=case.seed, start=self._counter_start, end=self.offset)
        step_logits = replay = None
        cache = buffers["draft_logits"]
        if case.folded_sampling:
            shape = (self.max_bs, case.gamma, case.vocab_size)
            if cache is None or tuple(cache.shape) != shape:
                raise OutputError(f"draft_logits must be {list(shape)} when sampling")
            step_logits = self.kept_step_logits(cache, slots)
            replay = self.declared_stream_tokens(step_logits, bs=case.bs)
        confidence = None
        if case.confidence:
            probs = buffers["draft_token_confidence_probs"]
            if probs is None or tuple(probs.shape) != expected:
                raise OutputError(f"draft_token_confidence_probs must be {list(expected)}")
            confidence = probs[: case.bs].clone()
        keyed = keyed_draws(self._reads, max_bs=self.max_bs, verifier=self._call_verifier)
        return CallOutputs(
            tokens=tokens,
            step_logits=step_logits,
            confidence=confidence,
            staged=staged,
            noise_counter=counter,
            counter_replay=replay,
            candidates=self._candidates,
            requested=staged,  # the slots' temperatures are the server's own staging
            keyed_draws=keyed if self._reads.calls else None,
        )

    def kept_step_logits(self, cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The live slots' kept step logits, before temperature (``[bs, gamma, V]``)."""
        return cache[slots].clone()

    def declared_stream_tokens(self, step_logits: torch.Tensor, *, bs: int) -> torch.Tensor:
        """``[bs, gamma]``: the token each kept cache row gives under the declared noise
        (the request's seed, the step, the position the server handed the call, each
        token id), through the package's own ``gumbel_sample`` at the slots' staged
        temperatures, with the drafting flag the call passed (which hash domain it
        drew in is ``noise_shared_with_verifier``'s to judge)."""
        sampler = self.sampler
        device = step_logits.device
        slots = self.slots(bs)
        positions = self._call_positions[:bs].to(device)
        drafting = self._reads.drafting()
        scratch = step_logits.new_empty(self.max_bs, *step_logits.shape[1:])
        steps = []
        for step in range(self.gamma):
            steps.append(
                self.loaded.gumbel_sample(
                    step_logits[:, step].contiguous(),
                    slots,
                    sampler.temperature,
                    sampler.seeds,
                    positions[:, step] - 1,
                    apply_temperature=True,
                    is_drafting=drafting.get(step, True),
                    logits_cache=scratch,
                    logits_cache_col=torch.tensor(step, dtype=torch.int32, device=device),
                    use_fp64=bool(sampler.use_fp64_gumbel),
                )
            )
        return torch.stack(steps, dim=1)

    def outside_writes(self, case: Case) -> dict[str, int]:
        buffers = self._buffers()
        live = set(self.slots(case.bs).tolist())
        written = {}
        tokens = buffers["draft_tokens"]
        if tokens is not None and tokens.shape[0] > case.bs:
            written["draft_tokens"] = int((tokens[case.bs :] != -1).sum())
        cache = buffers["draft_logits"]
        if cache is not None:
            others = [s for s in range(self.max_bs) if s not in live]
            written["draft_logits"] = int((~torch.isnan(cache[others])).sum())
        probs = buffers["draft_token_confidence_probs"]
        if probs is not None and probs.shape[0] > case.bs:
            written["draft_token_confidence_probs"] = int((~torch.isnan(probs[case.bs :])).sum())
        return {name: count for name, count in written.items() if count}


class VllmConvention(Convention):
    """Builds the package's speculator the way vLLM's model runner leaves it (module doc)."""

    name = "vllm-0.33"
    sampler_type: type[VllmSampler] = VllmSampler  # what ``build`` hands back
    drafter_type: type[VllmDrafter] = VllmDrafter  # the model hooks it hands the speculator

    def takes_out(self, sampler_class: type[Any]) -> bool:
        return False  # the server reads the speculator's own draft_tokens

    def outside_contract(self, case: Case, *, sampler_class: type[Any]) -> str | None:
        return outside_contract(case, sampler_class=sampler_class)

    @property
    def oracle_cut(self) -> OracleCut | None:
        """Under Triton's interpreter every sampled row and step is a Python program
        (docs/upstream.md, "The statistical oracle on vLLM's sampler"): the depth the
        era of the release in use sets for its row, else ``SAMPLER_CUT`` in its name."""
        if not interpreted():
            return None
        depth = release_oracle_depth()
        if depth is None:
            return replace(SAMPLER_CUT, by=self.name + SAMPLER_CUT.by.removeprefix("vllm-0.33"))
        return OracleCut(
            rows=depth.rows,
            targets=depth.targets,
            rounds=depth.rounds,
            heads=depth.heads,
            stage_rows=(depth.rows,),
            by=f"vLLM {installed_version()}'s row (its era's depth under Triton's interpreter)",
        )

    @property
    def scan_batch(self) -> int | None:
        """Under Triton's interpreter each scanned triple is a program of the Gumbel
        kernel: the scan drives the sampler at ``SCAN_BATCH`` rows a call."""
        return SCAN_BATCH if interpreted() else None

    def build(
        self,
        sampler_class: type[Any],
        *,
        case: Case,
        inputs: CaseInputs,
        model: Any = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        loaded = load_vllm()
        reason = self.outside_contract(case, sampler_class=sampler_class)
        if reason is not None:
            raise OutputError(reason)
        device = torch.device(case.device)
        toy = inputs.model if model is None else model
        drafter = self.drafter_type(model=toy, confidence_fn=inputs.confidence_fn)
        gamma, max_bs = case.gamma, case.max_bs
        q = query_rows_per_request(gamma=gamma, sample_from_anchor=case.sample_from_anchor)
        dtype = drafter.toy.dtype
        speculator = object.__new__(sampler_class)  # its __init__ needs a VllmConfig
        cache = torch.full((max_bs, gamma, case.vocab_size), float("-inf"), dtype=dtype)
        draft_logits = cache.to(device) if case.folded_sampling else None
        state = {
            "model": drafter,
            "device": device,
            "num_speculative_steps": gamma,
            "num_query_per_req": q,
            "max_num_reqs": max_bs,
            "vocab_size": case.vocab_size,
            "sample_from_anchor": case.sample_from_anchor,
            "_draft_topk": getattr(sampler_class, TOPK_ATTRIBUTE, None),
            "use_confidence_head": case.confidence,
            "use_acceptance_estimator": False,
            "acceptance_estimator": None,
            "draft_watermarker": None,
            "use_fp64_gumbel": False,
            "_step_cols": torch.arange(gamma, dtype=torch.int32, device=device),
            "_anchor_idx": torch.arange(max_bs, dtype=torch.int64, device=device) * q,
            "sample_indices": torch.zeros(max_bs * gamma, dtype=torch.int64, device=device),
            "sample_pos": torch.zeros(max_bs * gamma, dtype=torch.int64, device=device),
            "sample_idx_mapping": torch.full(
                (max_bs * gamma,), -1, dtype=torch.int64, device=device
            ),
            "temperature": torch.zeros(max_bs, dtype=torch.float32, device=device),
            "seeds": torch.tensor(request_seeds(case), dtype=torch.int64, device=device),
            "draft_tokens": torch.zeros(max_bs, gamma, dtype=torch.int64, device=device),
            "draft_token_confidence_probs": torch.empty(
                max_bs, gamma, dtype=torch.float32, device=device
            ),
            "draft_logits": draft_logits,
            "input_buffers": _InputBuffers(
                input_ids=torch.zeros(max_bs * q, dtype=torch.int64, device=device)
            ),
        }
        state.update(reduced_vocab_state(drafter, draft_logits=draft_logits, max_bs=max_bs))
        for name, value in state.items():
            setattr(speculator, name, value)
        return self.sampler_type(sampler=speculator, model=drafter, case=case, loaded=loaded)


VLLM_0_33 = VllmConvention()
