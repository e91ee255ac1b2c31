"""Result files: created with the mode the user's umask gives, like any file a tool
writes, whether written whole or appended a line at a time."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.io.files import append_record, write_atomically


@pytest.fixture(params=[0o022, 0o002, 0o077])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    chosen: int = request.param
    before = os.umask(chosen)
    try:
        yield chosen
    finally:
        os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_report_files_and_journals_get_the_mode_the_umask_gives(tmp_path: Path, umask: int) -> None:
    report, journal = tmp_path / "out" / "report.json", tmp_path / "out" / "report.cases.jsonl"
    write_atomically(report, "{}\n")
    append_record(journal, {"schema": "s", "key": "k"})
    expected = 0o666 & ~umask
    assert (_mode(report), _mode(journal)) == (expected, expected)
    write_atomically(report, b"{}\n")  # a rewrite keeps it too
    assert _mode(report) == expected
    assert sorted(p.name for p in report.parent.iterdir()) == [journal.name, report.name]
