"""Bodies for the libdevice functions that judged kernels call, under Triton's interpreter.

How Triton's interpreter (3.8 and 3.9 alike) resolves a call in a kernel: before a
launch, and again before each nested ``@triton.jit`` call, it swaps its own numpy
bodies in for the builtins of ``triton.language``, ``triton.language.core``,
``tl.math`` and ``tl.tensor`` (``_patch_lang``), and for nothing else. So:

- ``triton.language.extra.libdevice``, the module vLLM imports as ``tldevice`` and
  sglang as ``libdevice``, holds stubs whose bodies are ``...``: a call returns
  ``None``, and the kernel fails at the next operation on it (``-None``), raised as
  an ``InterpreterError``; compiled, the stub is replaced by the backend's device
  function (CUDA's ``__nv_log1pf``);
- ``triton.language.extra.cuda.libdevice`` holds builtins that emit an external call
  through a code generator's semantic, which the interpreter never patches in: a call
  fails as well.

A kernel reads ``libdevice.log1p`` from the module when the call runs, so setting the
module's attribute while a release runs gives the call a body, and not one line of the
release changes. ``libdevice_bodies()`` does that for every function of ``BODIES`` and
puts the stubs back after the block, raise or not; where kernels are compiled
(``TRITON_INTERPRET`` unset) it changes nothing.

Which functions: read from every wheel, vLLM 0.25.0-0.34.0 and sglang 0.5.16-0.5.23,
``log1p`` is the one libdevice function their DSpark kernels call (vLLM's Gumbel kernel
up to 0.30 and its rejection sampler's residual in every release; sglang 0.5.22's
Markov sampling and 0.5.23's block-wise rejection); docs/releases.md, "libdevice under
the interpreter".

The bodies are float32 only, as the kernels call them: each is evaluated in float64
and rounded once to float32, which is faithful (within 1 ulp of the exact value, the
bound CUDA states for ``__nv_log1pf``); the tests hold it against torch's float64
``log1p`` rounded to float32 on more than 10^6 inputs. numpy's own float32 ``log1p``
is not faithful on every machine (2 ulp measured on its AVX-512 path). Any other dtype
raises a one-line ``TypeError`` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

MODULE = "triton.language.extra.libdevice"


def log1p_float32(x: np.ndarray) -> np.ndarray:
    """``log(1 + x)`` of a float32 array, faithful in float32: -1 gives -inf, below -1
    NaN, NaN stays NaN, -0.0 stays -0.0 (numpy's warnings for those lanes silenced: the
    kernels mask them, as the device function returns them)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.log1p(x.astype(np.float64)).astype(np.float32)


BODIES: dict[str, Callable[[np.ndarray], np.ndarray]] = {"log1p": log1p_float32}


def _interpreted(name: str, body: Callable[[np.ndarray], np.ndarray]) -> Callable[..., Any]:
    """``body`` as the interpreter calls a device function: a ``tl.tensor`` over a numpy
    array in, one of the same type out."""
    import triton.language as tl
    from triton.runtime import interpreter

    def device_function(arg0: Any, _semantic: Any = None) -> Any:
        del _semantic  # a code generator's; the interpreter builds nothing
        dtype = getattr(arg0, "dtype", None)
        if not isinstance(arg0, tl.tensor) or dtype != tl.float32:
            raise TypeError(
                f"libdevice.{name} under Triton's interpreter: arg0 must be a float32 "
                f"tensor (the body is float32 only), got {dtype or type(arg0).__name__}"
            )
        data = body(np.asarray(arg0.handle.data, dtype=np.float32))
        return tl.tensor(interpreter.TensorHandle(data, tl.float32), arg0.type)

    device_function.__name__ = name
    return device_function


def interpreting() -> bool:
    """Whether ``@triton.jit`` kernels run under Triton's interpreter in this process."""
    import triton

    return bool(triton.knobs.runtime.interpret)


@contextmanager
def libdevice_bodies() -> Iterator[None]:
    """Give the interpreter a body for each function of ``BODIES`` while the block
    runs, and put the module's own functions back after it."""
    if not interpreting():
        yield
        return
    import importlib

    libdevice = importlib.import_module(MODULE)
    originals = {name: getattr(libdevice, name) for name in BODIES}
    try:
        for name, body in BODIES.items():
            setattr(libdevice, name, _interpreted(name, body))
        yield
    finally:
        for name, original in originals.items():
            setattr(libdevice, name, original)
