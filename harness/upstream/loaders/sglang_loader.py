"""Loading the released sglang's DSpark modules from the installed package, unchanged.

The package's own ``sglang/__init__.py`` pulls in a whole server's dependencies, and
the DSpark modules import a few dozen server modules at their top that the draft call
never executes. ``load_sglang()`` therefore imports the real files of the DSpark stack
(``DSPARK_MODULES``) from wherever ``sglang`` is installed, and only the boundary
modules of the version's list (``STAND_INS``) are replaced by stand-ins:

- every name a stand-in module offers is a ``BoundaryStandIn``: a class that may be
  named, annotated with and subclassed at import, and raises ``BoundaryUsed`` (naming
  the module, the name and what was done to it) on any use: calling it, reading an
  attribute it does not have, testing its truth, indexing or iterating it;
- three platform probes of ``sglang.srt.utils`` are answered, not stood in for, because
  the modules call them at import: ``is_xpu``, ``is_npu`` and ``is_gfx95_supported``
  are ``False``, which is the truth on the CPU and CUDA builds of torch this loader
  accepts (it refuses a ROCm or XPU build);
- no package ``__init__.py`` of sglang runs: a package is a bare module whose
  ``__path__`` is the installed folder;
- any other ``sglang`` module fails the load, naming itself: a new version's new
  import is a loud error, never a silent fake.

By default the files are the installed package's. ``use_release(SglangRelease(...))``
points the process at a release's files extracted from its wheel instead, with its own
lists of DSpark modules and stand-ins (``harness.upstream.releases``; one release a
process): every later ``load_modules()`` and ``load_sglang()`` there loads it.

The modules are in ``sys.modules`` only while they load; afterwards the process's
``sglang`` entries are put back (the loaded modules keep what they imported), so
loading never makes ``import sglang`` work elsewhere. See docs/upstream.md ("Loading").
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SUPPORTED_VERSION = "0.5.23"
INSTALL_HINT = (
    f"pip install --no-deps sglang=={SUPPORTED_VERSION} msgspec (or `tox run -e upstream`)"
)

# The real files of the DSpark draft stack, executed as they are installed.
DSPARK_MODULES: tuple[str, ...] = (
    "sglang.srt.environ",
    "sglang.srt.utils.invariants",
    "sglang.srt.speculative.spec_tp_sync",
    "sglang.kernels.ops.speculative.dspark.dispatch",
    "sglang.kernels.ops.speculative.dspark.markov_sample",
    "sglang.kernels.ops.speculative.dspark.dspark_draft_model",
    "sglang.kernels.ops.speculative.dspark.blockwise_rejection",
    "sglang.srt.speculative.dspark_components.dspark_draft",
    "sglang.srt.speculative.dspark_components.dspark_draft_sampler",
    "sglang.srt.models.dspark",
)


@dataclass(frozen=True)
class StandInModule:
    """A boundary module: the names the DSpark modules import from it, and why none runs."""

    name: str
    names: tuple[str, ...]
    why: str  # what the module serves that a one-rank draft call never reaches


_SERVER = "server plumbing around the proposal (batches, workers, planner)"
_TP = "tensor-parallel plumbing (one rank here)"
_MODEL = "model building and loading (the harness builds its own heads)"

# sglang 0.5.23: the boundary modules its DSpark modules import at their top.
STAND_INS: tuple[StandInModule, ...] = (
    StandInModule(
        name="sglang.srt.kernel_plugins.nvidia.binding",
        names=("megakernel_agree", "megakernel_draft_sampler"),
        why="the NVIDIA megakernel path (built only with megakernel_sampler=)",
    ),
    StandInModule(name="sglang.srt.layers.dp_attention", names=("get_dp_tp_group",), why=_TP),
    StandInModule(
        name="sglang.srt.utils",
        names=("get_available_gpu_memory",),
        why="the memory gate of graph capture (is_xpu, is_npu, is_gfx95_supported answered)",
    ),
    StandInModule(name="sglang.srt.utils.common", names=("is_pin_memory_available",), why=_SERVER),
    StandInModule(
        name="sglang.srt.configs.draft_parallel",
        names=("DraftParallelSpec", "DraftTPExecution"),
        why=_TP,
    ),
    StandInModule(name="sglang.srt.lora.layers", names=("unwrap_lora_layer",), why=_SERVER),
    StandInModule(name="sglang.srt.managers.schedule_batch", names=("ScheduleBatch",), why=_SERVER),
    StandInModule(
        name="sglang.srt.model_executor.forward_batch_info",
        names=("CaptureHiddenMode", "ForwardBatch", "ForwardMode", "enable_num_token_non_padded"),
        why=_SERVER,
    ),
    StandInModule(
        name="sglang.srt.speculative.dflash_info_v2", names=("DFlashDraftInputV2",), why=_SERVER
    ),
    StandInModule(
        name="sglang.srt.speculative.draft_parallel",
        names=("resolve_draft_parallel_layout",),
        why=_TP,
    ),
    StandInModule(
        name="sglang.srt.speculative.draft_worker_common",
        names=("make_draft_input_v2",),
        why=_SERVER,
    ),
    StandInModule(
        name="sglang.srt.speculative.dspark_components.dspark_planner",
        names=("VerifyWindow",),
        why=_SERVER,
    ),
    StandInModule(
        name="sglang.srt.speculative.spec_info",
        names=("SpeculativeAlgorithm", "spec_scale_global_num_tokens"),
        why=_SERVER,
    ),
    StandInModule(name="sglang.srt.speculative.spec_utils", names=("draft_tp_context",), why=_TP),
    StandInModule(
        name="sglang.kernels.ops.memory.ptr_table", names=("make_ptr_table",), why=_MODEL
    ),
    StandInModule(
        name="sglang.srt.distributed.communication_op",
        names=("tensor_model_parallel_all_gather",),
        why=_TP,
    ),
    StandInModule(
        name="sglang.srt.distributed.device_communicators.triton_symm_mem_ag",
        names=("MultimemAllGatherer", "recommended_max_tokens"),
        why=_TP,
    ),
    StandInModule(
        name="sglang.srt.distributed.device_communicators.vocab_gather",
        names=("make_vocab_gather",),
        why=_TP,
    ),
    StandInModule(name="sglang.srt.layers.linear", names=("ReplicatedLinear",), why=_MODEL),
    StandInModule(
        name="sglang.srt.layers.logits_processor",
        names=("should_apply_lm_head_quant_method",),
        why=_MODEL,
    ),
    StandInModule(name="sglang.srt.mem_cache.memory_pool", names=("KVWriteLoc",), why=_MODEL),
    StandInModule(
        name="sglang.srt.model_loader.weight_utils", names=("default_weight_loader",), why=_MODEL
    ),
    StandInModule(name="sglang.srt.models.dflash", names=("DFlashDraftModel",), why=_MODEL),
    StandInModule(name="sglang.srt.runtime_context", names=("get_parallel",), why=_TP),
    StandInModule(
        name="sglang.srt.speculative.dflash_utils",
        names=("can_dflash_slice_qkv_weight",),
        why=_MODEL,
    ),
    StandInModule(
        name="sglang.srt.speculative.dspark_components.dspark_config",
        names=("get_dspark_sample_from_anchor", "parse_dspark_draft_config"),
        why=_MODEL,
    ),
    StandInModule(
        name="sglang.srt.speculative.ragged_verify",
        names=("RaggedVerifyMode", "read_ragged_verify_mode"),
        why=_MODEL,
    ),
)


def _not_this_platform() -> bool:
    return False  # the loader refuses ROCm and XPU builds of torch, so this is the truth


# Platform probes the modules call at import, answered truthfully for CPU and CUDA builds.
PLATFORM_ANSWERS: dict[str, dict[str, Any]] = {
    "sglang.srt.utils": {
        "is_xpu": _not_this_platform,
        "is_npu": _not_this_platform,
        "is_gfx95_supported": _not_this_platform,
    },
}


class UpstreamUnavailable(RuntimeError):
    """sglang (or msgspec) is not installed, or not a version this loader supports."""


class BoundaryUsed(RuntimeError):
    """A stand-in for an sglang boundary module was used: the call reached the server."""


class _BoundaryMeta(type):
    """The metaclass of stand-ins: naming and subclassing work, any other use raises."""

    _boundary: str

    def _refuse(cls, what: str) -> BoundaryUsed:
        return BoundaryUsed(
            f"sglang {installed_version()} boundary stand-in {cls._boundary} was {what}; the "
            "harness loads this module as a stand-in because the DSpark draft call never "
            "executes it (docs/upstream.md, 'Loading')"
        )

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise cls._refuse("called")

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # Python's own probes (copy, typing, inspect)
        raise cls._refuse(f"asked for .{name}")

    def __bool__(cls) -> bool:
        raise cls._refuse("tested for truth")

    def __getitem__(cls, item: Any) -> Any:
        raise cls._refuse("indexed")

    def __iter__(cls) -> Iterator[Any]:
        raise cls._refuse("iterated")


class BoundaryStandIn(metaclass=_BoundaryMeta):
    """The base of every stand-in name (``isinstance`` tells a stand-in apart)."""

    _boundary = "BoundaryStandIn"


def _stand_in(module: str, name: str) -> _BoundaryMeta:
    return _BoundaryMeta(name, (BoundaryStandIn,), {"_boundary": f"{module}.{name}"})


def _refuse_torch_build() -> None:
    if torch.version.hip is not None or (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise UpstreamUnavailable(
            "the sglang loader answers sglang's platform probes for CPU and CUDA builds of "
            f"torch only; this torch is {torch.__version__} (ROCm or XPU)"
        )


@dataclass(frozen=True)
class SglangRelease:
    """A release's files, extracted from its wheel: the ``sglang`` package folder, the
    version, its DSpark modules and its boundary stand-ins."""

    root: Path
    version: str
    modules: tuple[str, ...] = DSPARK_MODULES
    stand_ins: tuple[StandInModule, ...] = STAND_INS


_RELEASE: list[SglangRelease] = []  # the release this process judges (at most one)


def use_release(release: SglangRelease | None) -> None:
    """Load ``release``'s files from now on here (``None``: the installed package's)."""
    _RELEASE[:] = [] if release is None else [release]
    load_modules.cache_clear()
    load_sglang.cache_clear()


def _release() -> SglangRelease | None:
    return _RELEASE[0] if _RELEASE else None


def installed_version() -> str | None:
    """The sglang version the loader loads: the release in use, else the installed
    distribution's, or ``None`` (nothing is imported)."""
    if _RELEASE:
        return _RELEASE[0].version
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def unavailable_reason() -> str | None:
    """One line saying why the upstream sampler cannot be loaded here, or ``None``."""
    version = installed_version()
    if version is None:
        return f"sglang is not installed ({INSTALL_HINT})"
    if version != SUPPORTED_VERSION and _release() is None:
        return f"sglang {version} is installed; the loader supports {SUPPORTED_VERSION} only"
    if importlib.util.find_spec("msgspec") is None:
        return f"msgspec is not installed ({INSTALL_HINT})"
    return None


