"""One run per output folder: an advisory lock that dies with its holder.

``claim_out_dir`` names the folder a run writes into. If it exists, it is locked at
once; if not, it is created and locked by the first write into it (so a run refused
for bad input leaves no folder behind). The lock is an exclusive ``flock`` on the
folder itself, so nothing is added to it; the holder's pid is kept in a small file
in the system's temporary folder, named after the folder's path, so that a second
run is refused naming it. The kernel drops the lock when the holder exits in any
way, kill -9 included, so a stale lock never blocks a later run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class OutDirBusy(RuntimeError):
    """Another harness run holds the output folder."""


_claimed: Path | None = None
_descriptor: int | None = None


def holder_file(out_dir: Path) -> Path:
    """Where the pid of the run holding ``out_dir`` is written."""
    name = hashlib.sha256(str(out_dir.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"dspark-harness-{name}.pid"


def _acquire(out_dir: Path) -> None:
    global _descriptor
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            holder = holder_file(out_dir).read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise OutDirBusy(
            f"--out-dir {out_dir} is in use by another harness run (pid {holder}); "
            "wait for it to finish or choose another --out-dir"
        ) from None
    _descriptor = fd
    with contextlib.suppress(OSError):  # the pid only improves a second run's message
        holder_file(out_dir).write_text(f"{os.getpid()}\n")


def _release(out_dir: Path) -> None:
    global _descriptor
    if _descriptor is None:
        return
    pid_file = holder_file(out_dir)
    try:
        if pid_file.read_text().strip() == str(os.getpid()):
            pid_file.unlink()
    except OSError:
        pass
    os.close(_descriptor)  # closing the descriptor releases the lock
    _descriptor = None


def lock_before_writing(path: Path) -> None:
    """Take the claimed folder's lock before the first write under it."""
    if _claimed is None or _descriptor is not None:
        return
    if path.absolute().is_relative_to(_claimed):
        _acquire(_claimed)


@contextmanager
def claim_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir`` for the block (``OutDirBusy`` if another process holds it)."""
    global _claimed
    _claimed = out_dir.absolute()
    try:
        if out_dir.is_dir():
            _acquire(_claimed)
        yield
    finally:
        _release(_claimed)
        _claimed = None
