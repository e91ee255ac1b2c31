"""Which samplers take part in a comparison, and how a user names their own.

Built in: ``reference`` (the single-pass oracle), ``fixed`` and ``legacy``. Any
other sampler joins with ``--impl``:

- ``NAME=module:Class``: a ``DsparkDraftSampler``-compatible class on ``sys.path``;
- ``NAME=path/to/module.py[:Class]``: a class in a source file (default class
  ``DsparkDraftSampler``), e.g. a working copy of the server's own module;
- ``NAME=module:function`` or ``NAME=path.py:function``: a block sampler function
  (``harness.plugins.protocol.BlockSamplerFunction``), wrapped into a sampler;
- ``NAME=sglang``: the installed sglang release's own ``DsparkDraftSampler``, loaded by
  ``harness.upstream.loaders.sglang_loader`` and built in its convention;
- ``NAME=vllm[:dense|:topk=K|:unfused]``: the installed vLLM 0.33's own ``DSparkSpeculator``
  (dense, or its top-``K`` variant), loaded by ``harness.upstream.loaders.vllm_loader`` and
  built in its convention (``harness.upstream.vllm_convention``).

The released packages are found and named through their loaders, which import nothing
of the harness; which convention a class speaks is ``harness.upstream.dispatch``'s.

A file or module target may name its server era after ``@`` (``harness.plugins.eras``).

Every class is bound against its constructor once, here, before the first case.
Under ``--isolate`` a plug-in is loaded in its worker only
(``harness.pipeline.worker_only``); the judge holds a ``WorkerOnlySampler`` in its
place. An implementation crosses a process line by reference (``Implementation``'s
pickled form): the process that receives it loads it there, once.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from fixed import DsparkDraftSampler as FixedSampler
from harness.defaults import BUILTIN_NAMES
from harness.executor import BUILTINS
from harness.plugins.construct import bind_constructor
from harness.plugins.eras import Era, split_era
from harness.plugins.errors import ImplementationError
from harness.plugins.functional import functional_sampler_class
from harness.plugins.loading import (
    LoadedModule,
    import_named_module,
    load_source_file,
)
from harness.plugins.protocol import DraftSampler
from harness.plugins.specs import (
    FILE_FORM,
    MODULE_FORM,
    bad_form,
    check_impl_name,
    parse_names,
    split_name,
)
from harness.upstream.loaders.sglang_loader import (
    UpstreamUnavailable,
    load_sglang,
    speaks_sglang_0_5_23,
)
from harness.upstream.loaders.vllm_loader import (
    VLLM_FORM,
    VllmUnavailable,
    parse_vllm_variant,
    speaks_vllm_0_33,
)
from harness.upstream.loaders.vllm_loader import variant_class as vllm_variant_class
from harness.world import import_world
from legacy import DsparkDraftSampler as LegacySampler
from reference import ReferenceDraftSampler

__all__ = [
    "BUILTIN_IMPLEMENTATIONS",
    "DEFAULT_FILE_CLASS",
    "Implementation",
    "ImplementationError",
    "WorkerOnlySampler",
    "builtin_implementations",
    "check_sampler_class",
    "parse_impl_spec",
    "parse_names",
    "select_implementations",
]

BUILTIN_IMPLEMENTATIONS: dict[str, type[DraftSampler]] = dict(
    zip(BUILTIN_NAMES, (ReferenceDraftSampler, FixedSampler, LegacySampler), strict=True)
)
DEFAULT_FILE_CLASS = "DsparkDraftSampler"
UPSTREAM_TARGET = "sglang"  # NAME=sglang: the installed release (harness.upstream)
VLLM_TARGET = "vllm"  # NAME=vllm[:dense|:topk=K|:unfused]: the installed vLLM 0.33
TARGET_FORMS = f"{MODULE_FORM} or {FILE_FORM}"
ImplementationKind = Literal["class", "function"]  # a sampler class, or a wrapped function


@dataclass(frozen=True)
class Implementation:
    """A named sampler class; ``spec`` says where it came from.

    ``era``: the server era its module was loaded for (``harness.plugins.eras``;
    ``None``: it imports no sglang). ``kind``: ``"class"`` or ``"function"`` (a block
    sampler function wrapped into ``sampler_class``). ``convention`` and
    ``adaptations``: its calling convention and what the harness's adapter works around
    in it, as its worker found them (``None``: read from ``sampler_class`` by
    ``harness.upstream.dispatch.provenance``).
    """

    name: str
    sampler_class: type[DraftSampler]
    spec: str
    era: Era | None = None
    kind: ImplementationKind = "class"
    convention: str | None = None
    adaptations: tuple[str, ...] | None = None

    @property
    def trust_domain(self) -> str:
        """Whose code it is (``harness.executor``): the built-ins share one domain, each
        plug-in is its own, named by its spec."""
        return BUILTINS if self.spec == f"builtin:{self.name}" else self.spec

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by reference, as a task names it to another process: a built-in by its
        name; a plug-in held here as a ``WorkerOnlySampler``, loaded from a file or of the
        sglang era (whose modules live in no importable package) by its spec, loaded there
        once; any other by its fields, its class by its importable name."""
        if self.trust_domain == BUILTINS and self.name in BUILTIN_IMPLEMENTATIONS:
            return (builtin_implementation, (self.name,))
        by_spec = (
            issubclass(self.sampler_class, WorkerOnlySampler)
            or ".py" in self.spec
            or self.era is Era.SGLANG_0_5_23
        )
        if by_spec:
            return (implementation_by_spec, (self.spec,))
        fields = (self.sampler_class, self.spec, self.era, self.kind)
        return (Implementation, (self.name, *fields, self.convention, self.adaptations))

    def __copy__(self) -> Implementation:
        return self  # frozen; a copy must not load a plug-in again

    def __deepcopy__(self, memo: dict[int, Any]) -> Implementation:
        return self