def _package_root() -> Path:
    release = _release()
    if release is not None:
        return release.root
    found = importlib.util.find_spec("sglang")  # locates the package; runs nothing
    if found is None or not found.submodule_search_locations:
        raise UpstreamUnavailable(f"sglang is not installed ({INSTALL_HINT})")
    return Path(next(iter(found.submodule_search_locations)))


class _DsparkFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every ``sglang`` import while the DSpark modules load."""

    def __init__(self, root: Path) -> None:
        release = _release()
        self.root = root
        self.version = SUPPORTED_VERSION if release is None else release.version
        self.modules = DSPARK_MODULES if release is None else release.modules
        listed = STAND_INS if release is None else release.stand_ins
        self.stand_ins = {module.name: module for module in listed}

    def _folder(self, name: str) -> Path:
        return self.root.parent.joinpath(*name.split("."))

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        del path, target
        if fullname.split(".")[0] != "sglang":
            return None
        folder = self._folder(fullname)
        if fullname in self.modules:
            return importlib.util.spec_from_file_location(fullname, folder.with_suffix(".py"))
        if fullname in self.stand_ins or folder.is_dir():
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=folder.is_dir())
            if folder.is_dir():
                spec.submodule_search_locations = [str(folder)]
            return spec
        raise ImportError(
            f"the sglang {self.version} loader was asked for {fullname}, which is "
            "neither a DSpark module it loads nor a listed stand-in (docs/upstream.md)",
            name=fullname,
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        stand_in = self.stand_ins.get(spec.name)
        if stand_in is not None:
            module.__doc__ = f"stand-in for sglang's {spec.name}: {stand_in.why}"
            for name in stand_in.names:
                setattr(module, name, _stand_in(spec.name, name))
            vars(module).update(PLATFORM_ANSWERS.get(spec.name, {}))
        else:
            module.__doc__ = f"sglang's package {spec.name}, its __init__ not run"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        del module  # a stand-in or a bare package has nothing to execute


_SAMPLER = "sglang.srt.speculative.dspark_components.dspark_draft_sampler"
_DRAFT = "sglang.srt.speculative.dspark_components.dspark_draft"
_KERNELS = "sglang.kernels.ops.speculative.dspark"
_HEADS = "sglang.srt.models.dspark"
_TP_SYNC = "sglang.srt.speculative.spec_tp_sync"

# The objects the harness uses, each the package's own, by the module that defines it.
EXPORTS: dict[str, str] = {
    "DsparkDraftSampler": _SAMPLER,
    "DraftNoise": _DRAFT,
    "DraftParams": _DRAFT,
    "draft_noise_key": _DRAFT,
    "draft_markov_block": _DRAFT,
    "resolve_draft_params": _DRAFT,
    "MarkovSampleStep": f"{_KERNELS}.markov_sample",
    "MarkovGreedyStep": f"{_KERNELS}.dspark_draft_model",
    "BlockwiseRejection": f"{_KERNELS}.blockwise_rejection",
    "make_rejection_noise": f"{_KERNELS}.blockwise_rejection",
    "rejection_noise_key": f"{_KERNELS}.blockwise_rejection",
    "VanillaMarkov": _HEADS,
    "GatedMarkovHead": _HEADS,
    "RNNHead": _HEADS,
    "DSparkConfidenceHead": _HEADS,
    "SpecTpSync": _TP_SYNC,
    "SpecTpSyncSite": _TP_SYNC,
}


@dataclass(frozen=True)
class LoadedModules:
    """A release's DSpark modules as loaded: every module of its list, and the scope."""

    version: str
    root: Path  # the package folder
    modules: dict[str, types.ModuleType]  # every module of its list (DSPARK_MODULES)
    scope: dict[str, types.ModuleType]  # every sglang module the load made: packages, stand-ins


