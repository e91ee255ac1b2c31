"""One run per output folder: a ``filelock`` lock that dies with its holder.

The lock file lives in the system's temporary folder, named after the output folder's
path, so nothing is added to the folder and a run refused for bad input leaves no
folder behind. It holds the holder's pid, so that a second run is refused naming it.
The kernel drops the lock (``flock``) when its holder exits in any way, kill -9
included, so a stale lock never blocks a later run.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout


class OutDirBusy(RuntimeError):
    """Another harness run holds the output folder."""


def lock_file(out_dir: Path) -> Path:
    """The lock file of ``out_dir``, outside it."""
    name = hashlib.sha256(str(out_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"dspark-harness-{name}.lock"


def _write_pid(descriptor: int) -> None:
    os.ftruncate(descriptor, 0)  # a holder killed with -9 left its own pid behind
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)


@contextmanager
def claim_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir`` for the block (``OutDirBusy`` if another process holds it)."""
    path = lock_file(out_dir)
    lock = FileLock(path, on_acquired=_write_pid)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        try:
            holder = path.read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise OutDirBusy(
            f"--out-dir {out_dir} is in use by another harness run (pid {holder}); "
            "wait for it to finish or choose another --out-dir"
        ) from None
    try:
        yield
    finally:
        lock.release()
