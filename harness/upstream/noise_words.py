"""The released servers' word-to-noise conversions, as functions of a tensor of words.

A counter-based stream draws a 32-bit word (Philox, Murmur3) per token and turns it
into a uniform and the uniform into the noise the sampler adds (Gumbel) or the log of
an acceptance coin. That conversion is a function of 2^32 inputs, so it can be checked
on every word (``harness.measure.word_sweep``). Each ``WordConversion`` here maps an
int64 tensor of words in ``[0, 2^32)`` to ``(uniform, noise)`` float32 tensors, built
from the installed package:

- a part the package exports as a callable (a Triton ``@triton.jit`` helper, or
  Triton's own ``uint_to_uniform_float`` that ``tl.rand`` calls) is called, under
  Triton's interpreter, on the words or uniforms themselves: ``interpreted()``;
- a part written inline in a kernel, with no callable to reach it, is written here in
  torch with the same float32 operations, and its ``source`` says "mirrored from"
  the file and line it follows; constants the package names are read from it.

Which conversions exist, where each part comes from and what a full sweep found:
docs/upstream.md ("Every word of the noise streams").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.upstream.loaders import sglang_loader, vllm_loader

Convert = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

# Triton's interpreter refuses blocks above 2^20 elements: a helper is called in slices.
INTERPRETER_BLOCK = 1 << 20
_LOW32 = 0xFFFFFFFF


@dataclass(frozen=True)
class WordConversion:
    """One stream's word -> (uniform, noise), as a server computes it."""

    server: str  # "sglang 0.5.23", "vLLM 0.33", or a test's name
    stream: str  # "draft", "verify: accept coin", "verify: residual / bonus"
    noise: str  # what the noise is: "Gumbel -log(E)", "log u"
    source: str  # where each part comes from: "called from ..." / "mirrored from ..."
    convert: Convert

    @property
    def name(self) -> str:
        return f"{self.server} {self.stream}"


def interpreted(helper: Any) -> Callable[..., np.ndarray]:
    """A package's ``@triton.jit`` helper (or Triton's own) as a function of numpy
    arrays, run by Triton's interpreter on this machine's CPU.

    The helper's body is run as the interpreter runs any device function a kernel
    calls: ``triton.language`` patched with the interpreter's numpy builder for the
    call, and restored after it, so nothing outside the call sees a change (the
    interpreter's ``_patch_lang``, as its grid executor uses it, in Triton 3.8 and
    3.9). Arrays are cut in blocks of at most ``INTERPRETER_BLOCK`` elements."""
    import triton.language as tl
    from triton.runtime import interpreter

    function = interpreter.InterpretedFunction(getattr(helper, "fn", helper))
    types = {
        np.dtype(np.uint32): tl.uint32,
        np.dtype(np.int64): tl.int64,
        np.dtype(np.float32): tl.float32,
    }

    def block(array: np.ndarray, size: int) -> Any:
        # a block's length is a power of two: the tail is padded with its last element
        kind = types[array.dtype]
        padded = np.pad(array, (0, size - array.size), mode="edge")
        return tl.tensor(interpreter.TensorHandle(padded, kind), tl.block_type(kind, [size]))

    def call(*arrays: np.ndarray) -> np.ndarray:
        total = arrays[0].size
        out = []
        for start in range(0, total, INTERPRETER_BLOCK):
            pieces = [a[start : start + INTERPRETER_BLOCK] for a in arrays]
            size = 1 << max(pieces[0].size - 1, 0).bit_length()
            scope = interpreter._patch_lang(function.fn)
            try:
                result = function(*[block(piece, size) for piece in pieces])
            finally:
                scope.restore()
            out.append(np.asarray(result.handle.data)[: pieces[0].size])
        return np.concatenate(out) if len(out) > 1 else out[0]

    return call


def _words_u32(words: torch.Tensor) -> np.ndarray:
    return (words & _LOW32).numpy().astype(np.uint32)


def _constexpr(value: Any) -> float:
    return float(getattr(value, "value", value))


# ---- Murmur3 word -> uniform, split in 16-bit halves (sglang's resample, vLLM's fp32 path)

_TWO_TO_MINUS_16 = 1.52587890625e-05
_TWO_TO_MINUS_32 = 2.3283064365386963e-10


def murmur_halves_uniform(words: torch.Tensor) -> torch.Tensor:
    """``hi16 * 2^-16 + (lo16 + 0.5) * 2^-32`` in float32, each half converted
    exactly: the last lines of sglang's ``_murmur3_uniform32``
    (kernels/ops/speculative/dspark/blockwise_rejection.py, lines 97-102) and of
    vLLM's ``murmur3_uniform32`` (v1/worker/gpu/sample/gumbel.py, lines 126-131)."""
    hi16 = (words >> 16).to(torch.float32)
    lo16 = (words & 0xFFFF).to(torch.float32)
    return hi16 * _TWO_TO_MINUS_16 + (lo16 + 0.5) * _TWO_TO_MINUS_32


