"""What many test modules share: where the repository is and how to start a child process."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def subprocess_env(**overrides: str) -> dict[str, str]:
    """The environment of a child ``python`` that imports this checkout's packages."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.update(overrides)
    return env
