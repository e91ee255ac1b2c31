"""One run per output folder: an advisory lock that dies with its holder.

``claim_out_dir`` names the folder a run writes into. If it exists, it is locked at
once; if not, it is created and locked by the first write into it (so a run refused
for bad input leaves no folder behind). The lock is an exclusive ``flock`` on
``OUT_DIR/.harness.lock``, which holds the holder's pid; a second run on the folder
is refused naming that pid. The kernel drops the lock when the holder exits in any
way, kill -9 included, so a stale lock never blocks a later run.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".harness.lock"


class OutDirBusy(RuntimeError):
    """Another harness run holds the output folder."""


_claimed: Path | None = None
_descriptor: int | None = None


def _acquire(out_dir: Path) -> None:
    global _descriptor
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise OutDirBusy(
            f"--out-dir {out_dir} is in use by another harness run (pid {holder}); "
            "wait for it to finish or choose another --out-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _descriptor = fd


def lock_before_writing(path: Path) -> None:
    """Take the claimed folder's lock before the first write under it."""
    if _claimed is None or _descriptor is not None:
        return
    if path.absolute().is_relative_to(_claimed):
        _acquire(_claimed)


@contextmanager
def claim_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir`` for the block (``OutDirBusy`` if another process holds it)."""
    global _claimed, _descriptor
    _claimed = out_dir.absolute()
    try:
        if out_dir.is_dir():
            _acquire(_claimed)
        yield
    finally:
        if _descriptor is not None:
            os.close(_descriptor)  # closing the descriptor releases the lock
        _claimed, _descriptor = None, None
