"""Every command's ``--help`` opens with what the command is for and examples that
parse as written, all from the one table of commands (``harness.cli.COMMAND_TABLE``)."""

from __future__ import annotations

import shlex

import pytest

from harness.cli import COMMAND_TABLE, COMMANDS, build_parser, main
from harness.cli.exit_codes import ExitCode


def _help(name: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main([name, "--help"]) == ExitCode.OK
    return capsys.readouterr().out


@pytest.mark.parametrize("name", COMMANDS)
def test_each_help_opens_with_its_description_and_examples(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = COMMAND_TABLE[name]
    text = _help(name, capsys)
    opening = text.split("\n\n")[1:3]  # after the usage: the description, then the examples
    assert " ".join(opening[0].split()) == spec.description
    assert opening[1].splitlines()[1:] == [f"  {example}" for example in spec.examples]
    assert spec.examples, f"{name} has no example"


@pytest.mark.parametrize(
    ("name", "example"),
    [(name, example) for name, spec in COMMAND_TABLE.items() for example in spec.examples],
)
def test_each_example_parses_as_its_command(name: str, example: str) -> None:
    argv = shlex.split(example)
    assert argv[:3] == ["python", "-m", "harness"], example
    args = build_parser(with_options=[name]).parse_args(argv[3:])
    assert args.command == name


def test_the_versions_help_names_every_version_it_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = " ".join(_help("versions", capsys).split())
    assert "sglang 0.5.23" in text and "vLLM 0.33" in text


def test_repro_says_its_file_is_the_only_thing_it_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = " ".join(_help("repro", capsys).split())
    assert "--out-dir OUT_DIR not written: repro writes only its --out FILE" in text
    assert "where report files are written" not in text