@dataclass(frozen=True)
class LoadedSglang(LoadedModules):
    """The released sglang's DSpark objects, loaded from the installed files (``EXPORTS``)."""

    DsparkDraftSampler: type[Any]
    DraftNoise: type[Any]
    DraftParams: type[Any]
    draft_noise_key: Any
    draft_markov_block: Any
    resolve_draft_params: Any
    MarkovSampleStep: type[Any]
    MarkovGreedyStep: type[Any]
    BlockwiseRejection: type[Any] | None  # None: a release without the module (0.5.22)
    make_rejection_noise: Any
    rejection_noise_key: Any
    VanillaMarkov: type[Any]
    GatedMarkovHead: type[Any]
    RNNHead: type[Any]
    DSparkConfidenceHead: type[Any]
    SpecTpSync: type[Any]
    SpecTpSyncSite: type[Any]


@contextmanager
def sglang_modules_restored(*, cleared: bool = False) -> Iterator[None]:
    """``sys.modules['sglang*']`` put back on exit as now (``cleared``: none inside it)."""
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "sglang"}
    for name in saved if cleared else ():
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "sglang"]:
            del sys.modules[name]
        sys.modules.update(saved)


@functools.cache
def load_modules() -> LoadedModules:
    """The DSpark modules of the release in use, else the installed package's (once per
    process). ``UpstreamUnavailable`` (one line) where the package is missing or another
    version; an import the version's lists do not cover: an ``ImportError`` naming it."""
    reason = unavailable_reason()
    if reason is not None:
        raise UpstreamUnavailable(reason)
    _refuse_torch_build()
    root = _package_root()
    finder = _DsparkFinder(root)
    with sglang_modules_restored(cleared=True), _finder_active(finder):
        modules = {name: importlib.import_module(name) for name in finder.modules}
        scope = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "sglang"}
    return LoadedModules(version=finder.version, root=root, modules=modules, scope=scope)


