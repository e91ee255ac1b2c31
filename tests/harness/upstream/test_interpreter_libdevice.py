"""libdevice bodies under Triton's interpreter (``harness.upstream.loaders.interpreter_libdevice``):
each body faithful in float32 against torch on more than 10^6 inputs, edge cases
included; a kernel of our own that calls libdevice runs inside the context and fails
outside it; and the context puts everything back."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from harness.upstream.loaders.interpreter_libdevice import BODIES, libdevice_bodies, log1p_float32

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
import triton.language.extra.libdevice as libdevice  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

pytestmark = pytest.mark.interpreter

ULP_BOUND = 1  # faithful: one of the two float32 neighbours of the exact value

FLOAT32 = np.finfo(np.float32)
EDGES = np.array(
    [
        -1.0,  # -inf
        -2.0,  # below the domain: NaN
        -0.0,
        0.0,
        1e-45,  # the smallest denormal
        -1e-45,
        1.1754942e-38,  # the largest denormal
        float(FLOAT32.tiny),
        -float(FLOAT32.tiny),
        1e-30,
        -1e-30,
        1e-8,
        -1e-8,
        0.5,
        -0.5,
        1.0,
        1e30,
        float(FLOAT32.max),
        float("inf"),
        float("-inf"),
        float("nan"),
    ],
    dtype=np.float32,
)


def _inputs() -> np.ndarray:
    """More than 10^6 float32 inputs: every class of bit pattern, the edges, the values
    just above -1 (where the result runs to -inf), and a band around 0 (where
    ``log(1 + x)`` loses every digit)."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=2**20, dtype=np.uint64).astype(np.uint32)
    just_above_minus_one = np.nextafter(np.float32(-1), np.float32(0)) + np.arange(
        4096, dtype=np.float32
    ) * np.float32(2**-24)
    near_zero = rng.uniform(-1e-3, 1e-3, size=2**18).astype(np.float32)
    denormals = (rng.integers(1, 2**23, size=2**14, dtype=np.uint32)).view(np.float32)
    return np.concatenate(
        [bits.view(np.float32), EDGES, just_above_minus_one, near_zero, denormals, -denormals]
    )


def _ordered(x: np.ndarray) -> np.ndarray:
    """float32 bits as integers in the order of the values (ulps apart = integers apart)."""
    signed = x.view(np.int32).astype(np.int64)
    return np.where(signed < 0, -(signed & 0x7FFFFFFF), signed)


def faithfulness_failures(
    body: Callable[[np.ndarray], np.ndarray], *, reference: Callable[[torch.Tensor], torch.Tensor]
) -> list[str]:
    """How ``body`` departs from torch's function in float64 rounded to float32 (the
    ground truth) on the inputs: NaN where the truth has none or none where it has one,
    another infinity, a zero of the other sign, or more than ``ULP_BOUND`` ulps."""
    x = _inputs()
    got = body(x.copy())
    truth = reference(torch.from_numpy(x).double()).float().numpy()
    failures = []
    if not np.array_equal(np.isnan(got), np.isnan(truth)):
        failures.append(f"NaN at {x[np.isnan(got) != np.isnan(truth)][:4]}")
    finite = np.isfinite(got) & np.isfinite(truth)
    if not np.array_equal(got[~finite & ~np.isnan(truth)], truth[~finite & ~np.isnan(truth)]):
        failures.append("an infinity differs")
    zeros = finite & (truth == 0)
    if not np.array_equal(np.signbit(got[zeros]), np.signbit(truth[zeros])):
        failures.append("a zero of the other sign")
    ulps = np.abs(_ordered(got[finite]) - _ordered(truth[finite]))
    if ulps.size and ulps.max() > ULP_BOUND:
        worst = np.argmax(ulps)
        failures.append(f"{ulps.max()} ulps at x = {x[finite][worst]!r}")
    return failures


def test_the_inputs_cover_a_million_values_and_the_edges() -> None:
    x = _inputs()
    assert x.size >= 10**6
    truth = torch.log1p(torch.from_numpy(x).double()).float().numpy()
    assert np.isnan(truth).any() and np.isneginf(truth).any() and np.isposinf(truth).any()
    assert (np.abs(x[x != 0]) < FLOAT32.tiny).sum() > 10**4  # denormals
    assert ((x > -1) & (x <= -1 + 2**-12)).sum() >= 4096


