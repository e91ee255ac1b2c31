"""Result files that survive interruption: atomic whole-file writes, and journals of
JSON lines appended one durable line per finished unit and resumed after a kill."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from harness.io.lock import lock_before_writing

FILE_MODE = 0o666  # what the user's umask then narrows, as for any file a tool writes


def _create_beside(path: Path) -> tuple[int, Path]:
    """A new, exclusively created temporary file beside ``path`` (mode ``FILE_MODE``
    under the umask, where ``tempfile.mkstemp`` would force 0600)."""
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE), temporary
        except FileExistsError:
            continue


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it."""
    lock_before_writing(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, temporary = _create_beside(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class JournalError(ValueError):
    """A journal line before the last that is not a record: damage, not a torn write."""


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line durably: one ``write`` on an ``O_APPEND`` descriptor, then
    ``fsync`` (a crash leaves at most a torn last line, which ``load_records`` drops)."""
    lock_before_writing(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse_record(line: bytes, schema: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict) or record.get("schema") != schema or "key" not in record:
        return None
    return record


def load_records(
    path: Path, *, schema: str, repair: bool, what: str = "record"
) -> tuple[dict[str, dict[str, Any]], int]:
    """Finished records by key, and how many bytes of a torn last line were dropped.

    A last line that is unterminated or not a record of ``schema`` is torn (the
    writer was killed mid-write); with ``repair`` the file is truncated to the last
    good line. A bad line before the last is not a torn write: ``JournalError``.
    """
    if not path.exists():
        return {}, 0
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    complete, tail = lines[:-1], lines[-1]  # tail: bytes after the last newline
    records: dict[str, dict[str, Any]] = {}
    good_bytes = 0
    for number, line in enumerate(complete, 1):
        record = _parse_record(line, schema)
        if record is None:
            if number == len(complete) and not tail:
                break  # a complete but unreadable last line: torn as well
            raise JournalError(f"{path}:{number}: not a {what}; remove or fix the line")
        records[record["key"]] = record
        good_bytes += len(line) + 1
    dropped = len(raw) - good_bytes
    if dropped and repair:
        with open(path, "r+b") as handle:
            handle.truncate(good_bytes)
            handle.flush()
            os.fsync(handle.fileno())
    return records, dropped