class WorkerOnlySampler:
    """Stands in the judge for a plug-in loaded in its worker only (``--isolate``).

    ``spec`` names it and ``source`` is its file, digested for the fingerprint. It is
    never constructed in the judge: a stage that tried would record this failure
    instead of importing the plug-in.
    """

    spec: str = ""
    source: Path | None = None

    def __init__(self, **kwargs: Any) -> None:
        raise ImplementationError(f"--impl {self.spec}: loaded in its worker only (--isolate)")

    def stage_sampling_params(self, *, bs: int, sampling_info: Any) -> None:
        raise ImplementationError(f"--impl {self.spec}: loaded in its worker only (--isolate)")

    def __call__(self, hidden_states: Any, input_ids: Any) -> None:
        raise ImplementationError(f"--impl {self.spec}: loaded in its worker only (--isolate)")


def builtin_implementations(
    names: tuple[str, ...] = BUILTIN_NAMES,
) -> list[Implementation]:
    return [builtin_implementation(name) for name in names]


def builtin_implementation(name: str) -> Implementation:
    """The built-in implementation ``name``."""
    return Implementation(name, BUILTIN_IMPLEMENTATIONS[name], f"builtin:{name}")


_loaded_specs: dict[str, Implementation] = {}


def implementation_by_spec(spec: str) -> Implementation:
    """The implementation an ``--impl`` spec names, loaded in this process once."""
    if spec not in _loaded_specs:
        _loaded_specs[spec] = parse_impl_spec(spec)
    return _loaded_specs[spec]


def check_sampler_class(sampler_class: object, *, spec: str) -> type[DraftSampler]:
    """Raise ``ImplementationError`` unless the class can be constructed and called."""
    if not inspect.isclass(sampler_class):
        raise ImplementationError(f"{spec}: {sampler_class!r} is not a class")
    checked = cast(type[DraftSampler], sampler_class)  # its constructor and methods: next
    if not speaks_sglang_0_5_23(checked) and not speaks_vllm_0_33(checked):
        bind_constructor(checked, spec=spec)  # a package's own convention is not ours
    return checked


def _split_target(text: str, target: str) -> tuple[str, str, bool]:
    """``(module or path, attribute, is_file)`` of an ``--impl`` target."""
    left, colon, attribute = target.rpartition(":")
    if colon and left.endswith(".py"):
        return left, attribute, True
    if target.endswith(".py"):
        return target, DEFAULT_FILE_CLASS, True
    if not colon or not left or not attribute:
        raise ImplementationError(bad_form(text))
    if "/" in left or "\\" in left:
        raise ImplementationError(
            f"--impl {text}: {left!r} looks like a path but is not a .py file; expected {FILE_FORM}"
        )
    return left, attribute, False


def file_module_name(name: str) -> str:
    """The module a file plug-in named ``name`` is loaded as: two names with the same
    module (``a-b`` and ``a_b``) cannot both take part."""
    return f"dspark_impl_{name.replace('-', '_')}"


def split_impl_spec(text: str) -> tuple[str, str, str, bool]:
    """``(name, module or path, attribute, is_file)`` of an ``--impl`` spec; nothing loaded."""
    name, target = split_name(text)
    if target == UPSTREAM_TARGET:
        return name, UPSTREAM_TARGET, "", False
    if target == VLLM_TARGET or target.startswith(VLLM_TARGET + ":"):
        return name, VLLM_TARGET, target.partition(":")[2], False
    return (name, *_split_target(text, split_era(target, spec=text)[0]))


