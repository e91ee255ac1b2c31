"""The after-fix sampler of ``dspark_after_fix``, with some ``sglang`` imports lazy.

Shaped like the server's own module: the sync type is imported for annotations only,
the sync sites where the step sampler is built, and an NPU helper inside the branch
that runs on NPU alone. Only the module-level imports decide its era; the lazy ones
are resolved from that era when they run (and the NPU one never runs here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from sglang.kernels.ops.speculative.dspark.dspark_draft_model import SampleStepTokens
from sglang.srt.environ import envs
from sglang.srt.models.dspark import VanillaMarkov
from sglang.srt.speculative.dspark_components.dspark_draft import (
    select_draft_hidden_without_anchor,
)
from sglang.srt.utils import is_npu

if TYPE_CHECKING:
    from sglang.srt.speculative.spec_tp_sync import SpecTpSync

_is_npu = is_npu()


def _logits_dtype(model) -> torch.dtype:
    return model.lm_head.weight.dtype


def greedy_step_sampler(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
    del step_idx
    return torch.argmax(step_logits, dim=-1)


class DsparkDraftSampler:
    """Tail hook of the draft graph: fills ``out`` (and the folded buffers)."""

    def __init__(
        self,
        *,
        model,
        gamma,
        max_bs,
        device,
        tp_sync: SpecTpSync,
        confidence_fn=None,
        out=None,
        folded_sampling: bool = True,
    ):
        self.model = model
        self.markov_head = model.markov_head
        self.gamma = int(gamma)
        self.sample_from_anchor = bool(model.sample_from_anchor)
        self.query_token_num = self.gamma if self.sample_from_anchor else self.gamma + 1
        max_bs = int(max_bs)
        # Read once: the branch is baked into the captured graph.
        self._fused_greedy = envs.SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV.get()
        self._tp_sync = tp_sync
        if out is None:
            out = torch.empty((max_bs * self.gamma,), dtype=torch.int64, device=device)
        self.out = out
        self.confidence_fn = confidence_fn
        self.confidence_out = None
        if confidence_fn is not None:
            self.confidence_out = torch.empty(
                (max_bs, self.gamma), dtype=torch.float32, device=device
            )
        self.folded_sampling = folded_sampling
        self.temperatures = self.greedy_mask = self.exp_noise = self.corrected_out = None
        if folded_sampling:
            vocab = int(model.lm_head.org_vocab_size)
            self.temperatures = torch.ones((max_bs,), dtype=torch.float32, device=device)
            self.greedy_mask = torch.ones((max_bs,), dtype=torch.bool, device=device)
            self.exp_noise = torch.empty((max_bs, vocab), dtype=torch.float32, device=device)
            self.corrected_out = torch.empty(
                (max_bs * self.gamma, vocab), dtype=_logits_dtype(model), device=device
            )

    def stage_sampling_params(self, *, bs: int, sampling_info) -> None:
        """Host-side refresh before the replay that consumes it."""
        if not self.folded_sampling:
            return
        if sampling_info is None:
            self.temperatures[:bs].fill_(1.0)
            self.greedy_mask[:bs].fill_(True)
            return
        torch.clamp(
            sampling_info.temperatures.view(-1)[:bs].to(torch.float32),
            min=1e-5,
            out=self.temperatures[:bs],
        )
        self.greedy_mask[:bs].copy_((sampling_info.top_ks <= 1).view(-1)[:bs])

    def _step_sampler(self, bs: int):
        from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite

        if not self.folded_sampling:

            def sampler(step_logits, step_idx):
                return self._tp_sync.sync(
                    SpecTpSyncSite.DSPARK_GRAPH_GREEDY, greedy_step_sampler(step_logits, step_idx)
                )

            return sampler

        def sampler(step_logits, step_idx):
            del step_idx
            noise = self.exp_noise[:bs].exponential_()  # fresh noise every step and replay
            return self._tp_sync.sync(
                SpecTpSyncSite.DSPARK_GRAPH_SAMPLE,
                SampleStepTokens.execute(
                    step_logits=step_logits,
                    temperatures=self.temperatures[:bs],
                    greedy_mask=self.greedy_mask[:bs],
                    exp_noise=noise,
                ),
            )

        return sampler

    def __call__(self, hidden_states, input_ids):
        if _is_npu:
            from sglang.srt.hardware_backend.npu.dspark import npu_draft_block

            return npu_draft_block(self, hidden_states, input_ids)
        bs = hidden_states.shape[0] // self.query_token_num
        if self.sample_from_anchor:
            model_hidden = hidden_states
            sample_hidden = hidden_states.view(bs, self.gamma, -1)
        else:
            model_hidden, sample_hidden = select_draft_hidden_without_anchor(
                hidden_states, bs=bs, gamma=self.gamma
            )
        base_logits, confidence_tap = self.model.compute_base_logits(model_hidden)
        base_logits = base_logits.view(bs, self.gamma, -1)
        anchor = input_ids.view(bs, self.query_token_num)[:, 0]

        draft_tokens = None
        if (
            not self.folded_sampling
            and self._fused_greedy
            and isinstance(self.markov_head, VanillaMarkov)
        ):
            draft_tokens = self.markov_head.sample_block_greedy_fused(
                base_logits, first_prev_tokens=anchor
            )
        if draft_tokens is None:
            draft_tokens, corrected_logits = self.markov_head.sample_block(
                base_logits,
                first_prev_tokens=anchor,
                hidden_states=sample_hidden,
                sampler=self._step_sampler(bs),
                collect_corrected=self.folded_sampling,
            )
            if self.folded_sampling:
                self.corrected_out[: bs * self.gamma].copy_(
                    corrected_logits.reshape(bs * self.gamma, -1)
                )

        self.out[: draft_tokens.numel()].copy_(draft_tokens.reshape(-1))
        if self.confidence_out is not None:
            confidence = self.confidence_fn(
                draft_hidden=sample_hidden,
                anchor_tokens=anchor,
                draft_tokens=draft_tokens,
                confidence_tap=confidence_tap,
            )
            self.confidence_out[:bs].copy_(confidence)
