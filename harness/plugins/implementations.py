"""Which samplers take part in a comparison, and how a user names their own.

Built in: ``reference`` (the single-pass oracle), ``fixed`` and ``legacy``. Any
other ``DsparkDraftSampler``-compatible class joins with ``NAME=module:Class``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fixed import DsparkDraftSampler as FixedSampler
from legacy import DsparkDraftSampler as LegacySampler
from reference import ReferenceDraftSampler

BUILTIN_IMPLEMENTATIONS: dict[str, type[Any]] = {
    "reference": ReferenceDraftSampler,
    "fixed": FixedSampler,
    "legacy": LegacySampler,
}
REQUIRED_CONSTRUCTOR_KEYWORDS = ("model", "gamma", "max_bs", "device")


class ImplementationError(ValueError):
    """An ``--impl`` that cannot be imported or does not fit the interface."""


@dataclass(frozen=True)
class Implementation:
    """A named sampler class; ``spec`` says where it came from."""

    name: str
    sampler_class: type[Any]
    spec: str


def builtin_implementations(
    names: tuple[str, ...] = ("reference", "fixed", "legacy"),
) -> list[Implementation]:
    return [
        Implementation(name, BUILTIN_IMPLEMENTATIONS[name], f"builtin:{name}") for name in names
    ]


def check_sampler_class(sampler_class: object, *, spec: str) -> type[Any]:
    """Raise ``ImplementationError`` unless the class looks like a draft sampler."""
    if not inspect.isclass(sampler_class):
        raise ImplementationError(f"{spec}: {sampler_class!r} is not a class")
    if not any("__call__" in vars(cls) for cls in sampler_class.__mro__[:-1]):
        raise ImplementationError(f"{spec}: class has no __call__(hidden_states, input_ids)")
    if not callable(getattr(sampler_class, "stage_sampling_params", None)):
        raise ImplementationError(
            f"{spec}: class has no stage_sampling_params(*, bs, sampling_info)"
        )
    try:
        parameters = inspect.signature(sampler_class).parameters
    except (TypeError, ValueError) as error:
        raise ImplementationError(f"{spec}: cannot read the constructor ({error})") from None
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    missing = [k for k in REQUIRED_CONSTRUCTOR_KEYWORDS if k not in parameters]
    if missing and not takes_any:
        raise ImplementationError(
            f"{spec}: constructor lacks keyword arguments {missing}; expected "
            "DsparkDraftSampler(*, model, gamma, max_bs, device, confidence_fn=None, out=None, "
            "folded_sampling=True, fused_greedy=False)"
        )
    return sampler_class


def parse_impl_spec(text: str) -> Implementation:
    """``NAME=module:Class`` -> an importable, interface-checked implementation."""
    name, sep, target = text.partition("=")
    module_name, colon, class_name = target.partition(":")
    if not sep or not colon or not name or not module_name or not class_name:
        raise ImplementationError(f"--impl must look like NAME=module:Class, got {text!r}")
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ImplementationError(f"--impl name must be letters, digits, '-' or '_', got {name!r}")
    if name in BUILTIN_IMPLEMENTATIONS:
        raise ImplementationError(f"--impl name {name!r} is taken by a built-in implementation")
    try:
        module = importlib.import_module(module_name)
    except BaseException as error:  # any failure at import, sys.exit and Ctrl-C included
        raise ImplementationError(
            f"--impl {text}: cannot import module {module_name!r} ({type(error).__name__}: {error})"
        ) from None
    if not hasattr(module, class_name):
        raise ImplementationError(f"--impl {text}: module {module_name!r} has no {class_name!r}")
    sampler_class = check_sampler_class(getattr(module, class_name), spec=text)
    return Implementation(name, sampler_class, text)


def select_implementations(names: Sequence[str], specs: Sequence[str]) -> list[Implementation]:
    """Built-in implementations by name, then every ``NAME=module:Class`` spec."""
    unknown = [n for n in names if n not in BUILTIN_IMPLEMENTATIONS]
    if unknown:
        raise ImplementationError(
            f"unknown built-in implementation(s) {unknown}; "
            f"expected some of {list(BUILTIN_IMPLEMENTATIONS)}"
        )
    implementations = builtin_implementations(tuple(names))
    for spec in specs:
        extra = parse_impl_spec(spec)
        if extra.name in {i.name for i in implementations}:
            raise ImplementationError(f"--impl name {extra.name!r} given twice")
        implementations.append(extra)
    return implementations


def parse_names(text: str) -> list[str]:
    """``"reference, fixed"`` -> ``["reference", "fixed"]``."""
    return [name.strip() for name in text.split(",") if name.strip()]
