"""The first screen a person sees: ``--help`` and bad usage answer at once, without
importing torch or the commands that are not run; the verdict opens and closes the
report on the terminal; tables wrap rather than cut, and the checks legend says
which failures are expected."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.cli import COMMANDS
from harness.options import Roles, RunOptions
from harness.pipeline.compare import compare
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.verdicts import full_verdict
from harness.plugins.implementations import builtin_implementations
from harness.render.report import Report, emit_report
from harness.render.sections import Section, Table
from harness.render.verdicts import comparison_sections
from tests.helpers import run_harness

SMALL_CASES = ("folded-sampled/vanilla", "no-anchor/gated/folded")


def _run_harness(*argv: str) -> tuple[int, set[str]]:
    """Exit status of ``python -m harness ARGV`` and every module it imported (read
    from ``-X importtime``, which reports each import on stderr)."""
    run = run_harness(*argv, interpreter_options=("-X", "importtime"))
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in run.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "harness.cli" in imported, run.stderr[-2000:]  # the reading itself works
    return run.returncode, imported


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["--help"], 0),
        (["-h"], 0),
        (["reprot"], 2),  # an unknown command
        (["--no-such-option"], 2),  # the default command, report
        (["--time-limit", "soon"], 2),
        (["compare", "--pair", "legacy"], 2),
        *[([name, "--help"], 0) for name in COMMANDS],
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else str(value),
)
def test_help_and_bad_usage_answer_without_importing_torch(argv: list[str], status: int) -> None:
    code, imported = _run_harness(*argv)
    assert code == status
    assert "torch" not in imported, f"python -m harness {' '.join(argv)} imported torch"


def test_top_level_help_imports_no_command_module() -> None:
    _, imported = _run_harness("--help")
    modules = {f"harness.cli.{name.replace('-', '_')}" for name in COMMANDS}
    assert not modules & imported, sorted(modules & imported)


@pytest.mark.parametrize("ok", [True, False])
def test_the_verdict_is_the_first_and_the_last_line_on_the_screen(
    ok: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = [
        Section("fixed", ok=True, verdict="fixed: clean", text="evidence"),
        Section("legacy", ok=ok, verdict="legacy: as documented", text="more\nevidence"),
    ]
    report = Report(command="report", seed=0, device="cpu", heading="heading", sections=sections)
    holds = emit_report(report, out_dir=tmp_path, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    verdict = f"VERDICT: {'PASS' if ok else 'FAIL'}"
    assert holds is ok
    assert lines[2] == verdict and lines[-1] == verdict
    assert any(line.startswith("written: ") for line in lines[-4:])
    assert (tmp_path / "report.txt").read_text().splitlines()[-1] == verdict


@pytest.fixture(scope="module")
def small_comparison() -> list[dict[str, Any]]:
    """Records of a sampled case (long evidence lists) and a case legacy raises on."""
    cases = [c for c in standard_matrix(seed=0) if c.name in SMALL_CASES]
    assert len(cases) == len(SMALL_CASES)
    return compare(cases, builtin_implementations(), options=RunOptions())


def _tables(sections: list[Section], title: str) -> list[Table]:
    section = next(s for s in sections if s.title.startswith(title))
    return [block for block in section.blocks if isinstance(block, Table)]


def _words(table: Table) -> Counter[str]:
    cells = [*table.header, *(cell for row in table.rows for cell in row)]
    return Counter(word for cell in cells for word in cell.split())


def test_no_table_cuts_a_word_it_wraps_long_cells_instead(
    small_comparison: list[dict[str, Any]],
) -> None:
    sections = comparison_sections(small_comparison, require_coverage=False)
    (ledger,) = _tables(sections, "Divergence ledger")
    record = small_comparison[0]
    for row in ledger.rows:
        name, evidence = row[0], record["ledger"]["evidence"].get(row[0])
        if evidence is not None and name in record["ledger"]["observed"]:
            assert row[2] == f"{record['label']}: {evidence}"  # the whole evidence
    (verdicts,) = _tables(sections, "Verdicts per implementation")
    for row in verdicts.rows:
        assert row[-1] == full_verdict(small_comparison, row[0], None).summary()
    for table in (ledger, verdicts):
        header, _rule, *body = table.render("text").splitlines()
        shown = Counter(word for line in (header, *body) for word in line.split())
        assert shown == _words(table)  # wrapped, nothing cut
        assert max(len(line) for line in body) < 200


@pytest.mark.parametrize("expect_fail", [(), ("reference",)])
def test_the_checks_legend_says_which_failures_are_expected(
    small_comparison: list[dict[str, Any]], expect_fail: tuple[str, ...]
) -> None:
    roles = Roles(expect_fail=expect_fail)
    sections = comparison_sections(small_comparison, require_coverage=False, roles=roles)
    checks = next(s for s in sections if s.title == "Checks per implementation")
    (note,) = [b for b in checks.blocks if isinstance(b, str) and "expected to fail" in b]
    named = note.split(";")[0]
    assert "legacy (buggy side of the pair with fixed, held to the divergence ledger)" in named
    assert ("reference (expected to fail" in named) == bool(expect_fail)
    assert "fixed (" not in named