@functools.cache
def load_sglang() -> LoadedSglang:
    """The DSpark objects of ``load_modules()`` (``EXPORTS``); a release without one of
    the modules (0.5.22 ships no blockwise_rejection) has ``None`` for its names."""
    loaded = load_modules()
    exported: dict[str, Any] = {
        name: getattr(loaded.modules[module], name) if module in loaded.modules else None
        for name, module in EXPORTS.items()
    }
    return LoadedSglang(**vars(loaded), **exported)


@contextmanager
def _finder_active(finder: _DsparkFinder) -> Iterator[None]:
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def provides(loaded: LoadedSglang, module: str, name: str | None) -> bool:
    """Whether ``from module import name`` (``import module`` for ``None``) is served by
    the loaded modules: a real DSpark module's name, or a stand-in the version lists."""
    found = loaded.scope.get(module)
    return found is not None and (name is None or hasattr(found, name))


@contextmanager
def importable(loaded: LoadedSglang) -> Iterator[None]:
    """While a plug-in file built for this version loads: its ``sglang`` imports get the
    loaded modules themselves (the same classes), and ``sys.modules`` is restored after."""
    with sglang_modules_restored(cleared=True), _finder_active(_DsparkFinder(loaded.root)):
        sys.modules.update(loaded.scope)
        yield


def speaks_sglang_0_5_23(sampler_class: type[Any]) -> bool:
    """Whether the class is built the 0.5.23 way: its constructor takes the ``noise`` and
    ``greedy_draft`` keywords (the package's ``DsparkDraftSampler``, a subclass, or a
    working copy of its module loaded as a file)."""
    try:
        parameters = inspect.signature(sampler_class).parameters
    except (TypeError, ValueError):
        return False
    keyword = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return all(
        name in parameters and parameters[name].kind in keyword
        for name in ("noise", "greedy_draft")
    )
