"""The first screen a person sees: ``--help`` and bad usage answer at once, without
importing torch or the commands that are not run; the verdict opens and closes the
report on the terminal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import COMMANDS
from harness.render.report import emit_report
from harness.render.sections import Section
from tests.helpers import REPO_ROOT, subprocess_env

# Commands whose option defaults (the oracle's configuration, the GPU figures' shape,
# the replay count) are still defined in modules that import torch.
DEFAULTS_BESIDE_TORCH = ("stats", "graphs", "gpu-figures")


def _run_harness(*argv: str) -> tuple[int, set[str]]:
    """Exit status of ``python -m harness ARGV`` and every module it imported (read
    from ``-X importtime``, which reports each import on stderr)."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness", *argv],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=subprocess_env(),
        check=False,
    )
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
        *[([name, "--help"], 0) for name in COMMANDS if name not in DEFAULTS_BESIDE_TORCH],
        *[
            pytest.param(
                [name, "--help"],
                0,
                marks=pytest.mark.xfail(
                    strict=True, reason="its option defaults live beside torch"
                ),
            )
            for name in DEFAULTS_BESIDE_TORCH
        ],
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
    holds = emit_report(
        out_dir=tmp_path,
        as_json=False,
        command="report",
        seed=0,
        device="cpu",
        heading="heading",
        sections=sections,
        cases=[],
        timing={},
    )
    lines = capsys.readouterr().out.splitlines()
    verdict = f"VERDICT: {'PASS' if ok else 'FAIL'}"
    assert holds is ok
    assert lines[2] == verdict and lines[-1] == verdict
    assert any(line.startswith("written: ") for line in lines[-4:])
    assert (tmp_path / "report.txt").read_text().splitlines()[-1] == verdict
