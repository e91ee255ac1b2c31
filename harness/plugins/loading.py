"""Loading a plug-in's module: from a source file or by its dotted name.

A module that imports ``sglang.*`` gets the ``sglang`` of the server era it is built
for (``harness.plugins.eras``: detected from its imports, or named), for the
duration of the import only. Whatever goes wrong while importing (an
exception, ``sys.exit``, a missing file) is one ``ImplementationError`` that says
what happened and what form was expected.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.interrupts import StopRequested
from harness.plugins.eras import (
    Era,
    LazySglangImports,
    detect_era,
    era_imports,
    era_of_contract,
    sglang_imports,
)
from harness.plugins.errors import ImplementationError
from harness.plugins.specs import FILE_FORM, MODULE_FORM
from harness.upstream.loaders.sglang_loader import unavailable_reason


@dataclass(frozen=True)
class LoadedModule:
    """A plug-in's module and the server era it was loaded for (``None``: no sglang)."""

    module: types.ModuleType
    era: Era | None


def _era_of(source: str, *, filename: str, spec: str, named: Era | None) -> Era | None:
    """The named era (checked to be loadable here), else the one the imports fit."""
    if named is Era.SGLANG_0_5_23 and unavailable_reason() is not None:
        raise ImplementationError(f"--impl {spec}: era {named.value}: {unavailable_reason()}")
    return named or detect_era(source, filename=filename, spec=spec)


def _run_import(load: Callable[[], types.ModuleType], *, what: str, spec: str) -> types.ModuleType:
    try:
        return load()
    except SystemExit as stop:  # a module that exits at import must not end the harness
        raise ImplementationError(
            f"--impl {spec}: importing {what} called sys.exit({stop.code!r}); "
            "a plug-in module must import without side effects"
        ) from None
    except StopRequested:  # the user's Ctrl-C or SIGTERM: stop the run
        raise
    except (Exception, KeyboardInterrupt) as error:  # any failure at import: report it
        raise ImplementationError(
            f"--impl {spec}: importing {what} raised {type(error).__name__}: {error}"
        ) from None


def load_source_file(
    path_text: str, *, module_name: str, spec: str, era: Era | None = None
) -> LoadedModule:
    """Execute the file as module ``module_name`` (kept in ``sys.modules``), with the
    ``sglang`` of ``era`` (``None``: the era its imports fit)."""
    path = Path(path_text)
    if not path.is_file():
        raise ImplementationError(
            f"--impl {spec}: no such file {path_text!r} (from {Path.cwd()}); expected {FILE_FORM}"
        )
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ImplementationError(f"--impl {spec}: cannot read {path_text!r} ({error})") from None
    file_era = _era_of(source, filename=path_text, spec=spec, named=era)
    module_spec = importlib.util.spec_from_file_location(module_name, path.resolve())
    if module_spec is None or module_spec.loader is None:
        raise ImplementationError(f"--impl {spec}: {path_text!r} is not a Python source file")
    loader = module_spec.loader

    # Its sglang imports inside functions run later, resolved from the same era.
    lazy = LazySglangImports(filename=path_text, era=file_era)
    imports_sglang = bool(sglang_imports(source, filename=path_text))

    def load() -> types.ModuleType:
        module = importlib.util.module_from_spec(module_spec)
        if imports_sglang:
            vars(module)["__builtins__"] = lazy.builtins_for_module()
        sys.modules[module_name] = module  # dataclasses and pickling look the module up
        try:
            with era_imports(file_era):
                loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        return module

    module = _run_import(load, what=repr(path_text), spec=spec)
    if file_era is None and imports_sglang:
        file_era = lazy.era = era_of_contract(module)
    return LoadedModule(module, file_era)


def import_named_module(module_name: str, *, spec: str, era: Era | None = None) -> LoadedModule:
    """Import a module by its dotted name, with the ``sglang`` of its era."""
    if module_name in sys.modules:  # already imported (perhaps built in memory): take it
        return LoadedModule(sys.modules[module_name], None)
    try:
        found = importlib.util.find_spec(module_name)
    except Exception as error:  # a parent package that fails to import
        raise ImplementationError(
            f"--impl {spec}: cannot import module {module_name!r} ({type(error).__name__}: {error})"
        ) from None
    if found is None:
        raise ImplementationError(
            f"--impl {spec}: cannot import module {module_name!r} (not found on sys.path); "
            f"expected {MODULE_FORM} or {FILE_FORM}"
        )
    source = ""
    if found.origin and found.origin.endswith(".py"):
        try:
            source = Path(found.origin).read_text()
        except (OSError, UnicodeDecodeError):
            source = ""  # the import itself reports it
    module_era = _era_of(source, filename=str(found.origin), spec=spec, named=era)

    def load() -> types.ModuleType:
        with era_imports(module_era):
            return importlib.import_module(module_name)

    return LoadedModule(_run_import(load, what=f"module {module_name!r}", spec=spec), module_era)
