"""Triton's interpreter patching ``triton.language`` once per launch
(``harness.upstream.loaders.interpreter_patching``): the nested calls' second pass is skipped,
what a kernel computes is the same bit for bit (our own kernels, and vLLM's own
speculator and rejection sampler, which the vLLM loader runs inside the context, under
the ``vllm`` marker), and the interpreter's functions are put back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
import torch

from harness.upstream.loaders.interpreter_patching import fixed_costs_cached

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

pytestmark = [
    pytest.mark.interpreter,
    pytest.mark.skipif(
        not triton.knobs.runtime.interpret,
        reason="kernels are compiled here (TRITON_INTERPRET unset): nothing is patched",
    ),
]


@triton.jit
def _mix(x, salt):  # type: ignore[no-untyped-def]
    """A nested call, two levels deep below the kernel."""
    return _rotate(x ^ salt) * 0x9E3779B1


@triton.jit
def _rotate(x):  # type: ignore[no-untyped-def]
    return (x << 13) | (x >> 19)


@triton.jit
def mixing_kernel(seed, out_ptr, logits_ptr, cache_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """Our own kernel: a hash of nested calls, Triton's own Philox (``tl.rand``, whose
    module sees ``triton.language.core``), math, a reduction and a store of logits."""
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    words = _mix(offsets.to(tl.uint32), seed.to(tl.uint32))
    words = _mix(words, words >> 7)
    u = tl.rand(seed, offsets)
    logits = tl.load(logits_ptr + offsets, mask=mask, other=float("-inf"))
    noisy = tl.where(mask, logits - tl.log(-tl.log(u)) + (words & 0xFF).to(tl.float32), -1e30)
    tl.store(cache_ptr + offsets, noisy, mask=mask)
    _, index = tl.max(noisy, axis=0, return_indices=True)
    tl.store(out_ptr, index)


def _mixing_run(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn(48, generator=torch.Generator().manual_seed(seed))
    token, cache = torch.zeros(1, dtype=torch.int32), torch.zeros(48)
    mixing_kernel[(1,)](seed, token, logits, cache, 48, BLOCK=64)
    return token, cache


@contextmanager
def counted_patches() -> Iterator[list[Callable[..., Any]]]:
    """Every function Triton's own ``_patch_lang`` is run on while the block runs."""
    patch_lang, seen = interpreter._patch_lang, []

    def counting(fn: Callable[..., Any]) -> Any:
        seen.append(fn)
        return patch_lang(fn)

    interpreter._patch_lang = counting
    try:
        yield seen
    finally:
        interpreter._patch_lang = patch_lang


def test_our_kernel_computes_the_same_bits_with_the_nested_patches_skipped() -> None:
    for seed in (0, 1, 2**31 - 1):
        with counted_patches() as every_call:
            token, cache = _mixing_run(seed)
        with counted_patches() as once, fixed_costs_cached():
            token_once, cache_once = _mixing_run(seed)
        assert torch.equal(token, token_once)
        assert torch.equal(cache.view(torch.int32), cache_once.view(torch.int32))
        # the launch and the first call into Triton's random module (another module
        # of triton.language) are patched; the other nested calls are not patched again
        assert len(every_call) > 6 and len(once) == 2, (len(every_call), len(once))


