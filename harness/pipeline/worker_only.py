"""Plug-ins the judge does not import (``--isolate``): an ``--impl`` spec held in the
judge as a ``WorkerOnlySampler`` stand-in, its file located and digested for the
fingerprint without running any of its code, and loaded and checked by a task in its
own trust domain (``describe_task``), which tells the judge its kind and calling
convention."""

from __future__ import annotations

import importlib.machinery
from dataclasses import dataclass
from pathlib import Path

from harness.executor import Executor, TimeLimited, WorkerFailure, for_domain
from harness.plugins.eras import Era
from harness.plugins.errors import ImplementationError
from harness.plugins.implementations import (
    Implementation,
    ImplementationKind,
    WorkerOnlySampler,
    check_impl_name,
    implementation_by_spec,
    split_impl_spec,
)
from harness.upstream.dispatch import provenance as implementation_provenance
from harness.wire import answer_types

LOAD_LIMIT_S = 600.0  # loading a plug-in in its worker (its imports, a worker's start)


@dataclass(frozen=True)
class PluginDescription:
    """What the task found when it loaded a plug-in (or why it could not)."""

    kind: ImplementationKind = "class"
    era: str | None = None  # the Era's value: only plain data crosses
    convention: str = "harness"
    adaptations: tuple[str, ...] = ()
    error: str | None = None  # the ImplementationError's message


answer_types(PluginDescription)


def describe_task(spec: str) -> PluginDescription:
    """A task: load the plug-in ``spec`` names, in the process it runs in, and say what
    it is."""
    try:
        loaded = implementation_by_spec(spec)
    except ImplementationError as error:
        return PluginDescription(error=str(error))
    provenance = implementation_provenance(loaded)
    return PluginDescription(
        kind=loaded.kind,
        era=provenance["era"],
        convention=provenance["convention"],
        adaptations=tuple(provenance["adaptations"]),
    )


def _module_file(module_name: str) -> Path | None:
    """The source file of a dotted module name, found without importing anything."""
    search: list[str] | None = None
    origin: str | None = None
    for part in module_name.split("."):
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None:
            return None
        origin = found.origin
        search = list(found.submodule_search_locations or [])
    return Path(origin) if origin and origin.endswith(".py") else None


def describe(spec: str, *, executor: Executor) -> PluginDescription:
    """``describe_task`` in the plug-in's trust domain; a task that gave no answer, or
    answered something else, is the plug-in's refusal."""
    future = for_domain(executor, spec).submit(TimeLimited(describe_task, LOAD_LIMIT_S), spec)
    try:
        answer = future.result()
    except WorkerFailure as failure:
        return PluginDescription(error=f"--impl {spec}: loading it in its worker failed: {failure}")
    if not isinstance(answer, PluginDescription):
        return PluginDescription(error=f"--impl {spec}: its worker answered {answer!r}")
    return answer


def worker_only(spec: str, *, executor: Executor) -> Implementation:
    """An ``--impl`` spec as the judge holds it under ``--isolate``: named, its file
    located and digested, loaded and checked on ``executor`` in its own trust domain
    only; a plug-in refused there is an ``ImplementationError`` here, as it would be in
    process."""
    name, where, _, is_file = split_impl_spec(spec)
    check_impl_name(name)
    source = Path(where) if is_file else _module_file(where)
    if is_file and not (source is not None and source.is_file()):
        raise ImplementationError(f"--impl {spec}: no such file {where!r} (from {Path.cwd()})")
    stand_in = type(
        f"WorkerOnly_{name.replace('-', '_')}",
        (WorkerOnlySampler,),
        {"spec": spec, "source": None if source is None else source.resolve()},
    )
    description = describe(spec, executor=executor)
    if description.error is not None:
        raise ImplementationError(description.error)
    return Implementation(
        name,
        stand_in,
        spec,
        None if description.era is None else Era(description.era),
        kind=description.kind,
        convention=description.convention,
        adaptations=description.adaptations,
    )
