"""Loading the released vLLM 0.33's DSpark draft sampling from the installed package.

vLLM is imported as it is installed (``pip install --no-deps vllm==0.33.0`` plus the
light packages its imports demand, ``requirements/vllm-0.33.txt``): no module of it is
replaced. ``load_vllm()`` imports three of its modules and hands out what the harness
calls:

- ``vllm.v1.worker.gpu.spec_decode.dspark.speculator``: ``DSparkSpeculator``, whose
  ``_sample_sequential`` / ``_sample_sequential_topk`` are the draft walk;
- ``vllm.v1.worker.gpu.sample.gumbel``: ``gumbel_sample``, the kernel that samples a
  step and writes the verifier's cache row;
- ``vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils``: ``rejection_sample``,
  the server's verifier;
- from 0.34, ``vllm.v1.worker.gpu.spec_decode.draft_logits``: ``DraftLogitsCache``,
  the form in which the speculator writes the draft logits cache and the verifier
  reads it (``replicated_cache``).

On a machine without CUDA its kernels run under Triton's interpreter, which needs two
variables set before the process starts (``tox run -e vllm`` sets both):
``CUDA_VISIBLE_DEVICES=""`` (without it vLLM's Triton import guard finds no active
driver and turns ``triton.jit`` into a no-op) and ``TRITON_INTERPRET=1``. The
interpreter has no body for ``libdevice.log1p`` (the rejection sampler's residual
uses it): ``interpreter_log1p()`` gives it one, numpy's ``log1p``, for the duration of
a call. The two kernels it hands out run with the interpreter's fixed costs cached
(``interpreter_patching.fixed_costs_cached``: the same results, an oracle decode in
about a third of the CPU time, docs/performance.md). Importing vLLM writes defaults of
its own into ``os.environ`` (``TORCHINDUCTOR_COMPILE_THREADS``, ``TRITON_CACHE_AUTOTUNING``
and others); the loader puts the environment back as it found it. See docs/upstream.md
("vLLM 0.33").

``use_release(VllmRelease(root, version, oracle_depth))`` points the process at a
release's files extracted from its wheel instead (``harness.upstream.releases``):
``root`` joins the front of ``sys.path`` for the rest of the process (a process judges
one release), the version checks hold that release, not the installed one, and the
oracle's depth its era sets for a row under Triton's interpreter (``oracle_depth``,
``ReleaseEra.oracle_depth``) is the cut the convention declares (``release_oracle_depth``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from harness.upstream.loaders.interpreter_patching import fixed_costs_cached
from harness.upstream.releases.era_parts import OracleDepth

SUPPORTED_VERSION = "0.33.0"
SUPPORTED_TRITON = "3.8"
REQUIREMENTS = "requirements/vllm-0.33.txt"
INSTALL_HINT = (
    f"pip install --no-deps vllm=={SUPPORTED_VERSION} -r {REQUIREMENTS} (or `tox run -e vllm`)"
)
SPECULATOR_MODULE = "vllm.v1.worker.gpu.spec_decode.dspark.speculator"
GUMBEL_MODULE = "vllm.v1.worker.gpu.sample.gumbel"
REJECTION_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
DRAFT_LOGITS_MODULE = "vllm.v1.worker.gpu.spec_decode.draft_logits"  # 0.34 on
SPECULATOR_CLASS = f"{SPECULATOR_MODULE}.DSparkSpeculator"
VLLM_FORM = (
    "NAME=vllm, NAME=vllm:dense, NAME=vllm:topk=K (K a positive integer) or NAME=vllm:unfused"
)
TOPK_ATTRIBUTE = "harness_draft_topk"  # class attribute: K of the top-k variant, or None
# class attribute: False where the Markov bias is added before the Gumbel kernel (0.34)
FUSED_BIAS_ATTRIBUTE = "harness_fuse_markov_bias"


class VllmUnavailable(RuntimeError):
    """The installed vLLM cannot be loaded here; the message says why in one line."""


@dataclass(frozen=True)
class LoadedVllm:
    """What the harness calls of the installed package."""

    version: str
    DSparkSpeculator: type[Any]
    gumbel_sample: Callable[..., torch.Tensor]
    rejection_sample: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    DraftLogitsCache: type[Any] | None = None  # 0.34 on; before, the cache is a tensor


@dataclass(frozen=True)
class VllmRelease:
    """A release's files, extracted from its wheel: the folder holding ``vllm/``."""

    root: Path
    version: str
    oracle_depth: OracleDepth | None = None  # its era's, for a row under the interpreter


