"""What many test modules share: where the repository is and how to start a child process."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(*, without: Iterable[str] = (), **overrides: str) -> dict[str, str]:
    """The environment of a child ``python`` that imports this checkout's packages first:
    this process's environment, the repository prepended to ``PYTHONPATH``, the variables
    named in ``without`` removed, then ``overrides`` set."""
    env = {k: v for k, v in os.environ.items() if k not in set(without)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(overrides)
    return env
