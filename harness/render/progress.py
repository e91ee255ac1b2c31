"""Progress lines for long runs: on stderr, so stdout stays the report (or JSON)."""

from __future__ import annotations

import sys

from harness.progress import Progress


def progress_printer(*, quiet: bool) -> Progress:
    """A progress callback printing to stderr, silent when ``quiet``."""

    def emit(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr, flush=True)

    return emit
