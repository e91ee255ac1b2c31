"""Which server era a plug-in module is built for, and the ``sglang`` it gets while it loads.

A module that imports ``sglang.*`` is built against one era of the server's modules,
and gets that era whatever else is installed; whether ``import sglang`` happens to work
never decides it:

- ``pr36934``: the server of the bug's era (the PR's before/after-fix modules); its
  names come from the harness's surface (``harness.plugins.sglang_surface``), mapped
  onto ``reference``;
- ``sglang-0.5.23``: today's released package; its names come from the installed
  package's own DSpark modules, loaded by ``harness.upstream.sglang_loader``;
- ``installed``: whatever ``import sglang`` finds, as it is (only when named).

The era is detected from the module's own ``sglang`` imports (every one must be served
by the era) or named after the target: ``--impl NAME=FILE@sglang-0.5.23``. A module
whose imports fit neither detected era is refused, asking for a name.
"""

from __future__ import annotations

import ast
import contextlib
import enum
from collections.abc import Iterator
from contextlib import contextmanager

from harness.plugins.errors import ImplementationError
from harness.plugins.sglang_surface import SURFACE, harness_import_surface
from harness.upstream import sglang_loader


class Era(enum.Enum):
    """The server eras a plug-in module can be built for."""

    PR36934 = "pr36934"
    SGLANG_0_5_23 = "sglang-0.5.23"
    INSTALLED = "installed"


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


def sglang_imports(source: str, *, filename: str) -> list[tuple[str, str | None]]:
    """Every ``sglang`` import of the source (anywhere in it): ``(module, name)`` for
    ``from module import name``, ``(module, None)`` for ``import module``."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError:
        return []  # the import itself reports the syntax error
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
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
    """The era every ``sglang`` import of the source fits (``None``: it imports none)."""
    imports = sglang_imports(source, filename=filename)
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
