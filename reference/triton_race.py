"""The exponential race as a Triton kernel.

This module owns ``exponential_race_triton``, the Triton twin of
``reference.step_samplers.exponential_race_torch``: per row it returns
``argmax(softmax(float(logits) / T) / E)`` (``E = 1`` on greedy rows), lowest index
on ties, as int64 token ids ``[bs]``, with the same non-finite rule (first NaN, else
first ``+inf`` of ``x = logit / T``; ``-inf`` never wins; all ``-inf`` gives token 0).

Two kernels do the work:

1. ``_race_tiles_kernel``, grid ``(bs, n_tiles)``: each program loads one vocab tile of
   one row, computes ``x = logit / T``, the tile max ``m_t`` and the scores
   ``exp(x - m_t) / E``, and writes the tile partials ``(m_t, best score, global index
   of the best, first NaN, first +inf)``. Softmax is monotone per row, so its
   normaliser is never needed.
2. ``_race_combine_kernel``, grid ``(bs,)``: rescales each tile's best score to the row
   max ``M`` (``best_t * exp(m_t - M)``) and picks the winner; the lowest global index
   wins ties, i.e. the earliest tile among equal scores. The row's first NaN, else its
   first ``+inf``, overrides the winner.

Without CUDA the kernels run under the Triton interpreter on CPU tensors (slowly; keep
shapes small) when ``TRITON_INTERPRET=1`` was set before Triton was first imported:
``reference.triton_interpreter.use_interpreter_without_cuda()`` sets it, and the race's
dispatch (``reference.step_samplers.exponential_race``) calls it before importing this
module. Importing this module changes nothing in the process environment.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference.noise_floor import MIN_NOISE

BLOCK_V = 1024  # vocab tile width; a power of two as tl.arange requires
_MIN_NOISE = tl.constexpr(MIN_NOISE)  # zero draws are raised to it, as in the torch race


@triton.jit
def _race_tiles_kernel(
    logits_ptr,
    logits_row_stride,
    logits_col_stride,
    temps_ptr,
    greedy_ptr,
    noise_ptr,
    noise_row_stride,
    noise_col_stride,
    tile_max_ptr,
    tile_best_ptr,
    tile_idx_ptr,
    tile_nan_ptr,
    tile_inf_ptr,
    V,
    n_tiles,
    BLOCK_V: tl.constexpr,
):
    """One program per (row, vocab tile): write the tile's (m_t, best, index, NaN, +inf)."""
    row = tl.program_id(0).to(tl.int64)  # int64 so row * stride cannot overflow
    tile = tl.program_id(1)
    offs = tile * BLOCK_V + tl.arange(0, BLOCK_V)
    in_vocab = offs < V

    logits = tl.load(
        logits_ptr + row * logits_row_stride + offs * logits_col_stride,
        mask=in_vocab,
        other=float("-inf"),
    )
    temp = tl.load(temps_ptr + row).to(tl.float32)
    # IEEE-rounded like torch's division (plain `/` on f32 is approximate on NVIDIA GPUs).
    x = tl.div_rn(logits.to(tl.float32), temp)
    # The non-finite rule's candidates; V means none (lanes past V load -inf, never either).
    first_nan = tl.min(tl.where(x != x, offs, V), axis=0)
    first_inf = tl.min(tl.where(x == float("inf"), offs, V), axis=0)
    # The race sees NaN and +inf as -inf: such a row is overridden, and no inf - inf arises.
    x = tl.where((x == x) & (x < float("inf")), x, float("-inf"))
    tile_max = tl.max(x, axis=0)

    noise = tl.load(
        noise_ptr + row * noise_row_stride + offs * noise_col_stride,
        mask=in_vocab,
        other=1.0,
    ).to(tl.float32)
    greedy = tl.load(greedy_ptr + row) != 0
    noise = tl.where(greedy, 1.0, tl.maximum(noise, _MIN_NOISE))  # greedy rows race without noise

    # A tile masked out of the vocabulary (all -inf) shifts by 0, not -inf: exp(-inf) = 0,
    # never exp(-inf - -inf) = nan.
    shift = tl.where(tile_max > float("-inf"), tile_max, 0.0)
    weight = tl.exp(x - shift)
    # -inf entries and lanes past V score -1, below every real entry, as in the torch race.
    score = tl.where(x > float("-inf"), weight / noise, -1.0)
    best = tl.max(score, axis=0)
    best_idx = tl.min(tl.where(score == best, offs, V), axis=0)  # lowest index on ties

    out = row * n_tiles + tile
    tl.store(tile_max_ptr + out, tile_max)
    tl.store(tile_best_ptr + out, best)
    tl.store(tile_idx_ptr + out, best_idx)
    tl.store(tile_nan_ptr + out, first_nan)
    tl.store(tile_inf_ptr + out, first_inf)


@triton.jit
def _race_combine_kernel(
    tile_max_ptr,
    tile_best_ptr,
    tile_idx_ptr,
    tile_nan_ptr,
    tile_inf_ptr,
    out_ptr,
    V,
    n_tiles,
    BLOCK_T: tl.constexpr,
):
    """One program per row: rescale the tile winners to the row max and pick one;
    the row's first NaN, else its first +inf, takes precedence."""
    row = tl.program_id(0).to(tl.int64)
    tiles = tl.arange(0, BLOCK_T)
    is_tile = tiles < n_tiles
    base = row * n_tiles

    tile_max = tl.load(tile_max_ptr + base + tiles, mask=is_tile, other=float("-inf"))
    tile_best = tl.load(tile_best_ptr + base + tiles, mask=is_tile, other=0.0)
    tile_idx = tl.load(tile_idx_ptr + base + tiles, mask=is_tile, other=V)
    row_max = tl.max(tile_max, axis=0)

    # Same guard for a row with no finite logit; all -inf tiles then rescale to 0.
    shift = tl.where(row_max > float("-inf"), row_max, 0.0)
    rescaled = tl.where(is_tile, tile_best * tl.exp(tile_max - shift), -1.0)  # pads never win
    winner = tl.max(rescaled, axis=0)
    token = tl.min(tl.where(rescaled == winner, tile_idx, V), axis=0)  # earliest tile wins

    first_nan = tl.min(tl.load(tile_nan_ptr + base + tiles, mask=is_tile, other=V), axis=0)
    first_inf = tl.min(tl.load(tile_inf_ptr + base + tiles, mask=is_tile, other=V), axis=0)
    token = tl.where(first_inf < V, first_inf, token)
    token = tl.where(first_nan < V, first_nan, token)
    tl.store(out_ptr + row, token.to(tl.int64))


