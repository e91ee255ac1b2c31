"""The progress callback a long run reports to: one line per step, no formatting. The
command line prints it (``harness.render.progress``); a library caller passes its own
or ``no_progress``."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def no_progress(message: str) -> None:
    """The progress callback of a caller that wants none."""
    del message
