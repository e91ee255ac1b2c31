"""Planted defects of our own in the shape of vLLM 0.33's DSpark speculator.

Each is a subclass of the installed package's ``DSparkSpeculator`` that changes one
thing around the package's own walk (every line of sampling math stays vLLM's):

- ``CacheFromSecondWalk``: the draft tokens come from one walk and the verifier's cache
  from a second walk on other noise (the double-walk bug in vLLM's shape);
  ``teacher_forcing`` targets it.
- ``PositionsNotAdvanced``: every call keys its noise on the positions of the first
  call, so a later call redraws the same noise; ``fresh_noise`` targets it.
- ``DraftKeyedAsVerifier``: drafts without the drafting flag, so the salt that keeps
  the draft's hash keys off the verifier's is not added: step 0 of a request draws at
  the (seed, position) key its verifier's residual or bonus draw at that position reads;
  ``noise_shared_with_verifier`` targets it.
- ``DraftMapAppliedTwice`` (a reduced draft vocabulary): the sampled path maps the id it
  sampled, already a target id, through the drafter's ``map_draft_to_target`` again;
  ``noise_replay`` targets it (and ``ran``, where a sampled id lies past the draft
  vocabulary and the second lookup reads outside the map).

``TargetSpaceSampling`` is correct but different, for the no-false-alarm side: it
scatters the draft-width row into target columns itself (through the map, not the
package's scatter index and buffer) on both paths and takes the greedy argmax there.
``Float64Gumbel`` is too: it draws its Gumbel noise in float64 (the package's
``use_fp64_gumbel``), two hash words per token, the second in the hash's other domain,
both at the salted draft keys.

Importing this module needs vLLM 0.33 (``tox run -e vllm``).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from vllm.v1.worker.gpu.spec_decode.dspark.speculator import DSparkSpeculator

SPECULATOR_MODULE: Any = importlib.import_module(DSparkSpeculator.__module__)


class CacheFromSecondWalk(DSparkSpeculator):
    """Tokens of walk 1, ``draft_logits`` of walk 2 (drawn with other request seeds)."""

    def _sample_sequential(self, num_reqs: int, head_hidden: torch.Tensor) -> None:
        super()._sample_sequential(num_reqs, head_hidden)
        first_tokens = self.draft_tokens[:num_reqs].clone()
        seeds = self.seeds.clone()
        self.seeds += 1  # the second walk draws other noise
        super()._sample_sequential(num_reqs, head_hidden)
        self.seeds.copy_(seeds)
        self.draft_tokens[:num_reqs] = first_tokens


class PositionsNotAdvanced(DSparkSpeculator):
    """Keeps the positions of its first call and keys every later call's noise on them."""

    def _sample_logits(
        self, logits: torch.Tensor, idx_map: torch.Tensor, sample_pos: torch.Tensor, step: int
    ) -> Any:
        kept: dict[int, torch.Tensor] = self.__dict__.setdefault("first_positions", {})
        stale = kept.setdefault(step, sample_pos.clone())
        return super()._sample_logits(logits, idx_map, stale[: sample_pos.shape[0]], step)


class DraftKeyedAsVerifier(DSparkSpeculator):
    """Calls the package's ``gumbel_sample`` with ``is_drafting=False``: no salt on the
    draft's positions (the seed still gets the step mixed in)."""

    def _sample_logits(
        self, logits: torch.Tensor, idx_map: torch.Tensor, sample_pos: torch.Tensor, step: int
    ) -> Any:
        sample = SPECULATOR_MODULE.gumbel_sample

        def unsalted(*args: Any, **kwargs: Any) -> Any:
            return sample(*args, **{**kwargs, "is_drafting": False})  # planted

        SPECULATOR_MODULE.gumbel_sample = unsalted
        try:
            return super()._sample_logits(logits, idx_map, sample_pos, step)
        finally:
            SPECULATOR_MODULE.gumbel_sample = sample


class Float64Gumbel(DSparkSpeculator):
    """Draws its Gumbel noise in float64 (``use_fp64_gumbel``)."""

    def _sample_sequential(self, num_reqs: int, head_hidden: torch.Tensor) -> None:
        self.use_fp64_gumbel = True
        super()._sample_sequential(num_reqs, head_hidden)


class DraftMapAppliedTwice(DSparkSpeculator):
    """Maps the sampled (target) id through ``map_draft_to_target`` a second time."""

    def _sample_logits(
        self, logits: torch.Tensor, idx_map: torch.Tensor, sample_pos: torch.Tensor, step: int
    ) -> Any:
        sampled = super()._sample_logits(logits, idx_map, sample_pos, step)
        if self.draft_logits is None:
            return sampled  # the greedy path maps once, as the package does
        return self.model.map_draft_to_target(sampled)


class TargetSpaceSampling(DSparkSpeculator):
    """Samples in target space from a row it scatters itself: the draft-width logits go
    to the columns ``map_draft_to_target`` names in a fresh ``-inf`` row; the greedy
    path takes the argmax of that row (no map afterwards)."""

    def _sample_logits(
        self, logits: torch.Tensor, idx_map: torch.Tensor, sample_pos: torch.Tensor, step: int
    ) -> Any:
        draft_ids = torch.arange(logits.shape[-1], device=logits.device)
        columns = self.model.map_draft_to_target(draft_ids)
        row = torch.full(
            (logits.shape[0], self.vocab_size), float("-inf"), dtype=logits.dtype
        ).index_copy_(1, columns, logits)
        if self.draft_logits is None:
            return row.argmax(dim=-1)
        scatter = self._d2t_scatter_index
        self._d2t_scatter_index = None  # the row is already in target columns
        try:
            return super()._sample_logits(row, idx_map, sample_pos, step)
        finally:
            self._d2t_scatter_index = scatter
