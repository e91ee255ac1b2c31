"""The README and the docs agree with the code: the commands, their options, and the
sections of ``docs/design.md`` that code and tests cite."""

from __future__ import annotations

import argparse
import re

from harness.cli import COMMANDS, build_parser
from tests.helpers import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
USAGE = (REPO_ROOT / "docs" / "usage.md").read_text()  # the README's second half
DESIGN = (REPO_ROOT / "docs" / "design.md").read_text()
SOURCES = [
    path
    for folder in ("harness", "reference", "legacy", "fixed", "tests", "docs")
    for path in sorted((REPO_ROOT / folder).rglob("*"))
    if path.suffix in (".py", ".md") and path.is_file()
]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_readme_command_table_lists_exactly_the_commands() -> None:
    table = USAGE[USAGE.index("| command | what it does |") :].split("\n\n")[0]
    listed = {re.match(r"\| `([\w-]+)", row).group(1) for row in table.splitlines()[2:]}  # type: ignore[union-attr]
    assert listed == set(COMMANDS)
    assert set(_subparsers()) == set(COMMANDS)


def test_every_option_the_readme_names_exists() -> None:
    options = {
        flag
        for sub in _subparsers().values()
        for action in sub._actions
        for flag in action.option_strings
    }
    plugin = (REPO_ROOT / "harness" / "pytest_plugin.py").read_text()
    options |= set(re.findall(r'"(--dspark-[a-z-]+)"', plugin))  # the pytest plugin's own
    for script in sorted((REPO_ROOT / "scripts").glob("*.py")):  # the scripts' own
        options |= set(re.findall(r'^\s*"(--[a-z][a-z-]+)",$', script.read_text(), re.M))
        options |= set(re.findall(r'add_argument\("(--[a-z][a-z-]+)"', script.read_text()))
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", README + USAGE))
    other_tools = {
        "--benchmark-compare",
        "--benchmark-compare-fail",
        "--index-url",
        "--no-index",
        "--no-deps",  # pip's, for the upstream package
    }
    assert named - other_tools <= options, sorted(named - other_tools - options)


def test_the_own_environment_install_uses_the_constraints_file() -> None:
    """Without it, pip pulls an unpinned (multi-GB CUDA) torch; only the GPU section,
    whose torch is installed first on purpose, installs without it."""
    own = USAGE[USAGE.index("In your own environment") : USAGE.index("## What the report")]
    installs = re.findall(r"`(pip install [^`]+)`", own)
    assert installs, own
    for command in installs:
        assert "-c constraints.txt" in command, command


def test_cited_design_sections_exist() -> None:
    headings = set(re.findall(r"^## (.+)$", DESIGN, flags=re.MULTILINE))
    cited = {
        match
        for path in SOURCES
        for match in re.findall(r'docs/design\.md``?, "([^"]+)"', path.read_text())
    }
    assert cited, "nothing cites docs/design.md"
    assert cited <= headings, sorted(cited - headings)


def test_every_file_the_docs_name_exists() -> None:
    docs = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    named = {
        (doc.name, path)
        for doc in docs
        for path in re.findall(
            r"`((?:harness|reference|legacy|fixed|tests|scripts)/[\w/.]+)", doc.read_text()
        )
    }
    missing = sorted(
        (doc, path) for doc, path in named if not (REPO_ROOT / path.split("::")[0]).exists()
    )
    assert not missing, missing