def _stable_gumbel(log1p_neg: Callable[..., np.ndarray]) -> Convert:
    """Murmur3 halves -> uniform, then ``-log(-log1p_neg(u))`` with the package's
    ``_log1p_neg_stable``."""

    def convert(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = murmur_halves_uniform(words)
        log_one_minus = torch.from_numpy(log1p_neg(uniform.numpy()))
        return uniform, -torch.log(-log_one_minus)

    return convert


def _coin(uint_to_uniform: Callable[..., np.ndarray], floor: float) -> Convert:
    """Triton's ``tl.rand`` conversion, then ``log max(u, floor)`` with the package's
    floor; the uniform reported is ``tl.rand``'s, before the floor guards it."""

    def convert(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = torch.from_numpy(uint_to_uniform(_words_u32(words)))
        return uniform, torch.log(torch.clamp_min(uniform, floor))

    return convert


def _triton_uint_to_uniform() -> tuple[Callable[..., np.ndarray], str]:
    import triton
    from triton.language import random

    return interpreted(random.uint_to_uniform_float), (
        f"called from triton {triton.__version__}: triton.language.random."
        "uint_to_uniform_float (what tl.rand applies to its Philox word)"
    )


# ---- sglang 0.5.23

_SGLANG_MARKOV = "sglang.kernels.ops.speculative.dspark.markov_sample"
_SGLANG_REJECTION = "sglang.kernels.ops.speculative.dspark.blockwise_rejection"


def sglang_conversions(loaded: sglang_loader.LoadedSglang) -> list[WordConversion]:
    """The drafter's Philox Gumbel and the verifier's two counter-based draws."""
    markov = loaded.modules[_SGLANG_MARKOV]
    rejection = loaded.modules[_SGLANG_REJECTION]
    scale = _constexpr(markov._UNIFORM_SCALE)
    server = f"sglang {loaded.version}"

    def draft(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = (words.to(torch.float32) + 0.5) * scale
        exponential = -torch.log1p(-uniform)
        return uniform, -torch.log(exponential)

    uint_to_uniform, triton_source = _triton_uint_to_uniform()
    floor = _constexpr(rejection._TL_RAND_MIN)
    return [
        WordConversion(
            server=server,
            stream="draft",
            noise="Gumbel -log(-log1p(-u))",
            source="mirrored from markov_sample.py lines 130-132 (_select_block) and "
            "419-423 (MarkovSampleStep.torch): u = (word + 0.5) * _UNIFORM_SCALE "
            f"(read from the package: {scale!r}), E = -log1p(-u), noise -log E",
            convert=draft,
        ),
        WordConversion(
            server=server,
            stream="verify: accept coin",
            noise="log u",
            source=f"{triton_source}; mirrored from blockwise_rejection.py lines "
            f"264-266: u = max(u, _TL_RAND_MIN) (read from the package: {floor!r}), "
            "the test log p > log u + log q",
            convert=_coin(uint_to_uniform, floor),
        ),
        WordConversion(
            server=server,
            stream="verify: residual / bonus",
            noise="Gumbel -log(-log(1-u))",
            source="mirrored from blockwise_rejection.py lines 97-102 (the end of "
            "_murmur3_uniform32: u from the word's 16-bit halves); called from the "
            "package: blockwise_rejection._log1p_neg_stable; mirrored from line 354: "
            "noise -log(-log(1-u))",
            convert=_stable_gumbel(interpreted(rejection._log1p_neg_stable)),
        ),
    ]


# ---- vLLM 0.33


def vllm_conversions(loaded: vllm_loader.LoadedVllm) -> list[WordConversion]:
    """The Gumbel draw the drafter and the verifier's resample share (fp32 path) and
    the verifier's accept coin."""
    gumbel = importlib.import_module(vllm_loader.GUMBEL_MODULE)
    server = f"vLLM {loaded.version.rsplit('.', 1)[0]}"
    uint_to_uniform, triton_source = _triton_uint_to_uniform()
    floor = _constexpr(gumbel._TL_RAND_MIN)
    return [
        WordConversion(
            server=server,
            stream="draft and verify: residual / bonus",
            noise="Gumbel -log(-log(1-u))",
            source="mirrored from gumbel.py lines 126-131 (the end of murmur3_uniform32: "
            "u from the word's 16-bit halves); called from the package: "
            "gumbel._log1p_neg_stable; mirrored from line 208 (gumbel_noised_argmax, "
            "USE_FP64 false): noise -log(-log(1-u))",
            convert=_stable_gumbel(interpreted(gumbel._log1p_neg_stable)),
        ),
        WordConversion(
            server=server,
            stream="verify: accept coin",
            noise="log u",
            source=f"{triton_source}; mirrored from gumbel.py lines 66-70 (tl_rand32, "
            f"includes_zero false): u = max(u, _TL_RAND_MIN) (read from the package: "
            f"{floor!r}); rejection_sampler_utils.py line 697: the test log p > log u + log q",
            convert=_coin(uint_to_uniform, floor),
        ),
    ]


SERVERS = ("sglang", "vllm")


def server_conversions(server: str) -> tuple[list[WordConversion], str | None]:
    """The installed server's conversions, or none and the one-line reason why not."""
    if server == "sglang":
        reason = sglang_loader.unavailable_reason()
        if reason is not None:
            return [], reason
        return sglang_conversions(sglang_loader.load_sglang()), None
    if server == "vllm":
        reason = vllm_loader.unavailable_reason()
        if reason is not None:
            return [], reason
        return vllm_conversions(vllm_loader.load_vllm()), None
    raise ValueError(f"unknown server {server!r}; expected one of {', '.join(SERVERS)}")
