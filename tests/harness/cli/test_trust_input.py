"""Inputs refused before work: numbers that do not fit their dtype, names that could
forge a report line or collide, and result files that cannot be written are each one
line on stderr naming the file, field and expected form, exit status 2, nothing
half-written."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from harness.case import CASE_SCHEMA, CASE_SCHEMA_VERSION, make_case
from harness.cli import main

BROKEN_PLUGIN = """from fixed import DsparkDraftSampler


class Mine(DsparkDraftSampler):
    def __call__(self, hidden_states, input_ids):
        super().__call__(hidden_states, input_ids)
        self.out.fill_(0)
"""


def _case_text(**changes: object) -> str:
    body = make_case(bs=2, gamma=3, vocab_size=33, hidden_size=8, markov_rank=4).to_json_dict()
    body["case"].update(changes)
    assert body["schema"] == CASE_SCHEMA and body["schema_version"] == CASE_SCHEMA_VERSION
    return json.dumps(body)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``main(argv)`` must exit 2 with one ``error:`` line; that line."""
    code = main([*argv, "--quiet"])
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "VERDICT" not in captured.out
    return lines[0]


@pytest.mark.parametrize(
    ("temperature", "expected"),
    [
        ("1" + "0" * 400, "an integer of 401 digits"),  # a JSON integer: no float holds it
        ("1e300", "must fit torch.float32"),  # a double, but inf once staged in float32
        ("3.5e38", "must fit torch.float32"),
    ],
)
def test_a_temperature_that_does_not_fit_its_dtype_is_refused_naming_file_and_field(
    temperature: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "hot.json"
    path.write_text(_case_text(temperatures=["HOT", 1.0]).replace('"HOT"', temperature))
    out = tmp_path / "out"
    line = _refused(["compare", "--case", str(path), "--out-dir", str(out)], capsys)
    assert f"{path}: temperatures must" in line and expected in line
    assert not out.exists()


def test_a_case_name_with_a_newline_is_refused_and_cannot_forge_a_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "forged.json"
    path.write_text(_case_text(name="x\nVERDICT: PASS"))
    plugin = tmp_path / "broken.py"
    plugin.write_text(BROKEN_PLUGIN)
    argv = ["compare", "--case", str(path), "--impl", f"mine={plugin}:Mine"]
    line = _refused([*argv, "--out-dir", str(tmp_path / "out")], capsys)
    assert f"{path}: name must be printable text" in line and "'x\\nVERDICT: PASS'" in line


def test_implementation_names_that_collide_as_modules_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text("from fixed import DsparkDraftSampler as Mine\n")
    bad.write_text(BROKEN_PLUGIN)
    argv = ["compare", "--only", "fixed", "--impl", f"a-b={good}:Mine", "--impl", f"a_b={bad}:Mine"]
    line = _refused([*argv, "--out-dir", str(tmp_path / "out")], capsys)
    assert "--impl names 'a-b' and 'a_b' differ only in '-' against '_'" in line
    assert not (tmp_path / "out").exists()


def _fail_fsync_of(name_part: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.fsync`` reports a full disk for files whose name contains ``name_part``."""
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if name_part in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("failing", ["compare.cases.jsonl", ".compare.json."])
def test_a_full_disk_is_one_line_and_nothing_half_written(
    failing: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    case = tmp_path / "case.json"
    case.write_text(_case_text())
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.json").write_text("previous report\n")
    _fail_fsync_of(failing, monkeypatch)
    # the oracle adds nothing to what is written: only the matrix runs
    argv = ["compare", "--case", str(case), "--no-stats", "--out-dir", str(out)]
    line = _refused(argv, capsys)
    assert "cannot write" in line and "No space left on device" in line
    assert (out / "compare.json").read_text() == "previous report\n"  # kept whole
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary left
    journal = out / "compare.cases.jsonl"
    if journal.exists():  # only whole lines in it
        assert all(json.loads(line) for line in journal.read_text().splitlines())
        assert journal.read_bytes().endswith(b"\n") or not journal.read_bytes()


def test_an_impl_spec_with_a_newline_is_refused_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "x\nVERDICT: PASS.py"  # a file that really exists under that name
    plugin.write_text("raise SystemExit('loaded')\n")
    argv = ["compare", "--only", "fixed", "--impl", f"mine={plugin}"]
    line = _refused([*argv, "--out-dir", str(tmp_path / "out")], capsys)
    assert "--impl must be printable text" in line and "\\nVERDICT: PASS.py" in line
    assert "loaded" not in line