def impl_era(text: str) -> Era | None:
    """The server era an ``--impl`` spec names after ``@`` (``None``: detect it)."""
    return split_era(text.partition("=")[2], spec=text)[1]


def parse_impl_spec(text: str) -> Implementation:
    """An ``--impl`` spec -> a loaded, constructor-checked implementation."""
    name, where, attribute, is_file = split_impl_spec(text)
    check_impl_name(name)
    if where == UPSTREAM_TARGET and not attribute:
        with import_world(owner=name):
            return _upstream_implementation(name, text)
    if where == VLLM_TARGET:
        with import_world(owner=name):
            return _vllm_implementation(name, text, attribute)
    era = impl_era(text)
    if not is_file:
        with import_world(owner=name):
            loaded = import_named_module(where, spec=text, era=era)
        return _implementation(name, loaded, where, attribute, text)
    module_name = file_module_name(name)
    with import_world(owner=name):
        loaded = load_source_file(where, module_name=module_name, spec=text, era=era)
    try:
        return _implementation(name, loaded, where, attribute, text)
    except ImplementationError:
        sys.modules.pop(module_name, None)  # nothing of a refused file stays behind
        raise


def _upstream_implementation(name: str, text: str) -> Implementation:
    """``NAME=sglang``: the installed package's own ``DsparkDraftSampler``."""
    try:
        package = load_sglang()
    except UpstreamUnavailable as error:
        raise ImplementationError(f"--impl {text}: {error}") from None
    except ImportError as error:  # an import the version's lists do not cover
        raise ImplementationError(f"--impl {text}: loading sglang failed: {error}") from None
    return Implementation(name, package.DsparkDraftSampler, text, Era.SGLANG_0_5_23)


def _vllm_implementation(name: str, text: str, variant: str) -> Implementation:
    """``NAME=vllm[:dense|:topk=K|:unfused]``: the installed vLLM's own ``DSparkSpeculator``."""
    try:
        path = parse_vllm_variant(variant)
    except ValueError as error:
        raise ImplementationError(f"--impl {text}: {error}; expected {VLLM_FORM}") from None
    try:
        sampler_class = vllm_variant_class(path)
    except VllmUnavailable as error:
        raise ImplementationError(f"--impl {text}: {error}") from None
    except ImportError as error:
        raise ImplementationError(f"--impl {text}: loading vllm failed: {error}") from None
    return Implementation(name, sampler_class, text)


def _implementation(
    name: str, loaded: LoadedModule, where: str, attribute: str, text: str
) -> Implementation:
    """The class or function ``attribute`` of a loaded module, checked."""
    module = loaded.module
    if not hasattr(module, attribute):
        defined = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and v.__module__ == module.__name__
        )
        raise ImplementationError(
            f"--impl {text}: {where!r} has no {attribute!r} (classes defined there: "
            f"{', '.join(defined) or 'none'}); expected {TARGET_FORMS}"
        )
    target_object = getattr(module, attribute)
    if inspect.isclass(target_object):
        sampler_class = check_sampler_class(target_object, spec=f"--impl {text}")
        return Implementation(name, sampler_class, text, loaded.era)
    if callable(target_object):
        wrapped = functional_sampler_class(target_object, spec=text)
        return Implementation(name, wrapped, text, loaded.era, kind="function")
    raise ImplementationError(
        f"--impl {text}: {attribute!r} is a {type(target_object).__name__}, "
        "neither a sampler class nor a block sampler function"
    )


def select_implementations(
    names: Sequence[str],
    specs: Sequence[str],
    *,
    load: Callable[[str], Implementation] = parse_impl_spec,
) -> list[Implementation]:
    """Built-in implementations by name, then every ``--impl`` spec as ``load`` gives it
    (default: imported here; ``harness.pipeline.worker_only.worker_only`` loads it in its
    own worker only)."""
    unknown = [n for n in names if n not in BUILTIN_IMPLEMENTATIONS]
    if unknown:
        raise ImplementationError(
            f"unknown built-in implementation(s) {unknown}; "
            f"expected some of {list(BUILTIN_IMPLEMENTATIONS)}"
        )
    implementations = builtin_implementations(tuple(names))
    modules: dict[str, str] = {}  # file_module_name -> the --impl name that has it
    for spec in specs:
        name = spec.partition("=")[0]
        if not name:
            continue  # parse_impl_spec names the form expected
        taken = modules.get(file_module_name(name))
        if taken == name:
            raise ImplementationError(f"--impl name {name!r} given twice")
        if taken is not None:  # one module for both: the second would replace the first
            raise ImplementationError(
                f"--impl names {taken!r} and {name!r} differ only in '-' against '_'; "
                "expected names that stay distinct with '-' read as '_'"
            )
        modules[file_module_name(name)] = name
    implementations += [load(spec) for spec in specs]
    return implementations