def test_a_functions_modules_are_read_once_a_block_with_the_same_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Which ``triton.language`` modules a function sees is read from its globals once
    per function and block, not at each of its calls; the launches compute the same."""
    from harness.upstream.loaders import interpreter_patching

    read: list[Callable[..., Any]] = []
    language_modules = interpreter_patching._language_modules

    def counted(fn: Callable[..., Any]) -> frozenset[int]:
        read.append(fn)
        return language_modules(fn)

    monkeypatch.setattr(interpreter_patching, "_language_modules", counted)
    with fixed_costs_cached():
        first = _mixing_run(3)
        calls_once = len(read)
        again = _mixing_run(3)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert torch.equal(first[1], _mixing_run(3)[1])  # as Triton runs it, no context
    assert len(read) == calls_once == len(set(read)), read  # each function read once


def test_triton_language_after_a_launch_is_as_triton_leaves_it() -> None:
    def state() -> dict[str, object]:
        members = {**vars(tl), **{f"core.{k}": v for k, v in vars(tl.core).items()}}
        return {**members, **{f"tensor.{k}": v for k, v in vars(tl.tensor).items()}}

    _mixing_run(0)  # Triton's own leak of a nested call's patch happens once, here
    before = state()
    with fixed_costs_cached():
        _mixing_run(0)
    assert state().keys() == before.keys()
    changed = [k for k, v in state().items() if v is not before[k] and not k.startswith("core.")]
    assert changed == []  # what the launch patched is restored; core is Triton's to leave


def test_the_context_puts_the_interpreters_functions_back_raise_or_not() -> None:
    names = ("_patch_lang", "_get_np_dtype")
    builder = interpreter.interpreter_builder

    def now() -> list[object]:
        functions = [getattr(interpreter, name) for name in names]
        constructors = [tl.block_type.__init__, tl.tensor.__init__]
        return [*functions, interpreter.GridExecutor.__call__, builder.options, *constructors]

    before = now()

    with fixed_costs_cached():
        assert all(a is not b for a, b in zip(now(), before, strict=True))
    with pytest.raises(RuntimeError, match="inside"), fixed_costs_cached():
        raise RuntimeError("inside")
    assert all(a is b for a, b in zip(now(), before, strict=True))


@triton.jit
def wrapping_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    """int32 and uint32 sums, differences and products that overflow, as a counter hash's."""
    offsets = tl.arange(0, BLOCK)
    a, b = tl.load(a_ptr + offsets), tl.load(b_ptr + offsets)
    mixed = (a * b + a - b) * 0x5BD1E995
    unsigned = a.to(tl.uint32) * 0xCC9E2D51 + b.to(tl.uint32)
    tl.store(out_ptr + offsets, mixed ^ unsigned.to(tl.int32, bitcast=True))


def test_overflowing_integer_arithmetic_wraps_the_same_without_the_unread_check() -> None:
    """The overflow check's operands feed only ``device_assert``, which is off unless
    ``debug`` is on: without them the kernel's values are the same bits, and the check's
    int64 arithmetic is not computed while the context holds."""
    from triton.language.semantic import TritonSemantic

    high = torch.tensor([2**31 - 1, -(2**31), 123456789, -987654321] * 4, dtype=torch.int32)
    low = torch.tensor([2**31 - 1, 7, -(2**30), 65537] * 4, dtype=torch.int32).flip(0)
    checked, unchecked = torch.zeros_like(high), torch.zeros_like(high)
    calls: list[object] = []
    sanitize = TritonSemantic.binary_op_sanitize_overflow_impl

    def counted(self: Any, *args: Any) -> Any:
        calls.append(self.builder.options.sanitize_overflow)
        return sanitize(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TritonSemantic, "binary_op_sanitize_overflow_impl", counted)
        wrapping_kernel[(1,)](high, low, checked, BLOCK=16)
        computed = len(calls)
        with fixed_costs_cached():
            wrapping_kernel[(1,)](high, low, unchecked, BLOCK=16)
    assert torch.equal(checked, unchecked)
    a, b = high.long(), low.long()
    wrap = 2**32
    mixed = ((a * b + a - b) % wrap * 0x5BD1E995) % wrap
    unsigned = ((a % wrap) * 0xCC9E2D51 + b % wrap) % wrap
    expected = ((mixed ^ unsigned) + 2**31) % wrap - 2**31
    assert torch.equal(checked.long(), expected)
    assert computed > 0 and all(calls[:computed])
    assert not any(calls[computed:]), calls[computed:]  # the sanitizer returns at once


def test_the_overflow_check_stays_where_its_assertion_is_on() -> None:
    from harness.upstream.loaders.interpreter_patching import unchecked_overflow

    options = interpreter.InterpreterOptions()
    assert (options.debug, options.sanitize_overflow) == (False, True)
    assert unchecked_overflow(options).sanitize_overflow is False
    debugging = interpreter.InterpreterOptions(debug=True)
    assert unchecked_overflow(debugging) is debugging
    unchecked = interpreter.InterpreterOptions(sanitize_overflow=False)
    assert unchecked_overflow(unchecked) is unchecked


def test_the_numpy_type_of_every_triton_type_is_tritons_own() -> None:
    types = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64]
    types += [tl.uint64, tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5]
    types += [tl.float8e4nv, tl.pointer_type(tl.float32), tl.pointer_type(tl.int64)]
    types += [tl.block_type(t, [4]) for t in types]
    triton_own = [interpreter._get_np_dtype(t) for t in types]
    with fixed_costs_cached():
        twice = [[interpreter._get_np_dtype(t) for t in types] for _ in range(2)]
    assert twice == [triton_own, triton_own]


