"""Step samplers: pick one token per row from one step's corrected logits.

A step sampler has the signature ``sampler(step_logits[bs, V], step_idx) -> [bs]``.
Two kinds exist upstream:

- greedy: ``argmax`` of the step logits;
- the exponential race (Gumbel-max in exponential form):
  ``argmax(softmax(float(logits) / T) / E)`` with ``E ~ Exp(1)`` drawn fresh for
  every step; greedy rows use ``E = 1``. The lowest index wins ties.

The race exists twice: in plain torch (the ground truth) and as a Triton kernel
(``reference.triton_race``). ``exponential_race`` dispatches between them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

StepSampler = Callable[[torch.Tensor, int], torch.Tensor]
RaceBackend = Literal["auto", "torch", "triton"]


def greedy_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
    """Greedy step sampler: the argmax of the step logits (lowest index on ties)."""
    del step_idx  # greedy needs no per-step state
    return torch.argmax(step_logits, dim=-1)


def exponential_race_torch(
    logits: torch.Tensor,
    *,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """The exponential race in plain torch.

    logits ``[bs, V]`` (any float dtype), temperatures ``[bs]``, greedy_mask ``[bs]``
    bool, noise ``[bs, V]`` of ``Exp(1)`` draws. Returns int64 token ids ``[bs]``.
    Greedy rows use noise 1, i.e. the argmax of ``softmax(logits / T)``.
    """
    probs = torch.softmax(logits.float() / temperatures.float().unsqueeze(-1), dim=-1)  # [bs, V]
    row_noise = torch.where(greedy_mask.unsqueeze(-1), torch.ones_like(noise), noise.float())
    return torch.argmax(probs / row_noise, dim=-1)


def exponential_race(
    logits: torch.Tensor,
    *,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    noise: torch.Tensor,
    backend: RaceBackend = "auto",
) -> torch.Tensor:
    """Exponential race with dispatch: Triton on CUDA tensors, torch otherwise.

    ``backend="triton"`` forces the kernel (under the Triton interpreter on a
    machine without CUDA); ``backend="torch"`` forces plain torch.
    """
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'triton', got {backend!r}")
    use_triton = backend == "triton" or (backend == "auto" and logits.is_cuda)
    if not use_triton:
        return exponential_race_torch(
            logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=noise
        )
    from reference.triton_race import exponential_race_triton

    return exponential_race_triton(
        logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=noise
    )


def folded_race_sampler(
    *,
    noise_buffer: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    backend: RaceBackend = "auto",
) -> StepSampler:
    """The folded (in-graph) step sampler: refill ``noise_buffer`` with fresh
    ``Exp(1)`` noise on every call, then run the race.

    ``noise_buffer`` ``[bs, V]`` float32 is a view of the sampler's static noise
    buffer; refilling it in place is what advances the device RNG once per step.
    """

    def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
        del step_idx  # fresh noise every call; the step index carries no state
        noise_buffer.exponential_()
        return exponential_race(
            step_logits,
            temperatures=temperatures,
            greedy_mask=greedy_mask,
            noise=noise_buffer,
            backend=backend,
        )

    return sample_step
