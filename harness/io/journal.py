"""A run's journal: one durable JSON line per finished unit (a case, a sweep point),
each stamped with the fingerprint of the run that wrote it.

Resuming takes a record only when its fingerprint equals this run's and its keyed
digest (HMAC-SHA256) checks out; anything else is recomputed, and the run says so. The
key lives outside any output folder, in the user's cache folder, readable by the user
only (``journal_key``); it is never handed to a worker, so a plug-in that edits a
record cannot make the edit pass. Without resume the previous journal is left in place
until this run has a first record of its own to write, so a run that stops before
that (bad input, a crash) deletes nothing. Records come back in one canonical key
order, so a report built from resumed records is byte-identical to a fresh one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.io.files import append_record, load_records, write_atomically

Record = dict[str, Any]  # any JSON record (a comparison's case, a sweep's point)
FINGERPRINT = "fingerprint"
DIGEST = "digest"
KEY_BYTES = 32


def key_path() -> Path:
    """Where the journal key is kept: ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "dspark-harness" / "journal.key"


def journal_key() -> bytes:
    """The user's journal key, made on first use (folder 0700, file 0600)."""
    path = key_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()
    with os.fdopen(descriptor, "wb") as file:
        file.write(secrets.token_bytes(KEY_BYTES))
    return path.read_bytes()


def record_digest(record: Record, *, key: bytes) -> str:
    """The keyed digest of a record (every field but the digest, in canonical order)."""
    body = json.dumps({k: v for k, v in record.items() if k != DIGEST}, sort_keys=True)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def canonical(record: Mapping[str, Any]) -> Record:
    """The record as it reads back from a journal: keys sorted at every level."""
    loaded: Record = json.loads(json.dumps(record, sort_keys=True))
    return loaded


class Journal:
    """The journal file of one run, with the run's fingerprint."""

    def __init__(self, path: Path, *, schema: str, fingerprint: str, what: str) -> None:
        self.path = path
        self.schema = schema
        self.fingerprint = fingerprint
        self.what = what
        self._replace_on_first_append = True
        self._key = journal_key()

    def finished(self, *, resume: bool) -> tuple[dict[str, Record], list[str]]:
        """Records this run may reuse, by key, and lines that say what was not reused."""
        if not resume:
            return {}, []
        self._replace_on_first_append = False
        stored, dropped = load_records(self.path, schema=self.schema, repair=True, what=self.what)
        intact = {
            key: record
            for key, record in stored.items()
            if hmac.compare_digest(
                str(record.get(DIGEST, "")), record_digest(record, key=self._key)
            )
        }
        reusable = {
            key: {k: v for k, v in record.items() if k not in (FINGERPRINT, DIGEST)}
            for key, record in intact.items()
            if record.get(FINGERPRINT) == self.fingerprint
        }
        notes = []
        if dropped:
            notes.append(f"{self.path}: dropped a torn last line ({dropped} bytes)")
        edited = len(stored) - len(intact)
        if edited:
            notes.append(
                f"{self.path}: {edited} finished {self.what}(s) will be recomputed: their "
                "keyed digest does not match (edited after they were written, or written "
                f"with another key than {key_path()})"
            )
        stale = len(intact) - len(reusable)
        if stale:
            notes.append(
                f"{self.path}: {stale} finished {self.what}(s) will be recomputed: the code "
                "or the options that change outcomes differ from the run that wrote them"
            )
        return reusable, notes

    def append(self, record: Mapping[str, Any]) -> Record:
        """Write ``record`` durably with this run's fingerprint; return it canonical."""
        stamped = {**record, FINGERPRINT: self.fingerprint}
        stamped[DIGEST] = record_digest(stamped, key=self._key)
        if self._replace_on_first_append:  # the previous run's journal goes only now
            write_atomically(self.path, json.dumps(stamped, sort_keys=True) + "\n")
            self._replace_on_first_append = False
        else:
            append_record(self.path, stamped)
        return canonical(record)
