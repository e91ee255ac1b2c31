"""The README's first screen holds: its two commands name tox environments that run the
main job and the tests, its Python example runs as written from any directory and says
what it claims, and the sampler it shows is ``harness/examples/my_sampler.py`` (installed
with the package) to the byte, lossless as it says.
``scripts/time_jobs.py --jobs tox`` runs the two commands on a fresh clone and measures
the times the README states."""

from __future__ import annotations

import configparser
import contextlib
import importlib.util
import io
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from harness.cli import build_parser
from tests.helpers import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
SAMPLER_FILE = REPO_ROOT / "harness" / "examples" / "my_sampler.py"


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_the_two_commands_run_the_report_and_the_tests_through_tox() -> None:
    commands = _blocks(_section("Two commands on a fresh machine"), "sh")
    environments = [shlex.split(c.split("&&")[1])[-1] for c in commands]
    assert environments == ["report", "tests"]
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO_ROOT / "tox.ini")
    assert "python -m harness {posargs}" in tox["testenv:report"]["commands"]
    assert "pytest" in tox["testenv:tests"]["commands"]
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "tox run -e tests" in ci  # CI runs the README's test command
    assert "TIME_" not in README, "a time on the first screen was never measured"


def test_the_python_example_runs_as_written_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (example,) = _blocks(_section("The Python API in ten lines"), "python")
    assert len([line for line in example.splitlines() if line.strip()]) <= 10
    monkeypatch.chdir(tmp_path)  # not the repository: what an installed package has
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", os.getcwd())])
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, "README.md", "exec"), {})
    summary, reason = printed.getvalue().splitlines()
    assert summary.startswith("lossless; not drop-in: ")  # another design: lossless
    assert reason.startswith("teacher_forcing: ")  # the double walk, by its direct check


def test_the_sampler_shown_is_the_file_and_the_command_shown_parses() -> None:
    section = _section("A sampler to copy")
    (shown,) = _blocks(section, "python")
    assert shown == SAMPLER_FILE.read_text()
    (command,) = _blocks(section, "sh")
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "harness"]
    args = build_parser(with_options=[argv[3]]).parse_args(argv[3:])
    module = args.impl[0].split("=", 1)[1].split(":")[0]
    found = importlib.util.find_spec(module)  # a module of the package: any directory
    assert found is not None and found.origin == str(SAMPLER_FILE)
