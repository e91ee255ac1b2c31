"""Which calling convention a sampler class speaks, among ours (``harness.plugins``) and
the released packages' (each era of the registry, ``harness.upstream.releases.eras.ERAS``,
names its convention and the classes that speak it), a sampler built in it, and an
implementation's provenance as reports show it. It sits above both: the conventions of
``harness.plugins`` know no released package."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.construct import bind_constructor
from harness.plugins.conventions import (
    BuiltSampler,
    ConstructorConvention,
    Convention,
    ConventionName,
)
from harness.plugins.implementations import Implementation
from harness.plugins.protocol import DraftSampler
from harness.upstream.releases.era_parts import ConventionRef
from harness.upstream.releases.eras import ERAS

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs


def _resolve(dotted: str) -> Any:
    """``"package.module.NAME"`` -> the module's ``NAME``, the module imported now."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


@functools.cache
def bound_convention(reference: ConventionRef) -> tuple[Convention, Callable[[type[Any]], bool]]:
    """The convention an era of the registry names, and its predicate (imported now)."""
    convention = _resolve(reference.convention)
    if not isinstance(convention, Convention):
        raise TypeError(f"{reference.convention} is no Convention: {convention!r}")
    return convention, _resolve(reference.speaks)


def contract_conventions() -> tuple[tuple[Convention, Callable[[type[Any]], bool]], ...]:
    """Every convention the registry binds an era to, once each, in the registry's order,
    with the predicate that says which sampler classes speak it."""
    references = dict.fromkeys(era.convention for era in ERAS if era.convention is not None)
    return tuple(bound_convention(reference) for reference in references)


def convention_of(sampler_class: type[DraftSampler]) -> Convention:
    """The convention a sampler class speaks: the first of the registry's conventions that
    says the class speaks it (a released package's own sampler class and its subclasses),
    else ours or the PR-era server's, as its constructor says."""
    for convention, speaks in contract_conventions():
        if speaks(sampler_class):
            return convention
    return ConstructorConvention(ConventionName(bind_constructor(sampler_class).convention))


def build_for_case(
    sampler_class: type[DraftSampler],
    *,
    case: Case,
    inputs: CaseInputs,
    model: torch.nn.Module | None = None,
    out: torch.Tensor | None = None,
) -> BuiltSampler:
    """A sampler for the case in the class's own convention (``out``: the server's token
    buffer, where the constructor takes one); nothing staged yet."""
    return convention_of(sampler_class).build(
        sampler_class, case=case, inputs=inputs, model=model, out=out
    )


def provenance(implementation: Implementation) -> dict[str, Any]:
    """Where the sampler came from and how it is called, as plain JSON for reports: the
    convention and adaptations its worker found, else those of its class."""
    if implementation.convention is None or implementation.adaptations is None:
        convention = convention_of(implementation.sampler_class)
        name, adaptations = str(convention.name), convention.adaptations()
    else:
        name, adaptations = implementation.convention, implementation.adaptations
    return {
        "name": implementation.name,
        "spec": implementation.spec,
        "kind": implementation.kind,
        "era": None if implementation.era is None else implementation.era.value,
        "convention": name,
        "adaptations": list(adaptations),
    }
