"""What a stored result depends on, as one digest: the source of the harness, of the
three built-in packages and of every plug-in, plus the options that change outcomes.

A journal record carries the fingerprint of the run that wrote it; a resumed run
whose fingerprint differs recomputes the record instead of trusting it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.defaults import FIXED, LEGACY, REFERENCE

BUILT_IN_PACKAGES = ("harness", REFERENCE, LEGACY, FIXED)  # each built-in lives in its namesake
FUNCTION_WRAPPER_MODULE = "harness.plugins.functional"  # where block sampler functions are wrapped


def _digest_files(files: Iterable[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for label, path in sorted(files):
        digest.update(label.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def package_digest(package: str) -> str:
    """Digest of every ``.py`` file of an importable package (or of a single module)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return f"missing:{package}"
    origin = Path(spec.origin)
    if origin.name != "__init__.py":
        return _digest_files([(origin.name, origin)])
    root = origin.parent
    return _digest_files((str(p.relative_to(root)), p) for p in root.rglob("*.py"))


def class_source_digest(sampler_class: type[Any]) -> str:
    """Digest of the file that defines ``sampler_class`` (a plug-in's module or file);
    for a wrapped block sampler function, the file that defines the function; for a
    plug-in loaded in its worker only, its file (read, never imported)."""
    from harness.plugins.implementations import WorkerOnlySampler

    if issubclass(sampler_class, WorkerOnlySampler):
        source_file = sampler_class.source
        if source_file is None or not source_file.is_file():
            return f"no-source:{sampler_class.spec}"
        return _digest_files([(source_file.name, source_file)])
    module_name = sampler_class.__module__
    if module_name == FUNCTION_WRAPPER_MODULE:  # the wrapper is ours; the function is theirs
        function = getattr(sampler_class, "block_sampler", None)
        module_name = getattr(function, "__module__", None) or module_name
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsourcefile(module) if module is not None else None
    except TypeError:  # a built-in or generated module: no file to read
        source = None
    if source is None or not Path(source).is_file():
        return f"no-source:{sampler_class.__module__}.{sampler_class.__qualname__}"
    return _digest_files([(Path(source).name, Path(source))])


def code_digests() -> dict[str, str]:
    """Source digests of the harness and the built-in packages, by package."""
    return {package: package_digest(package) for package in BUILT_IN_PACKAGES}


def run_fingerprint(*, implementations: Mapping[str, type[Any]], options: Mapping[str, Any]) -> str:
    """One digest of the code (harness, built-ins, each implementation's file) and the
    options that change outcomes (time limit, device, isolation, strictness)."""
    identity = {
        "code": code_digests(),
        "implementations": {
            name: class_source_digest(cls) for name, cls in sorted(implementations.items())
        },
        "options": dict(options),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def code_fingerprint() -> str:
    """The fingerprint of the built-in code alone (no plug-ins, no options)."""
    return run_fingerprint(implementations={}, options={})
