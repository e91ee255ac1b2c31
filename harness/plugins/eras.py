"""Which server era a plug-in module is built for, and the ``sglang`` it gets while it loads.

A module that imports ``sglang.*`` is built against one era of the server's modules,
and gets that era whatever else is installed; whether ``import sglang`` happens to work
never decides it:

- ``pr36934``: the server of the bug's era (the PR's before/after-fix modules); its
  names come from the harness's surface (``harness.plugins.sglang_surface``), mapped
  onto ``reference``;
- ``sglang-0.5.23``: today's released package; its names come from the installed
  package's own DSpark modules, loaded by ``harness.upstream.loaders.sglang_loader``;
- ``installed``: whatever ``import sglang`` finds, as it is (only when named).

The era is the module's contract: the ``sglang`` imports that run when it loads here
(module-level ones, every one must be served by the era) and, for a module whose
``sglang`` imports all sit inside functions, its sampler's constructor (``noise`` and
``greedy_draft`` keywords: ``sglang-0.5.23``, else ``pr36934``); or it is named after
the target: ``--impl NAME=FILE@sglang-0.5.23``. A module whose running imports fit
neither era is refused, asking for a name. An import inside a function (the server's
NPU branch, a helper imported where it is used) runs only if that code runs: it is
resolved then, from the same era's modules, and one the era does not serve is an
``ImportError`` naming the import, the file and the era (``LazySglangImports``).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from harness.plugins.errors import ImplementationError
from harness.plugins.sglang_surface import SURFACE, harness_import_surface, surface_modules
from harness.upstream.loaders import sglang_loader
from harness.upstream.releases.eras import PluginEra

# The plug-in eras are the registry's (``harness.upstream.releases.eras``): each but
# ``installed`` is the era of released files that import it.
Era = PluginEra


ERA_SUFFIXES = ", ".join(f"@{era.value}" for era in Era)


def split_era(target: str, *, spec: str) -> tuple[str, Era | None]:
    """``"path.py@pr36934"`` -> ``("path.py", Era.PR36934)``; no suffix: ``None``."""
    left, at, suffix = target.rpartition("@")
    if not at:
        return target, None
    for era in Era:
        if suffix == era.value:
            return left, era
    raise ImplementationError(
        f"--impl {spec}: unknown era {suffix!r} after '@'; expected one of {ERA_SUFFIXES}"
    )


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``: false whenever the module runs."""
    if isinstance(test, ast.Attribute):
        return test.attr == "TYPE_CHECKING"
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _running_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """The statements that run when the module loads: its body and the blocks of its
    module-level ``if``/``try``/``with``/class statements, never a function's body nor
    an ``if TYPE_CHECKING:`` block."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop(0)
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
        if isinstance(node, ast.Try):
            pending.extend(stmt for handler in node.handlers for stmt in handler.body)


def sglang_imports(
    source: str, *, filename: str, running_only: bool = False
) -> list[tuple[str, str | None]]:
    """The ``sglang`` imports of the source: ``(module, name)`` for ``from module import
    name``, ``(module, None)`` for ``import module``; anywhere in it, or with
    ``running_only`` those that run when the module loads (none inside a function)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return []  # the import itself reports the syntax error
    found: list[tuple[str, str | None]] = []
    for node in _running_nodes(tree) if running_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] == "sglang"]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "sglang"
        ):
            found += [(str(node.module), a.name) for a in node.names]
    return found


def _surface_serves(module: str, name: str | None) -> bool:
    if name is None:
        return any(known == module or known.startswith(f"{module}.") for known in SURFACE)
    return name in SURFACE.get(module, {})


