"""vLLM's DSpark model hooks over the case's toy drafter, and the reduced-vocabulary state
vLLM's ``load_draft_model`` leaves beside them: the model math the convention
(``harness.upstream.vllm_convention``) hands the package's speculator, and the counter of
the speculator's walks through those hooks (``observe_speculator_walks``). The walk, the
noise and the sampling that use the hooks are the package's (docs/upstream.md,
"vLLM 0.33")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from harness.plugins.walks import HeadCounts


class VllmDrafter:
    """vLLM's DSpark model hooks over the case's toy drafter (vanilla head).

    ``compute_draft_logits`` is the toy's base logits; ``markov_embed`` is ``W1[prev]``
    (``prev`` a target id) and ``markov_bias`` ``W2 . embed``; ``apply_markov_bias_gathered``
    writes base plus bias at the chosen candidates of a ``-inf`` row; ``compute_confidence``
    is the case's linear probe over ``[hidden | embed]``. A drafter with a reduced draft
    vocabulary (``Case.draft_vocab``) works in draft-width columns as vLLM's does: the
    logits, the bias and the gathered candidates are the toy's own values at the draft
    vocabulary's target columns, ``draft_id_to_target_id`` holds vLLM's offsets (target
    id = draft id + offset) and ``map_draft_to_target`` applies them; with the full
    vocabulary it is ``None`` and the map the identity. The hooks are model math; the
    walk, the noise, the scatter to target columns and the sampling that use them are
    vLLM's.
    """

    def __init__(self, *, model: Any, confidence_fn: Any) -> None:
        self.toy = model
        self.head = model.markov_head
        self.confidence_fn = confidence_fn
        self.draft_columns: torch.Tensor | None = model.draft_vocab_ids  # [Vd] target ids
        self.draft_id_to_target_id: torch.Tensor | None = None
        if self.draft_columns is not None:
            draft_ids = torch.arange(self.draft_columns.numel(), device=self.draft_columns.device)
            self.draft_id_to_target_id = self.draft_columns - draft_ids

    def _draft_width(self, target_width: torch.Tensor) -> torch.Tensor:
        """``[N, V] -> [N, Vd]``: the draft vocabulary's target columns, in draft order."""
        if self.draft_columns is None:
            return target_width
        return target_width[:, self.draft_columns]

    def compute_draft_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._draft_width(self.toy.compute_base_logits(hidden)[0])

    def markov_embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.head.W1(token_ids)

    def markov_bias(self, markov_embed: torch.Tensor) -> torch.Tensor:
        return self._draft_width(self.head.W2(markov_embed))

    def map_draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        if self.draft_id_to_target_id is None:
            return draft_ids
        return draft_ids + self.draft_id_to_target_id[draft_ids]

    def apply_markov_bias_gathered(
        self,
        markov_embed: torch.Tensor,
        logits: torch.Tensor,
        values: torch.Tensor,
        index: torch.Tensor,
    ) -> torch.Tensor:
        # The toy's bias is one [r, V] projection; gathering its entries keeps each sum
        # the reference's own (a [K, r] product of the gathered rows rounds differently).
        bias = self.markov_bias(markov_embed).gather(1, index)  # [bs, K], draft columns
        return logits.scatter_(1, index, values + bias.to(values.dtype))

    def compute_confidence(self, hidden: torch.Tensor, markov_embed: torch.Tensor) -> torch.Tensor:
        probe = self.confidence_fn
        score = hidden.float() @ probe.w_hidden + markov_embed.float() @ probe.w_embedding
        return torch.sigmoid(score + probe.bias)


def reduced_vocab_state(
    drafter: VllmDrafter, *, draft_logits: torch.Tensor | None, max_bs: int
) -> dict[str, torch.Tensor | None]:
    """``_d2t_scatter_index`` and ``_draft_scatter_buf`` as vLLM's ``load_draft_model``
    leaves them: set only when the drafter has a reduced vocabulary and the server keeps
    a ``draft_logits`` cache (the sampled path scatters the draft-width row into the
    target columns of a ``-inf`` row before sampling); ``None`` otherwise."""
    d2t = drafter.draft_id_to_target_id
    if draft_logits is None or d2t is None:
        return {"_d2t_scatter_index": None, "_draft_scatter_buf": None}
    vocab_size = draft_logits.shape[-1]
    return {
        "_d2t_scatter_index": torch.arange(d2t.numel(), device=d2t.device) + d2t,
        "_draft_scatter_buf": torch.full(
            (max_bs, vocab_size), float("-inf"), dtype=draft_logits.dtype, device=d2t.device
        ),
    }


@contextmanager
def observe_speculator_walks(sampler: Any, drafter: VllmDrafter) -> Iterator[HeadCounts]:
    """Count the speculator's walks (a step-0 sample starts one), its Markov steps
    (``markov_embed``, which a recurrent head's ``markov_step`` calls too) and step
    samples, keeping each walk's tokens."""
    counts = HeadCounts()
    walks: list[list[torch.Tensor]] = []
    sample_logits = sampler._sample_logits
    embed = drafter.markov_embed

    def counting_sample_logits(
        logits: Any, idx_map: Any, sample_pos: Any, step: int, *bias: Any
    ) -> Any:  # ``bias``: 0.34's Markov bias for the Gumbel kernel to add, where it passes one
        counts.sampler_calls += 1
        if step == 0 or not walks:
            counts.walks += 1
            walks.append([])
        sampled = sample_logits(logits, idx_map, sample_pos, step, *bias)
        walks[-1].append(sampled)
        return sampled

    def counting_embed(token_ids: torch.Tensor) -> torch.Tensor:
        counts.head_steps += 1
        return embed(token_ids)

    sampler._sample_logits = counting_sample_logits
    drafter.markov_embed = counting_embed  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        del sampler._sample_logits
        del drafter.markov_embed
        counts.walk_tokens = [torch.stack(walk, dim=1) for walk in walks if walk]
