"""Telling the user's Ctrl-C or SIGTERM apart from an implementation's own exceptions.

An implementation may raise ``KeyboardInterrupt`` or ``SystemExit`` itself; that is
its failure, recorded like any exception. A signal sent to the harness must still
stop the run. While ``stop_on_signals`` is active, SIGINT and SIGTERM raise
``StopRequested`` (a ``KeyboardInterrupt``) and are remembered, so a stop that an
implementation catches and swallows is raised again as soon as it returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class StopRequested(KeyboardInterrupt):
    """The harness was sent SIGINT or SIGTERM: stop the run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_installed = False
_received: int | None = None


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into ``StopRequested`` for the block (main thread only)."""
    global _installed, _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        global _received
        _received = signum
        raise StopRequested(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    _installed, _received = True, None
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _installed, _received = False, None


def reraise_stop_request(error: BaseException | None) -> None:
    """Re-raise ``error`` if it is a stop of the run rather than the implementation's own
    exception; with ``None``, raise a stop that arrived and was swallowed meanwhile.

    Without ``stop_on_signals`` a ``KeyboardInterrupt`` cannot be told apart from a
    real Ctrl-C, so it is taken as one.
    """
    if isinstance(error, StopRequested) or (
        isinstance(error, KeyboardInterrupt) and not _installed
    ):
        raise error
    if _received is not None:
        raise StopRequested(_received)
