"""One function of a released package's file, loaded alone: its own code, run unchanged.

Some of a release's laws live in modules whose tops import half a server (sglang's
``srt/layers/sampler.py``, ``srt/speculative/dflash_utils.py``), while the functions
themselves are plain torch. ``load_function(root, module, name)`` compiles just the
``def`` of ``name`` from the file, with the file's path and line numbers (a traceback
points into the wheel), and binds each global name the function reads, once:

- a function defined at the top of the same file: loaded the same way;
- a name a top-level ``import`` or ``from ... import`` of the file binds: a module or
  name outside the package is imported for real (``torch``, ``typing``); one inside the
  package is loaded from that module's file the same way;
- a name in ``answers``: the value given, for a name the file binds by code the loader
  does not run (a platform branch at the top: ``top_k_renorm_prob = None`` off CUDA).

A name none of these binds is refused before anything runs (``UnresolvedName``, one line
naming the function, the name and what to do), as is a file that is missing or cannot be
parsed (a damaged or truncated wheel). Nothing of the package is imported, and
``sys.modules`` is not touched.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


class UnresolvedName(LookupError):
    """A global name of a loaded function that no definition, import or answer binds."""


class WheelFunctions:
    """The functions of one package's files under ``root`` (the folder that holds the
    package, e.g. ``sglang``), each loaded once, with ``answers`` for names bound by code
    the loader does not run."""

    def __init__(self, root: Path, *, package: str, answers: Mapping[str, Any] = {}) -> None:
        self.root = root
        self.package = package
        self.answers = dict(answers)
        self._loading: set[tuple[str, str]] = set()

    def path_of(self, module: str) -> Path:
        folder = self.root.joinpath(*module.split("."))
        return folder / "__init__.py" if folder.is_dir() else folder.with_suffix(".py")

    @functools.cache  # noqa: B019 - one instance a release; its functions live as long
    def _tree(self, module: str) -> ast.Module:
        path = self.path_of(module)
        if not path.is_file():
            raise UnresolvedName(f"{module}: no file {path}")
        try:
            return ast.parse(path.read_text(), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError) as error:  # damaged, truncated
            raise UnresolvedName(f"{module}: {path} cannot be parsed: {error}") from None

    @functools.cache  # noqa: B019
    def function(self, module: str, name: str) -> Callable[..., Any]:
        """``module``'s top-level function ``name``, its globals bound (module docstring)."""
        key = (module, name)
        if key in self._loading:  # mutual recursion: bound once both exist
            raise UnresolvedName(f"{module}.{name}: recursion between loaded functions")
        self._loading.add(key)
        try:
            return self._load(module, name)
        finally:
            self._loading.discard(key)

    def _load(self, module: str, name: str) -> Callable[..., Any]:
        tree = self._tree(module)
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        if not found:
            raise UnresolvedName(f"{module}: defines no top-level function {name!r}")
        definition = found[-1]  # the binding the module ends with
        scope: dict[str, Any] = {"__name__": module, "__builtins__": builtins}
        for global_name in sorted(_global_names(definition)):
            scope[global_name] = self._bind(module, global_name, reader=name)
        # with the file's __future__ imports: its annotations read as the file reads them
        future = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 0]
        future = [n for n in future if n.module == "__future__"]
        code = compile(
            ast.Module(body=[*future, definition], type_ignores=[]),
            str(self.path_of(module)),
            "exec",
        )
        exec(code, scope)  # defines the one function; nothing of the module's top runs
        function = scope[name]  # decorated (a Triton kernel): what the decorator made
        if not callable(function):
            raise UnresolvedName(f"{module}.{name}: its decorators made a {type(function)}")
        return function

    def _bind(self, module: str, name: str, *, reader: str) -> Any:
        if name in self.answers:
            return self.answers[name]
        tree = self._tree(module)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return self.function(module, name)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    if bound == name:
                        target = alias.name if alias.asname else alias.name.split(".")[0]
                        return self._module(target, module=module, name=name, reader=reader)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self._imported(node.module, alias.name, reader=f"{module}.{reader}")
        raise UnresolvedName(
            f"{module}.{reader} reads {name!r}, which its file binds by code the loader does "
            "not run (a platform branch or an assignment at its top): answer it"
        )

    def _module(self, target: str, *, module: str, name: str, reader: str) -> Any:
        if target.split(".")[0] == self.package:
            raise UnresolvedName(
                f"{module}.{reader} reads the module {name!r} of its own package: answer it"
            )
        return importlib.import_module(target)

    def _imported(self, source: str, name: str, *, reader: str) -> Any:
        if source.split(".")[0] != self.package:
            return getattr(importlib.import_module(source), name)
        if name in self.answers:
            return self.answers[name]
        try:
            return self.function(source, name)
        except UnresolvedName as error:
            raise UnresolvedName(f"{reader} imports {source}.{name}: {error}") from None


def _global_names(definition: ast.FunctionDef) -> set[str]:
    """The names ``definition`` reads (its decorators, defaults and annotations among
    them) that none of its own scopes binds and that are not builtins: what its globals
    must hold."""
    read: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node is not definition:
                bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return {n for n in read - bound if not hasattr(builtins, n)}