def test_log1p_is_faithful_in_float32_against_torch() -> None:
    assert faithfulness_failures(log1p_float32, reference=torch.log1p) == []


def test_a_log1p_through_one_plus_x_is_caught() -> None:
    """Planted: ``log(1 + x)`` in float32, which returns 0 for every tiny x."""

    def naive(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log(np.float32(1) + x)

    failures = faithfulness_failures(naive, reference=torch.log1p)
    assert any("ulps" in failure for failure in failures), failures


def test_torchs_own_float32_log1p_is_faithful_too() -> None:
    """No false alarm: another faithful implementation, not bit-equal to ours, passes."""

    def torch_float32(x: np.ndarray) -> np.ndarray:
        return torch.log1p(torch.from_numpy(x)).numpy()

    x = _inputs()
    assert not np.array_equal(torch_float32(x), log1p_float32(x), equal_nan=True)
    assert faithfulness_failures(torch_float32, reference=torch.log1p) == []


def test_log1p_keeps_the_edges_exactly() -> None:
    got = dict(zip(EDGES.view(np.uint32).tolist(), log1p_float32(EDGES), strict=True))

    def at(x: float) -> np.float32:
        return got[int(np.float32(x).view(np.uint32))]

    assert np.isneginf(at(-1.0)) and np.isnan(at(-2.0)) and np.isnan(at(float("nan")))
    assert at(-0.0) == 0 and np.signbit(at(-0.0)) and not np.signbit(at(0.0))
    assert at(1e-45) == np.float32(1e-45) and at(-1e-45) == np.float32(-1e-45)  # x, denormal
    assert np.isposinf(at(float("inf"))) and np.isnan(at(float("-inf")))
    assert at(1.0) == np.float32(np.log(2.0))


needs_interpreter = pytest.mark.skipif(
    not triton.knobs.runtime.interpret,
    reason="kernels are compiled here (TRITON_INTERPRET unset): libdevice is the backend's",
)


@triton.jit
def log1p_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """Our own kernel: ``out = libdevice.log1p(x)`` over one block."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, libdevice.log1p(x), mask=mask)


@needs_interpreter
def test_a_kernel_calling_libdevice_runs_inside_the_context_only() -> None:
    x = torch.from_numpy(EDGES.copy())
    out = torch.full_like(x, 7.0)
    with pytest.raises(InterpreterError, match="NoneType"):  # the stub's body is `...`
        log1p_kernel[(1,)](x, out, len(x), BLOCK=32)
    with libdevice_bodies():
        log1p_kernel[(1,)](x, out, len(x), BLOCK=32)
    expected = torch.from_numpy(log1p_float32(EDGES))
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out.nan_to_num().view(torch.int32), expected.nan_to_num().view(torch.int32))


@needs_interpreter
def test_a_call_in_another_dtype_is_refused_naming_it() -> None:
    x = torch.tensor([0.5, 1.0], dtype=torch.float64)
    with libdevice_bodies(), pytest.raises(InterpreterError, match="must be a float32 tensor"):
        log1p_kernel[(1,)](x, torch.empty_like(x), 2, BLOCK=2)


@needs_interpreter
def test_the_context_puts_everything_back_raise_or_not() -> None:
    import triton.language.extra.cuda.libdevice as cuda_libdevice

    before, cuda_before = dict(vars(libdevice)), dict(vars(cuda_libdevice))
    with libdevice_bodies():
        outer = {name: getattr(libdevice, name) for name in BODIES}
        assert all(outer[name] is not before[name] for name in BODIES)
        with libdevice_bodies():  # nested: the outer bodies come back after it
            assert all(getattr(libdevice, name) is not outer[name] for name in BODIES)
        assert all(getattr(libdevice, name) is outer[name] for name in BODIES)
    assert dict(vars(libdevice)) == before
    with pytest.raises(RuntimeError, match="inside"), libdevice_bodies():
        raise RuntimeError("inside")
    assert dict(vars(libdevice)) == before
    assert dict(vars(cuda_libdevice)) == cuda_before
