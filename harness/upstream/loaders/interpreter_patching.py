"""Triton's interpreter without four of its fixed costs: ``triton.language`` patched
once per launch, not again at every nested ``@triton.jit`` call, Triton's dtype map built
once, not at every operation, no integer overflow check computed for an assertion that
is off, and a value's type and shape built once per kind, not at every operation.

Under ``TRITON_INTERPRET=1`` a launch (``GridExecutor.__call__``) patches the kernel's
``triton.language`` modules with the interpreter's numpy bodies (``_patch_lang``: every
builtin of ``triton.language``, its ``core``, ``math`` and ``tensor``, read with
``inspect.getmembers``, plus a dozen attributes set afresh), runs every program, and
restores them. Each nested ``@triton.jit`` call a program makes
(``InterpretedFunction.__call__``) runs ``_patch_lang`` again on the callee's modules
and drops the result. While the launch's patch holds, that second pass changes nothing:
the builtins it looks for are already the interpreter's (it finds none), and the
attributes it sets get closures equal to those the launch set, which the launch's
restore replaces anyway. vLLM's Gumbel kernel makes 16 such calls per program (the
counter hash, its rounds, ``tl_rand32``, ...), and the profile puts about a third of a
vLLM row's time in them (docs/performance.md, "A vLLM row").

Second, every operation the interpreter runs asks ``_get_np_dtype`` for the numpy type
of a Triton type, and that function builds its table of 19 types afresh at each call:
about a tenth of what is left once the patching is gone.

Third, every ``+``, ``-`` and ``*`` of 32-bit (or narrower) integers is checked for
overflow where the kernel's options ask for it (``sanitize_overflow``, on by default):
the semantic layer casts both operands to int64, computes the operation again, compares
the result with the type's bounds and hands the condition to ``device_assert``. That
assertion exists only in debug mode (``options.debug``); otherwise ``device_assert``
returns at once, and on a GPU the compiler drops the check's operations as dead. The
interpreter runs them all the same, one numpy operation and a dozen Python calls each: a
third of an oracle decode of vLLM's speculator (its counter hash is integer arithmetic),
docs/performance.md. While the block runs, the interpreter's options say
``sanitize_overflow=False`` whenever ``debug`` is off, so the check is not computed;
with ``debug`` on they are left as they are.

Fourth, nearly every operation builds a ``tl.block_type`` afresh (its shape unwrapped
and validated, its name formatted), and every value it makes is a ``tl.tensor`` whose
constructor builds its shape afresh (a ``tl.tuple`` of ``constexpr``, typed by walking
them) and its ``numel``: about a tenth and a sixth of the decode above, each a function
of the type alone. While the block runs, a block type of an element type (by its name)
and a shape already seen gets the attributes Triton's own constructor gave the first
one, its element type its own; a tensor's ``numel`` and shape (a new ``tl.tuple``, over
the same ``constexpr`` and tuple type) are those Triton's constructor gave the first
tensor of that shape, and its handle, type and ``dtype`` are its own, set as Triton's
constructor sets them.

``fixed_costs_cached()`` takes out all four, from outside Triton and outside the release
(and reads which of those modules a function sees once per function and block, not at
each of its calls: the scan of its module's globals was a twentieth of what was left).
While the block runs, ``_get_np_dtype`` (a global of the interpreter's module, looked
up at call time) answers from a table filled by Triton's own function, once per
scalar type (a block's answer is its element's, as in Triton's; pointers are passed
through to it, uncached), and ``_patch_lang`` (likewise) is a wrapper that

- patches as Triton does for a launch's own call (the launch's ``fn``, noted by a
  wrapper of ``GridExecutor.__call__``), and remembers which modules it covered;
- returns a scope with nothing to restore for a nested call made inside that launch
  whose modules a patch of this launch already covers;
- patches as Triton does in any other case: a call outside any launch, or a callee
  whose modules the launch has not patched yet (Triton's own ``triton.language.random``
  sees ``triton.language.core``, which a kernel importing ``triton.language`` alone
  does not), whose modules count as covered from then on: Triton restores a nested
  call's patch never, so it holds for the rest of the launch.

What a kernel computes does not change: the same bodies run on the same values, and no
value the check computed was ever read
(``tests/harness/upstream/test_interpreter_patching.py`` holds the tokens and logits of
vLLM's own kernels bit for bit, with and without it). Where kernels are compiled it
changes nothing; the functions, the two constructors and the options are put back after
the block, raise or not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from harness.upstream.loaders.interpreter_libdevice import interpreting


@dataclass
class _Launch:
    """A launch in progress: its kernel, and the modules its own patch covered."""

    fn: Callable[..., Any]
    covered: frozenset[int] | None = None  # ids of the modules patched, once the launch's are


class _NothingToRestore:
    """The scope of a nested call the launch's patches already cover."""

    def restore(self) -> None:
        """Nothing was set."""


