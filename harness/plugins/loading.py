"""Loading a plug-in's module: from a source file or by its dotted name.

A module that imports ``sglang.*`` gets the real ``sglang`` where one is
importable, else the harness's surface (``harness.plugins.sglang_surface``) for
the duration of the import only. Whatever goes wrong while importing (an
exception, ``sys.exit``, a missing file) is one ``ImplementationError`` that says
what happened and what form was expected.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.pipeline.interrupts import StopRequested
from harness.plugins.errors import ImplementationError
from harness.plugins.sglang_surface import harness_import_surface, surface_for

FILE_FORM = "NAME=path/to/module.py[:Class]"
MODULE_FORM = "NAME=module:Class or NAME=module:function"


@dataclass(frozen=True)
class LoadedModule:
    """A plug-in's module and which ``sglang`` it was given (``None``: it imports none)."""

    module: types.ModuleType
    import_surface: str | None


@contextmanager
def _surface(import_surface: str | None) -> Iterator[None]:
    with harness_import_surface() if import_surface == "harness" else contextlib.nullcontext():
        yield


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


def load_source_file(path_text: str, *, module_name: str, spec: str) -> LoadedModule:
    """Execute the file as module ``module_name`` (kept in ``sys.modules``)."""
    path = Path(path_text)
    if not path.is_file():
        raise ImplementationError(
            f"--impl {spec}: no such file {path_text!r} (from {Path.cwd()}); expected {FILE_FORM}"
        )
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise ImplementationError(f"--impl {spec}: cannot read {path_text!r} ({error})") from None
    import_surface = surface_for(path, source)
    module_spec = importlib.util.spec_from_file_location(module_name, path.resolve())
    if module_spec is None or module_spec.loader is None:
        raise ImplementationError(f"--impl {spec}: {path_text!r} is not a Python source file")
    loader = module_spec.loader

    def load() -> types.ModuleType:
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module  # dataclasses and pickling look the module up
        try:
            with _surface(import_surface):
                loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        return module

    return LoadedModule(_run_import(load, what=repr(path_text), spec=spec), import_surface)


def import_named_module(module_name: str, *, spec: str) -> LoadedModule:
    """Import a module by its dotted name, with the ``sglang`` surface it needs."""
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
    import_surface = None
    if found.origin and found.origin.endswith(".py"):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            import_surface = surface_for(Path(found.origin), Path(found.origin).read_text())

    def load() -> types.ModuleType:
        with _surface(import_surface):
            return importlib.import_module(module_name)

    return LoadedModule(
        _run_import(load, what=f"module {module_name!r}", spec=spec), import_surface
    )
