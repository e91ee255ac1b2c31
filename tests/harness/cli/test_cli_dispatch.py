"""The command line's dispatcher: every command lives in one module with ``add_arguments``
and ``command``, ends with an ``ExitCode``, and a mistyped command is named as such."""

from __future__ import annotations

import argparse
import ast
import inspect

import pytest

from harness.cli import COMMAND_TABLE, COMMANDS, command_module, main, validate
from harness.cli.exit_codes import ExitCode


@pytest.mark.parametrize("typo", ["reprot", "stat", "gpu_figures"])
def test_an_unknown_command_is_named_with_the_choices(
    typo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([typo, "--quiet"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"unknown command {typo}; expected one of " + ", ".join(COMMANDS) in err


def test_options_alone_still_mean_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == ExitCode.OK
    assert main(["--no-such-option"]) == ExitCode.USAGE
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


@pytest.mark.parametrize("name", COMMANDS)
def test_each_sub_command_module_owns_its_options_and_command(name: str) -> None:
    module = command_module(name)
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    assert callable(module.command)
    assert (module.__doc__ or "").strip(), f"{module.__name__} says what it owns"


def test_the_shared_checks_name_no_command() -> None:
    # a command's own options are refused by its module's validate(args), not here
    tree = ast.parse(inspect.getsource(validate))
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "command" not in attributes
    assert not imported & {
        f"harness.cli.{module}" for module in (spec.module for spec in COMMAND_TABLE.values())
    }


@pytest.mark.parametrize("name", ["work", "sweep", "graphs", "gpu-figures"])
def test_options_a_command_does_not_honour_are_not_offered(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([name, "--time-limit", "5"]) == ExitCode.USAGE
    assert "unrecognized arguments: --time-limit" in capsys.readouterr().err
