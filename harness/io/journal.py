"""A run's journal: one durable JSON line per finished unit (a case, a sweep point),
each stamped with the fingerprint of the run that wrote it.

Resuming takes a record only when its fingerprint equals this run's: a record written
by other code (the harness, a built-in or a plug-in) or under other outcome-changing
options is recomputed, and the run says so. A record is not signed: the journal is the
user's file, and a process of the same user can rewrite it (``docs/trust.md``). Without
resume the previous journal is left in place until this run has a first record of its
own to write, so a run that stops before that (bad input, a crash) deletes nothing.
Records come back in one canonical key order, so a report built from resumed records
is byte-identical to a fresh one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.io.files import append_record, load_records, write_atomically

Record = dict[str, Any]  # any JSON record (a comparison's case, a sweep's point)
FINGERPRINT = "fingerprint"


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

    def finished(self, *, resume: bool) -> tuple[dict[str, Record], list[str]]:
        """Records this run may reuse, by key, and lines that say what was not reused."""
        if not resume:
            return {}, []
        self._replace_on_first_append = False
        stored, dropped = load_records(self.path, schema=self.schema, repair=True, what=self.what)
        reusable = {
            key: {k: v for k, v in record.items() if k != FINGERPRINT}
            for key, record in stored.items()
            if record.get(FINGERPRINT) == self.fingerprint
        }
        notes = []
        if dropped:
            notes.append(f"{self.path}: dropped a torn last line ({dropped} bytes)")
        stale = len(stored) - len(reusable)
        if stale:
            notes.append(
                f"{self.path}: {stale} finished {self.what}(s) will be recomputed: the code "
                "or the options that change outcomes differ from the run that wrote them"
            )
        return reusable, notes

    def append(self, record: Mapping[str, Any]) -> Record:
        """Write ``record`` durably with this run's fingerprint; return it canonical."""
        stamped = {**record, FINGERPRINT: self.fingerprint}
        if self._replace_on_first_append:  # the previous run's journal goes only now
            write_atomically(self.path, json.dumps(stamped, sort_keys=True) + "\n")
            self._replace_on_first_append = False
        else:
            append_record(self.path, stamped)
        return canonical(record)