def _language_modules(fn: Callable[..., Any]) -> frozenset[int]:
    """The ``triton.language`` modules visible to ``fn``, as Triton's ``_patch_lang``
    picks them (``triton.language`` and ``triton.language.core``)."""
    import triton.language as tl

    return frozenset(
        id(value)
        for value in fn.__globals__.values()
        if inspect.ismodule(value) and value in (tl, tl.core)
    )


def _numpy_types_once(get_np_dtype: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Triton's ``_get_np_dtype``, each scalar type's answer kept after its first call."""
    import triton.language as tl

    known: dict[Any, Any] = {}

    def np_dtype(tt_dtype: Any) -> Any:
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if isinstance(scalar, tl.pointer_type):  # no hash of its own: Triton's answer
            return get_np_dtype(tt_dtype)
        found = known.get(scalar)
        if found is None:
            found = known[scalar] = get_np_dtype(scalar)
        return found

    return np_dtype


@contextmanager
def fixed_costs_cached() -> Iterator[None]:
    """Patch ``triton.language`` once per launch while the block runs, not again at
    each nested ``@triton.jit`` call the launch covers, map Triton's types to numpy's
    from a table filled once, compute no overflow check for an assertion that is off,
    and build a block type's and a tensor's shape once per kind."""
    if not interpreting():
        yield
        return
    from triton.runtime import interpreter

    patch_lang, get_np_dtype = interpreter._patch_lang, interpreter._get_np_dtype
    launch = interpreter.GridExecutor.__call__
    launches: list[_Launch] = []

    def launch_noted(self: Any, *args: Any, **kwargs: Any) -> Any:
        launches.append(_Launch(self.fn))
        try:
            return launch(self, *args, **kwargs)
        finally:
            launches.pop()

    modules_of: dict[Callable[..., Any], frozenset[int]] = {}

    def patch_lang_once(fn: Callable[..., Any]) -> Any:
        current = launches[-1] if launches else None
        modules = modules_of.get(fn)
        if modules is None:  # a module's globals are read once: vLLM's are hundreds
            modules = modules_of[fn] = _language_modules(fn)
        if current is not None and current.covered is not None and modules <= current.covered:
            return _NothingToRestore()
        scope = patch_lang(fn)
        if current is not None and (current.covered is not None or fn is current.fn):
            current.covered = (current.covered or frozenset()) | modules
        return scope

    builder = interpreter.interpreter_builder
    options = builder.options
    interpreter._patch_lang = patch_lang_once
    interpreter._get_np_dtype = _numpy_types_once(get_np_dtype)
    interpreter.GridExecutor.__call__ = launch_noted
    builder.options = unchecked_overflow(options)
    try:
        with _types_built_once():
            yield
    finally:
        interpreter._patch_lang = patch_lang
        interpreter._get_np_dtype = get_np_dtype
        interpreter.GridExecutor.__call__ = launch
        builder.options = options


# What Triton's constructors gave the first value of each kind, kept for every block: a
# block type's attributes by its element type's name and shape, a tensor's numel and
# shape by its type's shape.
_BLOCKS: dict[tuple[str, tuple[Any, ...]], dict[str, Any]] = {}
_SHAPES: dict[tuple[Any, ...], tuple[Any, list[Any], Any]] = {}


@contextmanager
def _types_built_once() -> Iterator[None]:
    """``tl.block_type`` and ``tl.tensor`` built from what Triton's own constructors gave
    the first value of the same kind, while the block runs."""
    import triton.language.core as core

    block_init, tensor_init = core.block_type.__init__, core.tensor.__init__

    def block_built(self: Any, element_ty: Any, shape: Any) -> None:
        key = (element_ty.name, tuple(shape))
        try:
            known = _BLOCKS.get(key)
        except TypeError:  # a size Triton itself refuses: its own constructor says why
            block_init(self, element_ty, shape)
            return
        if known is None:
            block_init(self, element_ty, shape)
            _BLOCKS[key] = dict(vars(self))
            return
        vars(self).update(known)
        self.element_ty = element_ty

    def tensor_built(self: Any, handle: Any, type: Any) -> None:
        key = type.shape if type.is_block() else ()
        known = _SHAPES.get(key)
        if known is None:
            tensor_init(self, handle, type)
            _SHAPES[key] = (self.numel, list(self.shape.values), self.shape.type)
            return
        numel, sizes, shape_type = known
        self.handle, self.type, self.dtype, self.numel = handle, type, type.scalar, numel
        self.shape = core.tuple(sizes, shape_type)

    core.block_type.__init__ = block_built
    core.tensor.__init__ = tensor_built
    try:
        yield
    finally:
        core.block_type.__init__ = block_init
        core.tensor.__init__ = tensor_init


def unchecked_overflow(options: Any) -> Any:
    """The interpreter's ``options`` without the integer overflow check where its
    assertion is off (``debug`` false), as they are otherwise."""
    if options.debug or not options.sanitize_overflow:
        return options
    return replace(options, sanitize_overflow=False)
