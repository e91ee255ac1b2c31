"""Result files that survive interruption: atomic whole-file writes, and journals of
JSON lines appended one durable line per finished unit and resumed after a kill."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any

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


class OutputWriteError(OSError):
    """A result file that could not be written (a full disk, a folder made read-only
    meanwhile); the file keeps its previous content."""


def _write_error(path: Path, error: OSError) -> OutputWriteError:
    reason = error.strerror or str(error)
    return OutputWriteError(
        f"cannot write {path}: {reason}; the file keeps its previous content "
        "(free some space or choose another --out-dir)"
    )


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it; a
    failure (``OutputWriteError``) leaves ``path`` as it was and no temporary file."""
    payload = data.encode() if isinstance(data, str) else data
    temporary: Path | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = _create_beside(path)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, OutputWriteError):
            raise _write_error(path, error) from None
        raise


class JournalError(ValueError):
    """A journal line before the last that is not a record: damage, not a torn write."""


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line durably: one ``write`` on an ``O_APPEND`` descriptor, then
    ``fsync`` (a crash leaves at most a torn last line, which ``load_records`` drops; a
    failed write is cut off again and raised as ``OutputWriteError``)."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    except OSError as error:
        raise _write_error(path, error) from None
    start = os.fstat(fd).st_size
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as error:
        with contextlib.suppress(OSError):  # no half line left behind
            os.ftruncate(fd, start)
        raise _write_error(path, error) from None
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
