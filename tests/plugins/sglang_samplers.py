"""sglang 0.5.23-shaped samplers: the installed package's ``DsparkDraftSampler``, subclassed.

Importing this module loads the installed package (``harness.upstream.loaders.sglang_loader``),
so only ``upstream`` tests import it. No line of the package is copied: each class
calls the package's own code and changes one thing around it.

- ``TorchGumbelSampler``: correct, of another design: the package's heads walk the
  block, but each step's noise is a torch ``exponential_`` draw raced by the
  reference's ``exponential_race_torch`` instead of the package's Philox stream;
- planted defects, each aimed at one check: ``OffsetNotAdvanced`` (fresh_noise),
  ``StepLogitsOfAnotherWalk`` (teacher_forcing), ``GreedyRowsSampled``
  (greedy_rows_argmax) and ``VerifyIdsPastBatch`` (no_writes_outside_batch);
- ``KeyedWithVerifierNoise`` (noise_shared_with_verifier): the server's draft noise
  re-keyed with the verifier's rejection key of the same server seed;
- life defects, each aimed at a life check: ``OwnOutBuffer`` (life_server_buffer) and
  ``CounterBackAfterSecondCall`` (life_fresh_noise: right on the first two calls);
- the counter moved before the walk instead of after: ``OffsetAdvancedFirst`` (correct,
  fresh words every call: lossless, not drop-in) and ``OffsetAdvancedFirstOnce``
  (defect: only its first call does it, so its second call reads the same words:
  noise_replay).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import torch

from harness.upstream.loaders.sglang_loader import load_sglang
from reference import exponential_race_torch

PACKAGE = load_sglang()
Sampler: Any = PACKAGE.DsparkDraftSampler


def walked_block(
    sampler: Any,
    model_hidden: Any,
    sample_hidden: Any,
    anchor: Any,
    bs: int,
    draw: Callable[[torch.Tensor, int], torch.Tensor],
) -> Any:
    """The package's sampled block with each step's token from ``draw(kept step logits,
    step)``: its head and its buffers, its tensor-parallel sync, the server's noise
    counter moved once per block."""
    base_logits, features = sampler.model.compute_base_logits(model_hidden)
    base_logits = base_logits.view(bs, sampler.gamma, -1)  # [bs, gamma, V]
    kept = sampler._step_logits(base_logits)[:bs]  # the package's own [bs, gamma, V] buffer
    head = sampler.markov_head
    state = head.init_state(sample_hidden)
    prev = anchor.long()
    tokens = []
    for step in range(sampler.gamma):
        hidden = None if sample_hidden is None else sample_hidden[:, step]
        bias, state = head.step_bias(prev, hidden_states=hidden, state=state)
        kept[:, step] = (base_logits[:, step].float() + bias.float()).to(kept.dtype)
        prev = draw(kept[:, step], step)
        prev = sampler._tp_sync.sync(PACKAGE.SpecTpSyncSite.DSPARK_DRAFT, prev)
        tokens.append(prev)
    sampler._noise.offset.add_(1)  # one counter per sampled block, as the package
    draft = torch.stack(tokens, dim=1)  # [bs, gamma]
    sampler.out[: draft.numel()].copy_(draft.reshape(-1))
    return draft, features


class TorchGumbelSampler(Sampler):
    """Correct: the package's head and buffers, fresh torch noise on every step."""

    def _markov_block(self, model_hidden: Any, sample_hidden: Any, anchor: Any, bs: int) -> Any:
        if self.greedy_draft:
            return super()._markov_block(model_hidden, sample_hidden, anchor, bs)

        def fresh_torch_noise(logits: torch.Tensor, step: int) -> torch.Tensor:
            return exponential_race_torch(
                logits,
                temperatures=self.params.temperatures[:bs],
                greedy_mask=self.params.greedy_mask[:bs],
                noise=torch.empty(logits.shape, device=logits.device).exponential_(),
            )

        return walked_block(self, model_hidden, sample_hidden, anchor, bs, fresh_torch_noise)


class OffsetNotAdvanced(Sampler):
    """Defect: the noise counter is put back after each block, so every call redraws the
    same Philox noise."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if not self.greedy_draft:
            self._noise.offset.sub_(1)


class StepLogitsOfAnotherWalk(Sampler):
    """Defect: the double walk on today's contract: ``out`` from one walk, ``step_logits``
    from a second walk at the next counter."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        first_walk = self.out.clone()
        super().__call__(hidden_states, input_ids)  # fresh noise: other tokens, other logits
        self.out.copy_(first_walk)


class GreedyRowsSampled(Sampler):
    """Defect: ``step_temperatures`` keeps the temperature on greedy rows, so a greedy
    request (sent as ``T = 1``, ``top_k = 1``) is sampled."""

    def stage_sampling_params(self, *, bs: int, sampling_info: Any) -> None:
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)
        self.params.step_temperatures[:bs].copy_(self.params.temperatures[:bs])


class VerifyIdsPastBatch(Sampler):
    """Defect: ``verify_ids`` is rewritten for every row of the static buffer, other graph
    buckets' rows included."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if self.verify_ids is not None:
            bs = hidden_states.shape[0] // self.query_token_num
            self.verify_ids[bs:].fill_(0)


class OwnOutBuffer(Sampler):
    """Defect: on its first call swaps the ``out=`` tensor the server passed for a copy of
    its own, and writes there from then on."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if not getattr(self, "_own_out", False):
            self.out = self.out.clone()  # planted
            self._own_out = True
        super().__call__(hidden_states, input_ids)


class CounterBackAfterSecondCall(Sampler):
    """Defect: from its third call on, the noise counter is put back to where the second
    call began, so a later replay redraws the second call's Philox noise."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        self._calls = getattr(self, "_calls", 0) + 1
        if self._calls == 2:
            self._second_start = int(self._noise.offset.item())
        elif self._calls > 2:
            self._noise.offset.fill_(self._second_start)  # planted
        super().__call__(hidden_states, input_ids)


class OffsetAdvancedFirst(Sampler):
    """Correct, not drop-in: advances the noise counter before the walk instead of after,
    so each block reads the counter after the one it began at, never read before or
    after by another block."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if self.greedy_draft:
            super().__call__(hidden_states, input_ids)
            return
        self._noise.offset.add_(1)
        super().__call__(hidden_states, input_ids)
        self._noise.offset.sub_(1)  # the package's own move after the walk, undone


class OffsetAdvancedFirstOnce(OffsetAdvancedFirst):
    """Defect: only its first call advances the counter first; later calls read the
    counter they begin at, as the package does, the first of them the first call's."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if getattr(self, "_advanced_once", False):
            Sampler.__call__(self, hidden_states, input_ids)
            return
        self._advanced_once = True  # planted: the next call reuses this call's words
        super().__call__(hidden_states, input_ids)


class KeyedWithVerifierNoise(Sampler):
    """Defect: keys the server's draft noise with the key of the verifier's rejection noise
    of the same server seed (read back from the draft key through the package's domain),
    so block ``c`` reads the (key, counter) the verifier reads in round ``c``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if not getattr(self, "_rekeyed", False):
            draft = PACKAGE.modules["sglang.srt.speculative.dspark_components.dspark_draft"]
            server_seed = self._noise.key ^ draft._DRAFT_NOISE_DOMAIN
            msgspec.structs.force_setattr(  # planted
                self._noise, "key", PACKAGE.rejection_noise_key(server_seed)
            )
            self._rekeyed = True
        super().__call__(hidden_states, input_ids)