_RELEASE: list[VllmRelease] = []  # the release this process judges (at most one)


def use_release(release: VllmRelease) -> None:
    """Import ``release``'s files from now on in this process (before any vLLM import)."""
    _RELEASE[:] = [release]
    if str(release.root) not in sys.path:
        sys.path.insert(0, str(release.root))
    load_vllm.cache_clear()
    variant_class.cache_clear()


def release_oracle_depth() -> OracleDepth | None:
    """The oracle's depth the era of the release in use sets (``None``: no release is in
    use, or its era sets none)."""
    return _RELEASE[0].oracle_depth if _RELEASE else None


def installed_version() -> str | None:
    """The vllm version the loader loads: the release in use, else the installed
    distribution's, or ``None`` (nothing is imported)."""
    if _RELEASE:
        return _RELEASE[0].version
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def _triton_version() -> str | None:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def interpreted() -> bool:
    """Whether vLLM's kernels run under Triton's interpreter here (no CUDA device)."""
    return not torch.cuda.is_available()


def unavailable_reason() -> str | None:
    """One line saying why vLLM's DSpark sampling cannot be loaded here, or ``None``."""
    version = installed_version()
    if version is None:
        return f"vllm is not installed ({INSTALL_HINT})"
    if version != SUPPORTED_VERSION and not _RELEASE:
        return f"vllm {version} is installed; the loader supports {SUPPORTED_VERSION} only"
    if not interpreted():
        return None
    triton = _triton_version() or "none"
    if not triton.startswith(SUPPORTED_TRITON + "."):
        return (
            f"vllm {version} under Triton's interpreter needs triton "
            f"{SUPPORTED_TRITON}.x, found {triton} (3.9's interpreter mis-types a boolean "
            "mask and-ed with a scalar; `tox run -e vllm` pins it)"
        )
    missing = [
        f"{name}={wanted!r}"
        for name, wanted in (("CUDA_VISIBLE_DEVICES", ""), ("TRITON_INTERPRET", "1"))
        if os.environ.get(name) != wanted
    ]
    if missing:
        return (
            "vllm's kernels on a machine without CUDA need "
            f"{' and '.join(missing)} set before the process starts (`tox run -e vllm` sets them)"
        )
    return None


@contextmanager
def environment_kept() -> Iterator[None]:
    """``os.environ`` as the block found it: vLLM's import sets defaults of its own in it,
    and the process's stay."""
    environment = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environment)


@functools.cache
def load_vllm() -> LoadedVllm:
    """The installed package's draft sampling and verifier (once per process);
    ``VllmUnavailable`` says why not."""
    reason = unavailable_reason()
    if reason is not None:
        raise VllmUnavailable(reason)
    with environment_kept():
        speculator = importlib.import_module(SPECULATOR_MODULE)
        gumbel = importlib.import_module(GUMBEL_MODULE)
        rejection = importlib.import_module(REJECTION_MODULE)
        draft_logits = (
            importlib.import_module(DRAFT_LOGITS_MODULE)
            if importlib.util.find_spec(DRAFT_LOGITS_MODULE) is not None
            else None
        )
    return LoadedVllm(
        version=installed_version() or SUPPORTED_VERSION,
        DSparkSpeculator=speculator.DSparkSpeculator,
        gumbel_sample=with_fixed_costs_cached(gumbel.gumbel_sample),
        rejection_sample=with_fixed_costs_cached(rejection.rejection_sample),
        DraftLogitsCache=getattr(draft_logits, "DraftLogitsCache", None),
    )


def replicated_cache(values: torch.Tensor) -> Any:
    """``values`` (``[max_num_reqs, gamma, V]``, by request slot) in the form the loaded
    release's speculator and ``rejection_sample`` read: from 0.34 the package's own
    ``DraftLogitsCache`` in its replicated form (``row_mapping`` ``None``: one process,
    no tensor parallelism) holding them; before, the tensor itself."""
    cache_class = load_vllm().DraftLogitsCache
    if cache_class is None:
        return values
    rows, steps, vocab = values.shape
    cache = cache_class(rows, steps, vocab, dtype=values.dtype, fill=0.0, device=values.device)
    cache.values.copy_(values)
    return cache


