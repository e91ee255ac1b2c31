"""What every DSpark draft sampler shares except the body of ``__call__``.

The constructor, the static buffers (allocated once at ``max_bs``), the staging of
sampling parameters and the small steps both the legacy and the fixed ``__call__``
are built from. Keeping them here is what makes ``diff legacy/ fixed/`` read like
the upstream fix and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reference.block import BlockInputs, prepare_block
from reference.draft_model import ToyDraftModel
from reference.sampling_params import SamplingInfo, stage_sampling_params
from reference.step_samplers import RaceBackend, StepSampler, folded_race_sampler, greedy_step

ConfidenceFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class DraftSamplerBase:
    """Constructor, buffers and building blocks of a ``DsparkDraftSampler``.

    Buffers: ``out[max_bs*gamma]`` int64 draft tokens; ``corrected_out[max_bs*gamma, V]``
    (folded sampling only) corrected logits in the model dtype; ``confidence_out
    [max_bs, gamma]`` float32 (with a confidence function); ``temperatures[max_bs]``
    float32; ``greedy_mask[max_bs]`` bool; ``exp_noise[max_bs, V]`` float32 (folded only).
    """

    def __init__(
        self,
        *,
        model: ToyDraftModel,
        gamma: int,
        max_bs: int,
        device: str | torch.device,
        confidence_fn: ConfidenceFn | None = None,
        out: torch.Tensor | None = None,
        folded_sampling: bool = True,
        fused_greedy: bool = False,
        race_backend: RaceBackend = "auto",
    ) -> None:
        if not isinstance(gamma, int) or gamma <= 0:
            raise ValueError(f"gamma must be a positive int, got {gamma!r}")
        if not isinstance(max_bs, int) or max_bs <= 0:
            raise ValueError(f"max_bs must be a positive int, got {max_bs!r}")
        if race_backend not in ("auto", "torch", "triton"):
            raise ValueError(
                f"race_backend must be 'auto', 'torch' or 'triton', got {race_backend!r}"
            )
        device = torch.device(device)
        vocab = model.vocab_size
        if out is None:
            out = torch.empty(max_bs * gamma, dtype=torch.int64, device=device)
        elif out.dtype != torch.int64 or tuple(out.shape) != (max_bs * gamma,):
            raise ValueError(
                f"out must be int64 of shape [max_bs*gamma] = [{max_bs * gamma}], "
                f"got {out.dtype} {tuple(out.shape)}"
            )
        elif out.device != device:
            raise ValueError(f"out is on {out.device}, the sampler on {device}")
        self.model = model
        self.gamma = gamma
        self.max_bs = max_bs
        self.device = device
        self.confidence_fn = confidence_fn
        self.folded_sampling = folded_sampling
        self.fused_greedy = fused_greedy
        self.race_backend: RaceBackend = race_backend
        self.out = out
        self.corrected_out = (
            torch.empty(max_bs * gamma, vocab, dtype=model.dtype, device=device)
            if folded_sampling
            else None
        )
        self.confidence_out = (
            torch.empty(max_bs, gamma, dtype=torch.float32, device=device)
            if confidence_fn is not None
            else None
        )
        self.temperatures = torch.ones(max_bs, dtype=torch.float32, device=device)
        self.greedy_mask = torch.ones(max_bs, dtype=torch.bool, device=device)
        self.exp_noise = (
            torch.empty(max_bs, vocab, dtype=torch.float32, device=device)
            if folded_sampling
            else None
        )

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        """Stage per-request temperatures and greedy flags for the next call."""
        stage_sampling_params(
            bs=bs,
            sampling_info=sampling_info,
            temperatures=self.temperatures,
            greedy_mask=self.greedy_mask,
        )

    # -- building blocks of __call__ ----------------------------------------------------------
    def prepare_block(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> BlockInputs:
        return prepare_block(
            model=self.model,
            gamma=self.gamma,
            max_bs=self.max_bs,
            hidden_states=hidden_states,
            input_ids=input_ids,
        )

    def fused_greedy_tokens(self, block: BlockInputs) -> torch.Tensor | None:
        """The fused greedy fast path's tokens, when it is on and the head has one."""
        if self.folded_sampling or not self.fused_greedy:
            return None
        return self.model.markov_head.sample_block_greedy_fused(
            block.base_logits, first_prev_tokens=block.anchor_tokens
        )

    def step_sampler(self, bs: int) -> StepSampler:
        """Folded: the exponential race on fresh noise every step; otherwise greedy."""
        if not self.folded_sampling:
            return greedy_step
        assert self.exp_noise is not None
        return folded_race_sampler(
            noise_buffer=self.exp_noise[:bs],
            temperatures=self.temperatures[:bs],
            greedy_mask=self.greedy_mask[:bs],
            backend=self.race_backend,
        )

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        """Copy a walk's corrected logits ``[bs, gamma, V]`` into ``corrected_out``."""
        assert self.corrected_out is not None and corrected is not None
        self.corrected_out[: bs * self.gamma].copy_(corrected.reshape(bs * self.gamma, -1))

    def emit(self, block: BlockInputs, tokens: torch.Tensor) -> None:
        """Write the draft tokens ``[bs, gamma]`` and, if asked, their confidence."""
        self.out[: block.bs * self.gamma].copy_(tokens.reshape(-1))
        if self.confidence_fn is not None:
            assert self.confidence_out is not None
            self.confidence_out[: block.bs].copy_(
                self.confidence_fn(block.sample_hidden, block.anchor_tokens, tokens)
            )
