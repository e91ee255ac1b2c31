"""Step samplers: pick one token per row from one step's corrected logits.

A step sampler has the signature ``sampler(step_logits[bs, V], step_idx) -> [bs]``.
Two kinds exist upstream:

- greedy: ``argmax`` of the step logits;
- the exponential race (Gumbel-max in exponential form):
  ``argmax(softmax(float(logits) / T) / E)`` with ``E ~ Exp(1)`` drawn fresh for
  every step; greedy rows use ``E = 1``. The lowest index wins ties.

The race exists twice: in plain torch (the ground truth) and as a Triton kernel
(``reference.triton_race``). ``exponential_race`` dispatches between them.

Non-finite logits follow one rule on every path (docs/numerics.md), the rule of
``torch.argmax``: a row with a NaN yields its first NaN, else a row with a ``+inf``
yields its first ``+inf``; a ``-inf`` entry never wins while the row has an entry that
is not ``-inf``; a row of only ``-inf`` yields token 0. The race applies it to the scaled
logits ``float(logits) / T``. No path reads a tensor value on the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from reference.noise_floor import MIN_NOISE
from reference.triton_interpreter import use_interpreter_without_cuda

StepSampler = Callable[[torch.Tensor, int], torch.Tensor]
RaceBackend = Literal["auto", "torch", "triton"]


def greedy_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
    """Greedy step sampler: the argmax of the step logits (lowest index on ties).

    ``torch.argmax`` already is the non-finite rule: it ranks NaN above ``+inf``.
    """
    del step_idx  # greedy needs no per-step state
    return torch.argmax(step_logits, dim=-1)


def apply_nonfinite_rule(scaled_logits: torch.Tensor, winner: torch.Tensor) -> torch.Tensor:
    """``winner`` ``[bs]`` where the row of ``scaled_logits`` ``[bs, V]`` is NaN- and
    ``+inf``-free; otherwise the first NaN of the row, else its first ``+inf``.

    Pure tensor ops (no host read), so it runs inside a CUDA graph.
    """
    is_nan = torch.isnan(scaled_logits)  # [bs, V]
    is_pos_inf = scaled_logits == float("inf")  # [bs, V]
    # argmax of a 0/1 row is its first 1: torch.argmax returns the lowest index on ties.
    first_nan = torch.argmax(is_nan.to(torch.uint8), dim=-1)
    first_pos_inf = torch.argmax(is_pos_inf.to(torch.uint8), dim=-1)
    tokens = torch.where(is_pos_inf.any(dim=-1), first_pos_inf, winner)
    return torch.where(is_nan.any(dim=-1), first_nan, tokens)


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
    Greedy rows use noise 1, i.e. the argmax of ``softmax(logits / T)``. Non-finite
    scaled logits follow ``apply_nonfinite_rule``; a ``-inf`` entry scores -1, below
    any real entry's score (>= 0), and a row of only ``-inf`` ties at -1 on token 0.
    """
    scaled = logits.float() / temperatures.float().unsqueeze(-1)  # [bs, V]
    probs = torch.softmax(scaled, dim=-1)  # [bs, V]
    row_noise = torch.where(
        greedy_mask.unsqueeze(-1), torch.ones_like(noise), noise.float().clamp_min(MIN_NOISE)
    )
    scores = torch.where(scaled > float("-inf"), probs / row_noise, -1.0)  # [bs, V]
    return apply_nonfinite_rule(scaled, torch.argmax(scores, dim=-1))


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
    machine without CUDA: ``TRITON_INTERPRET=1`` is set for the process then, before the
    kernel module is imported); ``backend="torch"`` forces plain torch.
    """
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'triton', got {backend!r}")
    use_triton = backend == "triton" or (backend == "auto" and logits.is_cuda)
    if not use_triton:
        return exponential_race_torch(
            logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=noise
        )
    use_interpreter_without_cuda()  # before Triton's first import: interpreted without CUDA
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