# -- vLLM's own kernels (`tox run -e vllm`), which the loader runs inside the context -------------

needs_vllm = pytest.mark.vllm


@contextmanager
def as_triton_runs_them() -> Iterator[list[Callable[..., Any]]]:
    """The loader's kernels run without the context, every patch counted."""
    from harness.upstream.loaders import vllm_loader

    with counted_patches() as seen, pytest.MonkeyPatch.context() as patch:
        patch.setattr(vllm_loader, "fixed_costs_cached", nullcontext)
        yield seen


def _fewer(once: list[Callable[..., Any]], every_call: list[Callable[..., Any]]) -> bool:
    """The cached run patched at most a tenth as often as Triton's own."""
    return 0 < 10 * len(once) <= len(every_call)


@needs_vllm
def test_vllms_speculator_drafts_the_same_tokens_and_logits_with_and_without_it() -> None:
    from harness.case import make_case
    from harness.pipeline.runner import run_case
    from harness.plugins.implementations import parse_impl_spec

    implementation = parse_impl_spec("v=vllm:dense")
    case = make_case(
        bs=4, gamma=4, vocab_size=64, hidden_size=16, markov_rank=8,
        greedy_rows=(False, True, False, False), max_bs=6, seed=15,
    )  # fmt: skip
    with as_triton_runs_them() as every_call:
        plain = run_case(case, [implementation]).results["v"]
    with counted_patches() as once:
        fast = run_case(case, [implementation]).results["v"]
    assert plain.error is None and fast.error is None
    assert plain.tokens is not None and fast.tokens is not None
    assert torch.equal(plain.tokens, fast.tokens)
    assert plain.corrected is not None and fast.corrected is not None
    assert torch.equal(plain.corrected.view(torch.int32), fast.corrected.view(torch.int32))
    assert plain.counter_replay is not None and fast.counter_replay is not None
    assert torch.equal(plain.counter_replay, fast.counter_replay)
    assert _fewer(once, every_call), (len(once), len(every_call))


@needs_vllm
def test_vllms_rejection_sampler_commits_the_same_tokens_with_and_without_it() -> None:
    from harness.upstream.vllm_rejection import VllmRejectionVerifier
    from tests.harness.upstream.test_vllm_rejection import target_walk_round, verified

    for seed in (0, 1):
        round_ = target_walk_round(rows=8, seed=seed)
        with as_triton_runs_them() as every_call:
            plain = verified(VllmRejectionVerifier(), round_, seed=seed)
        with counted_patches() as once:
            fast = verified(VllmRejectionVerifier(), round_, seed=seed)
        assert torch.equal(plain.committed, fast.committed)
        assert torch.equal(plain.num_committed, fast.num_committed)
        assert _fewer(once, every_call), (len(once), len(every_call))


def test_block_types_and_tensors_built_inside_are_as_tritons_own() -> None:
    """A block type and a tensor made while the context holds carry the attributes
    Triton's own constructors give them, the first of their kind and every later one."""
    import numpy as np
    from triton.runtime.interpreter import TensorHandle

    kinds = [(tl.float32, [4]), (tl.int32, [2, 8]), (tl.pointer_type(tl.float32), [16])]
    kinds += [(tl.uint32, [tl.constexpr(4)]), (tl.float32, [4])]

    def described(value: Any) -> dict[str, str]:
        return {key: str(item) for key, item in sorted(vars(value).items()) if key != "handle"}

    def built() -> list[dict[str, str]]:
        made = []
        for element, shape in kinds:
            block = tl.block_type(element, shape)
            data = np.zeros(block.shape, dtype=np.float32)
            for value in (block, tl.tensor(TensorHandle(data, tl.float32), block)):
                made.append(described(value))
            made.append(described(tl.tensor(TensorHandle(np.float32(1), element), element)))
        return made

    triton_own = built()
    with fixed_costs_cached():
        first, again = built(), built()
    assert first == again == triton_own
    with fixed_costs_cached():
        inside = [tl.block_type(tl.float32, [4]), tl.block_type(tl.float32, [4])]
    assert inside[0] is not inside[1] and vars(inside[0]) == vars(inside[1])
