"""sglang 0.5.23-shaped samplers that the checks must judge on the server's plumbing (the
requests as the server stages them, the counters its stream hands out), not on the
sampler's own bookkeeping. Each subclasses or wraps the installed package's
``DsparkDraftSampler`` (``harness.upstream.loaders.sglang_loader``); no line of it is copied.

- ``TemperatureGreedyMask``: defect: derives its greedy mask from the temperature
  (``T == 0``) instead of ``top_k <= 1``, so a greedy request, which the server sends as
  ``T = 1``, ``top_k = 1``, is drafted as a ``T = 1`` sample;
- ``StepsAfterTheFirstAtNextCounter``: correct, not drop-in: step 0 draws at the block's
  counter ``c``, steps 1.. at ``c + 1``, and the counter advances by 2 (every draw fresh);
- ``InverseCdfOnPhiloxUniforms``: correct, not drop-in: each step draws its token by
  inverse CDF from one uniform of the package's own Philox words at the block's counter;
- ``Float32KeptLogits``: correct, not drop-in: keeps and races its step logits in
  float32 over a bfloat16 base (the package keeps them in the base dtype);
- ``StepsAfterTheFirstAtCounterZero``: defect: steps 1.. draw at counter 0 on every
  block, a counter the stream handed out to the first block (fresh on the first call
  only).
"""

from __future__ import annotations

from typing import Any

import torch

from harness.upstream.loaders.sglang_loader import load_sglang
from tests.plugins.sglang_samplers import walked_block

PACKAGE = load_sglang()
Sampler: Any = PACKAGE.DsparkDraftSampler
MARKOV_SAMPLE = PACKAGE.modules["sglang.kernels.ops.speculative.dspark.markov_sample"]


class TemperatureGreedyMask(Sampler):
    """Defect: the greedy mask is ``T == 0`` (then the step temperature 0), not the
    package's ``top_k <= 1``."""

    def stage_sampling_params(self, *, bs: int, sampling_info: Any) -> None:
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)
        if sampling_info is None:
            return
        params = self.params
        greedy = sampling_info.temperatures.view(-1)[:bs] == 0  # planted
        params.greedy_mask[:bs].copy_(greedy)
        params.step_temperatures[:bs].copy_(
            torch.where(
                greedy, torch.zeros_like(params.temperatures[:bs]), params.temperatures[:bs]
            )
        )


class _BumpAfterFirstStep:
    """The sampler's ``tp_sync``: after the first step of a sampled block moves the noise
    counter on by one, so steps 1.. draw at the block's counter plus one."""

    def __init__(self, inner: Any, noise: Any, *, to: int | None = None) -> None:
        self.inner = inner
        self.noise = noise
        self.to = to  # None: one past the block's counter; else this counter
        self.steps = 0
        self.block_counter = 0

    def enabled(self, site: Any) -> bool:
        return bool(self.inner.enabled(site))

    def start_block(self) -> None:
        self.steps = 0
        self.block_counter = int(self.noise.offset.item())

    def sync(self, site: Any, values: torch.Tensor) -> torch.Tensor:
        synced = self.inner.sync(site, values)
        self.steps += 1
        if self.steps == 1:
            self.noise.offset.fill_(self.block_counter + 1 if self.to is None else self.to)
        return synced


class StepsAfterTheFirstAtNextCounter(Sampler):
    """Correct: step 0 at the block's counter ``c``, steps 1.. at ``c + 1``; the block
    then advances the counter once more (to ``c + 2``): no counter is drawn twice."""

    def _markov_block(self, model_hidden: Any, sample_hidden: Any, anchor: Any, bs: int) -> Any:
        if self.greedy_draft:
            return super()._markov_block(model_hidden, sample_hidden, anchor, bs)
        if not isinstance(self._tp_sync, _BumpAfterFirstStep):
            self._tp_sync = _BumpAfterFirstStep(self._tp_sync, self._noise)
        self._tp_sync.start_block()
        return super()._markov_block(model_hidden, sample_hidden, anchor, bs)


class StepsAfterTheFirstAtCounterZero(Sampler):
    """Defect: steps 1.. draw at counter 0, then the counter is put where the package
    leaves it (the block's counter plus one): from the second block on, a counter the
    stream handed out before."""

    def _markov_block(self, model_hidden: Any, sample_hidden: Any, anchor: Any, bs: int) -> Any:
        if self.greedy_draft:
            return super()._markov_block(model_hidden, sample_hidden, anchor, bs)
        if not isinstance(self._tp_sync, _BumpAfterFirstStep):
            self._tp_sync = _BumpAfterFirstStep(self._tp_sync, self._noise, to=0)  # planted
        self._tp_sync.start_block()
        drafted = super()._markov_block(model_hidden, sample_hidden, anchor, bs)
        self._noise.offset.fill_(self._tp_sync.block_counter + 1)
        return drafted


def philox_uniforms(noise: Any, *, rows: int, step: int, device: torch.device) -> torch.Tensor:
    """``[rows]``: one uniform in (0, 1] per row, the first word of the package's Philox
    at (quad 0, row, step, the block's counter), scaled as the package scales words."""
    counter = noise.offset.reshape(1, 1) & 0xFFFFFFFF
    words = MARKOV_SAMPLE._philox(
        noise.key,
        torch.zeros((1, 1), dtype=torch.int64, device=device),
        torch.arange(rows, dtype=torch.int64, device=device)[:, None],
        torch.full((1, 1), step, dtype=torch.int64, device=device),
        counter,
    )
    bits = torch.broadcast_tensors(*words)[0][:, 0]  # [rows]
    return (bits.double() + 0.5) * MARKOV_SAMPLE._UNIFORM_SCALE.value


def inverse_cdf(logits: torch.Tensor, temperatures: torch.Tensor, uniforms: torch.Tensor) -> Any:
    """``[bs]``: the first token whose cumulative probability reaches ``u`` (argmax where
    the step temperature is 0)."""
    sampled = temperatures != 0
    scaled = logits.double() / torch.where(sampled, temperatures, 1.0).double()[:, None]
    cdf = torch.softmax(scaled, dim=-1).cumsum(dim=-1)  # [bs, V]
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)
    drawn = torch.searchsorted(cdf, target).squeeze(-1).clamp_max(logits.shape[-1] - 1)
    return torch.where(sampled, drawn, logits.argmax(dim=-1))


class InverseCdfOnPhiloxUniforms(Sampler):
    """Correct: the package's head and buffers; each sampled step's token is the inverse
    CDF of its kept step logits at one uniform of the package's Philox words."""

    def _markov_block(self, model_hidden: Any, sample_hidden: Any, anchor: Any, bs: int) -> Any:
        if self.greedy_draft:
            return super()._markov_block(model_hidden, sample_hidden, anchor, bs)

        def philox_inverse_cdf(logits: torch.Tensor, step: int) -> torch.Tensor:
            uniforms = philox_uniforms(self._noise, rows=bs, step=step, device=logits.device)
            return inverse_cdf(logits, self.params.step_temperatures[:bs], uniforms)

        return walked_block(self, model_hidden, sample_hidden, anchor, bs, philox_inverse_cdf)


class Float32KeptLogits(Sampler):
    """Correct: the step logits are kept and raced in float32 whatever the base dtype (the
    package's own race, told the step dtype is float32)."""

    def _step_logits(self, base_logits: torch.Tensor) -> torch.Tensor:
        self.markov_head.step_logits_dtype = _float32  # read by the package's block and race
        return super()._step_logits(base_logits)


def _float32(base_dtype: torch.dtype) -> torch.dtype:
    del base_dtype
    return torch.float32