# Kernels defined under the interpreter stay interpreted; they take CPU tensors only.
_INTERPRETED = not isinstance(_race_tiles_kernel, triton.JITFunction)
# False when triton was imported elsewhere, without the interpreter, before this module.
_STDLIB_MATCHES = isinstance(tl.max, triton.JITFunction) != _INTERPRETED


_NO_INTERPRETER = (
    "set TRITON_INTERPRET=1 before importing triton to run the race without CUDA "
    "(reference.triton_interpreter.use_interpreter_without_cuda())"
)


def _for_launch(t: torch.Tensor) -> torch.Tensor:
    """The interpreter has no bfloat16: upcast to float32 (exact) before launch."""
    if _INTERPRETED and t.dtype == torch.bfloat16:
        return t.float()
    return t


def _validate(
    logits: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    noise: torch.Tensor,
) -> None:
    """Raise ValueError on shapes, dtypes or devices the kernels cannot take."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [bs, V], got shape {tuple(logits.shape)}")
    bs, vocab = logits.shape
    if vocab < 1:
        raise ValueError(f"logits must have V >= 1, got V = {vocab}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be a float tensor, got {logits.dtype}")
    if temperatures.shape != (bs,):
        raise ValueError(
            f"temperatures must have shape [bs] = ({bs},), got {tuple(temperatures.shape)}"
        )
    if greedy_mask.shape != (bs,):
        raise ValueError(
            f"greedy_mask must have shape [bs] = ({bs},), got {tuple(greedy_mask.shape)}"
        )
    if greedy_mask.dtype != torch.bool:
        raise ValueError(f"greedy_mask must be bool, got {greedy_mask.dtype}")
    if noise.shape != (bs, vocab):
        raise ValueError(
            f"noise must have shape [bs, V] = ({bs}, {vocab}), got {tuple(noise.shape)}"
        )
    devices = {t.device for t in (logits, temperatures, greedy_mask, noise)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")
    if _INTERPRETED and logits.is_cuda:
        raise ValueError("kernels were defined under the Triton interpreter: pass CPU tensors")
    if not _INTERPRETED and not logits.is_cuda:
        without_cuda = "" if torch.cuda.is_available() else f"; {_NO_INTERPRETER}"
        raise ValueError(
            f"compiled Triton kernels need CUDA tensors, got CPU tensors{without_cuda}"
        )
    if not _STDLIB_MATCHES:
        raise RuntimeError(
            f"triton was imported without TRITON_INTERPRET=1 before reference.triton_race; "
            f"{_NO_INTERPRETER}"
        )


def exponential_race_triton(
    logits: torch.Tensor,
    *,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    noise: torch.Tensor,
) -> torch.Tensor:
    """The exponential race as two Triton kernels; same contract as the torch race.

    logits ``[bs, V]`` float (any row stride; float16/bfloat16/float32), temperatures
    ``[bs]``, greedy_mask ``[bs]`` bool, noise ``[bs, V]`` of ``Exp(1)`` draws.
    Returns int64 token ids ``[bs]``; the lowest index wins ties; NaN and ``+inf``
    follow the torch race's non-finite rule.
    """
    _validate(logits, temperatures, greedy_mask, noise)
    bs, vocab = logits.shape
    device = logits.device
    if bs == 0:
        return torch.empty(0, dtype=torch.int64, device=device)

    logits = _for_launch(logits)  # views stay views; only bf16 under the interpreter copies
    noise = _for_launch(noise)
    temperatures = _for_launch(temperatures).contiguous()  # [bs] is tiny; a copy is free
    greedy_mask = greedy_mask.contiguous()

    n_tiles = triton.cdiv(vocab, BLOCK_V)
    tile_max = torch.empty(bs, n_tiles, dtype=torch.float32, device=device)
    tile_best = torch.empty(bs, n_tiles, dtype=torch.float32, device=device)
    tile_idx = torch.empty(bs, n_tiles, dtype=torch.int32, device=device)
    tile_nan = torch.empty(bs, n_tiles, dtype=torch.int32, device=device)
    tile_inf = torch.empty(bs, n_tiles, dtype=torch.int32, device=device)
    tokens = torch.empty(bs, dtype=torch.int64, device=device)

    _race_tiles_kernel[(bs, n_tiles)](
        logits,
        logits.stride(0),
        logits.stride(1),
        temperatures,
        greedy_mask,
        noise,
        noise.stride(0),
        noise.stride(1),
        tile_max,
        tile_best,
        tile_idx,
        tile_nan,
        tile_inf,
        vocab,
        n_tiles,
        BLOCK_V=BLOCK_V,
    )
    _race_combine_kernel[(bs,)](
        tile_max,
        tile_best,
        tile_idx,
        tile_nan,
        tile_inf,
        tokens,
        vocab,
        n_tiles,
        BLOCK_T=triton.next_power_of_2(n_tiles),
    )
    return tokens
