"""The first screen a person sees: ``--help`` and bad usage answer at once, without
importing torch or the commands that are not run (a bad option value in one line,
with the closest name where one was mistyped); the verdict opens and closes the
report on the terminal; tables wrap rather than cut, and the checks legend says
which failures are expected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness.cli import COMMANDS
from harness.options import Roles, RunOptions
from harness.pipeline.compare import compare
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.verdicts import implementation_verdict
from harness.plugins.implementations import builtin_implementations
from harness.render.report import Report, emit_report
from harness.render.sections import Section, Table
from harness.render.verdicts import comparison_sections
from tests.helpers import REPO_ROOT, judged_records, run_harness

SMALL_CASES = ("folded-sampled/vanilla", "no-anchor/gated/folded")
# a bad option value -> (the command line, the start of its one error line)
BAD_VALUES = {
    "device": (["report", "--device", "tpu"], "--device must be 'cpu' or 'cuda[:N]'"),
    "seed": (["report", "--seed", "-1"], "--seed must be an integer in [0, 2^62)"),
    "time-limit": (["compare", "--time-limit", "-1"], "--time-limit must be a finite number"),
    "max-memory": (["report", "--max-memory", "lots"], "--max-memory: expected a size"),
    "verifiers": (
        ["compare", "--verifiers", "chian"],
        "--verifiers: unknown verifier 'chian'; did you mean chain? expected",
    ),
    "verifiers-without-oracle": (
        ["compare", "--no-stats", "--verifiers", "chain"],
        "--verifiers names the statistical oracle's verifiers, and --no-stats skips",
    ),
    "only": (
        ["compare", "--only", "fixd"],
        "--only: unknown built-in implementation(s) ['fixd']; did you mean fixed? expected",
    ),
    "pair": (
        ["compare", "--pair", "legacy,fixd"],
        "--pair names implementations not in the comparison: ['fixd']; did you mean fixed?",
    ),
    "impl-form": (["compare", "--impl", "broken"], "--impl must look like NAME=module:Class"),
    "impl-name": (["report", "--impl", "fixed=x:Y"], "--impl name 'fixed' is taken"),
    "case-missing": (["compare", "--case", "missing.json"], "--case missing.json: cannot read"),
    "require": (["report", "--require", "losless"], "argument --require: invalid choice"),
    "command": (["reprot"], "unknown command reprot; did you mean report?"),
    "stats-vocab": (["stats", "--vocab", "1"], "stats --vocab must be >= 2"),
    "stats-memory": (["stats", "--rows", str(10**12)], "the statistical oracle run needs"),
    "work-repeats": (["work", "--repeats", "0"], "--repeats must be >= 1"),
    "scan-triples": (["scan", "--triples", "0"], "--triples must be a positive integer"),
    "scan-dtypes": (
        ["scan", "--dtypes", "float32,bf16"],
        "--dtypes: unknown dtype(s) ['bf16']; did you mean bfloat16? expected",
    ),
}
# Every refusal in one process (the test process has torch loaded): each one's exit
# code, its stderr and whether torch was imported by then; last, that the probe sees
# torch once a case is read.
PROBE = """
import contextlib, io, json, sys
from harness.cli import main
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    print(json.dumps([code, err.getvalue(), "torch" in sys.modules]))
import harness.case
print(json.dumps("torch" in sys.modules))
"""


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


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_top_level_help_imports_no_command_module() -> None:
    _, imported = _run_harness("--help")
    modules = {f"harness.cli.{name.replace('-', '_')}" for name in COMMANDS}
    assert not modules & imported, sorted(modules & imported)


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, bool]]:
    cwd = tmp_path_factory.mktemp("bad-usage")
    argvs = [[*argv, "--out-dir", str(cwd / "out")] for argv, _ in BAD_VALUES.values()]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argvs)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    *lines, torch_seen = done.stdout.splitlines()
    assert len(lines) == len(BAD_VALUES) and json.loads(torch_seen) is True, done.stderr
    assert not (cwd / "out").exists()  # refused before anything was written
    return {name: tuple(json.loads(line)) for name, line in zip(BAD_VALUES, lines, strict=True)}


@pytest.mark.e2e
@pytest.mark.parametrize("name", BAD_VALUES)
def test_a_bad_option_value_is_one_line_and_exit_2_without_torch(
    name: str, refusals: dict[str, tuple[int, str, bool]]
) -> None:
    code, err, torch_loaded = refusals[name]
    message = BAD_VALUES[name][1]
    assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not torch_loaded, f"refusing {BAD_VALUES[name][0]} imported torch"


@pytest.mark.parametrize("ok", [True, False])
def test_the_verdict_is_the_first_and_the_last_line_on_the_screen(
    ok: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = [
        Section("fixed", ok=True, verdict="fixed: clean", text="evidence"),
        Section("legacy", ok=ok, verdict="legacy: as documented", text="more\nevidence"),
    ]
    report = Report(
        command="report", seed=0, device="cpu", heading="heading", ok=ok, sections=sections
    )
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
    sections = comparison_sections(judged_records(small_comparison))
    (ledger,) = _tables(sections, "Divergence ledger")
    record = small_comparison[0]
    for row in ledger.rows:
        name, evidence = row[0], record["ledger"]["evidence"].get(row[0])
        if evidence is not None and name in record["ledger"]["observed"]:
            assert row[2] == f"{record['label']}: {evidence}"  # the whole evidence
    (verdicts,) = _tables(sections, "Verdicts per implementation")
    for row in verdicts.rows:
        assert row[-1] == implementation_verdict(small_comparison, row[0]).summary()
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
    sections = comparison_sections(judged_records(small_comparison, roles=roles))
    checks = next(s for s in sections if s.title == "Checks per implementation")
    (note,) = [b for b in checks.blocks if isinstance(b, str) and "expected to fail" in b]
    named = note.split(";")[0]
    assert "legacy (buggy side of the pair with fixed, held to the divergence ledger)" in named
    assert ("reference (expected to fail" in named) == bool(expect_fail)
    assert "fixed (" not in named