def detect_era(source: str, *, filename: str, spec: str) -> Era | None:
    """The era every ``sglang`` import that runs at load fits (``None``: none runs; a
    module with only lazy ones gets its era from its constructor, ``era_of_contract``)."""
    imports = sglang_imports(source, filename=filename, running_only=True)
    if not imports:
        return None
    if all(_surface_serves(module, name) for module, name in imports):
        return Era.PR36934
    unavailable = sglang_loader.unavailable_reason()
    if unavailable is None:
        loaded = sglang_loader.load_sglang()
        if all(sglang_loader.provides(loaded, module, name) for module, name in imports):
            return Era.SGLANG_0_5_23
    misfits = sorted(
        f"{module}.{name}" if name else module
        for module, name in imports
        if not _surface_serves(module, name)
    )
    newer = f"; sglang {sglang_loader.SUPPORTED_VERSION} not checked: {unavailable}"
    raise ImplementationError(
        f"--impl {spec}: cannot tell which server era {filename!r} is built for: "
        f"{', '.join(misfits[:4])} fit the {Era.PR36934.value} surface neither"
        f"{newer if unavailable else f' nor sglang {sglang_loader.SUPPORTED_VERSION}'}; "
        f"name the era after the target ({ERA_SUFFIXES})"
    )


@contextmanager
def era_imports(era: Era | None) -> Iterator[None]:
    """The ``sglang`` a module of the era sees while it loads (nothing for ``None``)."""
    if era is Era.PR36934:
        with harness_import_surface():
            yield
    elif era is Era.SGLANG_0_5_23:
        with sglang_loader.importable(sglang_loader.load_sglang()):
            yield
    else:  # installed, or a module that imports no sglang
        with contextlib.nullcontext():
            yield


def era_of_contract(module: types.ModuleType) -> Era:
    """The era of a module whose ``sglang`` imports all sit inside functions: today's
    release if a sampler class it defines takes ``noise`` and ``greedy_draft``, else the
    PR era's surface (docs/plugins.md, "File plug-ins and the server eras")."""
    defined = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
    ]
    if any(sglang_loader.speaks_sglang_0_5_23(cls) for cls in defined):
        return Era.SGLANG_0_5_23
    return Era.PR36934


def era_modules(era: Era) -> Mapping[str, types.ModuleType]:
    """The ``sglang`` modules a module of the era imports from (empty: ``installed``)."""
    if era is Era.PR36934:
        return surface_modules()
    if era is Era.SGLANG_0_5_23:
        return sglang_loader.load_sglang().scope
    return {}


class LazySglangImports:
    """The ``__import__`` of a plug-in module: its ``sglang`` imports inside functions are
    resolved when they run, from its era's modules; one the era does not serve raises an
    ``ImportError`` that names the import, the file and the era. Other imports are
    Python's own."""

    def __init__(self, *, filename: str, era: Era | None) -> None:
        self.filename = filename
        self.era = era  # None until the module's contract says (era_of_contract)
        self._modules: Mapping[str, types.ModuleType] | None = None

    def _served(self) -> Mapping[str, types.ModuleType]:
        if self._modules is None:
            self._modules = era_modules(self.era or Era.PR36934)
        return self._modules

    def _refuse(self, module: str, name: str | None) -> ImportError:
        era = (self.era or Era.PR36934).value
        what = f"{module}.{name}" if name else module
        return ImportError(
            f"{self.filename} imports {what} where it runs; the {era} era does not serve "
            "it (docs/plugins.md, 'File plug-ins and the server eras')",
            name=module,
        )

    def __call__(
        self,
        name: str,
        globals: Mapping[str, Any] | None = None,
        locals: Mapping[str, Any] | None = None,
        fromlist: tuple[str, ...] | list[str] | None = (),
        level: int = 0,
    ) -> Any:
        if level != 0 or name.split(".")[0] != "sglang" or self.era is Era.INSTALLED:
            return builtins.__import__(name, globals, locals, fromlist or (), level)
        served = self._served()
        module = served.get(name)
        if module is None:
            raise self._refuse(name, None)
        for wanted in fromlist or ():
            if not hasattr(module, wanted) and f"{name}.{wanted}" not in served:
                raise self._refuse(name, wanted)
        return module if fromlist else served[name.split(".")[0]]

    def builtins_for_module(self) -> dict[str, Any]:
        """A copy of the builtins whose ``__import__`` is this resolver."""
        return {**vars(builtins), "__import__": self}