def with_fixed_costs_cached(function: Callable[..., Any]) -> Callable[..., Any]:
    """The package's ``function``, each call run with the interpreter's fixed costs
    cached (``fixed_costs_cached``; nothing changes where kernels are compiled)."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        with fixed_costs_cached():
            return function(*args, **kwargs)

    return run


def is_speculator_class(cls: type[Any]) -> bool:
    """Whether ``cls`` is vLLM's ``DSparkSpeculator`` or a subclass of it (read from the
    class's MRO by name: nothing is imported)."""
    return any(f"{base.__module__}.{base.__qualname__}" == SPECULATOR_CLASS for base in cls.__mro__)


@contextmanager
def interpreter_log1p() -> Iterator[None]:
    """Give Triton's interpreter a body for ``libdevice.log1p`` while the block runs;
    nothing changes where kernels are compiled.

    Under ``TRITON_INTERPRET=1`` a kernel runs as Python over numpy arrays: the
    interpreter swaps its own bodies into ``triton.language`` (and ``tl.math``) for
    the launch, but ``triton.language.extra.libdevice`` holds only stubs whose bodies
    are ``...``, so a kernel calling ``libdevice.log1p`` gets ``None`` back. A kernel
    looks the name up in the module at call time, so setting the module's attribute
    for the duration of the call is enough. The body takes the interpreter's value (a
    ``tl.tensor`` over a numpy array) and returns one of the same type:
    ``np.log1p`` elementwise in the argument's own dtype. Lanes outside the function's
    domain (``x <= -1``) give ``-inf`` / NaN as the device function does, without
    numpy's warnings: the kernels mask them out (docs/upstream.md, "vLLM's rejection
    sampler as a verifier").
    """
    if not interpreted():
        yield
        return
    import numpy as np
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
    from triton.runtime import interpreter

    original = libdevice.log1p

    def log1p(arg0: Any, _semantic: Any = None) -> Any:
        del _semantic  # the interpreter's: nothing is built
        with np.errstate(invalid="ignore", divide="ignore"):
            data = np.log1p(arg0.handle.data)
        return tl.tensor(interpreter.TensorHandle(data, arg0.handle.dtype.scalar), arg0.type)

    libdevice.log1p = log1p
    try:
        yield
    finally:
        libdevice.log1p = original


class VllmPath(NamedTuple):
    """A path of the speculator: top-``K`` or dense, and whether the Markov bias is
    fused into the Gumbel kernel where the release can (0.34's ``_fuse_markov_bias``)."""

    topk: int | None = None
    fused_bias: bool = True


def parse_vllm_variant(text: str) -> VllmPath:
    """``""`` or ``"dense"``: the dense path; ``"topk=K"``: top-``K``; ``"unfused"``: the
    dense path with the Markov bias added before the Gumbel kernel; ``ValueError``
    otherwise."""
    if text in ("", "dense"):
        return VllmPath()
    if text == "unfused":
        return VllmPath(fused_bias=False)
    key, sep, value = text.partition("=")
    if key == "topk" and sep and value.isdigit() and int(value) > 0:
        return VllmPath(topk=int(value))
    raise ValueError(f"unknown vLLM variant {text!r}")


@functools.cache
def variant_class(path: VllmPath) -> type[Any]:
    """The package's ``DSparkSpeculator`` (dense), or a subclass of it that only names
    the path: ``K`` for the top-``K`` variant (its ``hf_config.dspark_draft_topk``
    upstream), or the Markov bias not fused (what ``load_model`` sets for a drafter it
    cannot fuse)."""
    base = load_vllm().DSparkSpeculator
    if path == VllmPath():
        return base
    name = f"DSparkSpeculatorTopK{path.topk}" if path.topk else "DSparkSpeculatorUnfused"
    return type(name, (base,), {TOPK_ATTRIBUTE: path.topk, FUSED_BIAS_ATTRIBUTE: path.fused_bias})


def speaks_vllm_0_33(sampler_class: type[Any]) -> bool:
    """Whether the class is vLLM's ``DSparkSpeculator`` or a subclass of it."""
    return isinstance(sampler_class, type) and is_speculator_class(sampler_class)
