"""What the test session computes once and every xdist worker reads.

pytest-xdist hands a module's tests to whichever worker is free, so a module-scoped
fixture would run once in each worker that gets one of its tests. The expensive ones (a
whole standard matrix, an oracle run) are computed once a session instead: the first
worker that asks computes and pickles the answer under a file lock, the others read it
(pytest-xdist's own recipe for a session fixture computed once). The answers are data
that the tests only read; each worker gets its own copy.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

T = TypeVar("T")


def session_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for this test session: the parent of every worker's base temp under
    xdist, the base temp itself in a serial run (whose parent outlives the session, so
    nothing computed there may be read by a later session)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def computed_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], T]
) -> T:
    """``compute()`` once this session, whichever worker asks first; ``name`` names it
    (one name per fixture)."""
    folder = session_folder(tmp_path_factory)
    answer = folder / f"{name}.pickle"
    with FileLock(str(folder / f"{name}.lock")):
        if not answer.is_file():
            answer.write_bytes(pickle.dumps(compute()))
        loaded: T = pickle.loads(answer.read_bytes())
    return loaded
