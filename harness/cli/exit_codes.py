"""The exit codes of every command, defined once."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What a ``python -m harness`` run ends with."""

    OK = 0  # every expectation holds
    FAIL = 1  # an expectation failed (a check, the ledger, a verdict)
    USAGE = 2  # bad usage or bad input: nothing was judged
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    TERMINATED = 143  # SIGTERM (128 + SIGTERM)
