"""The command line's dispatcher: every command lives in one module with ``add_arguments``
and ``command``, ends with an ``ExitCode``, and a mistyped command is named as such."""

from __future__ import annotations

import argparse
import ast
import inspect

import pytest

from harness.cli import COMMAND_TABLE, COMMANDS, command_module, main, validate
from harness.cli.exit_codes import ExitCode


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("reprot", "report"), ("stat", "stats"), ("gpu_figures", "gpu-figures"), ("xyz", None)],
)
def test_an_unknown_command_is_named_with_the_closest_and_the_choices(
    typo: str, meant: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([typo, "--quiet"]) == ExitCode.USAGE
    suggestion = "" if meant is None else f"did you mean {meant}? "
    expected = f"error: unknown command {typo}; {suggestion}expected one of {', '.join(COMMANDS)}"
    assert capsys.readouterr().err == expected + "\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["report", "--require", "losless"],
            "argument --require: invalid choice 'losless'; did you mean lossless? "
            "expected one of lossless, drop-in",
        ),
        (
            ["gpu-figures", "--dtype", "bf16"],
            "argument --dtype: invalid choice 'bf16'; did you mean bfloat16? "
            "expected one of float32, bfloat16, float16",
        ),
        (["report", "--require", "x"], "argument --require: invalid choice 'x'; expected one of "),
    ],
)
def test_a_mistyped_choice_is_one_line_with_the_closest(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


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


@pytest.mark.parametrize("name", COMMANDS)
def test_a_dry_run_checks_the_options_and_runs_nothing(
    name: str, tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def ran(args: argparse.Namespace) -> ExitCode:
        raise AssertionError(f"{name} ran under --dry-run")

    monkeypatch.setattr(command_module(name), "command", ran)
    out_dir = tmp_path / "out"
    assert main([name, "--dry-run", "--quiet", "--out-dir", str(out_dir)]) == ExitCode.OK
    assert capsys.readouterr().out == f"{name}: every option is valid; --dry-run ran nothing\n"
    assert not out_dir.exists()
    assert main([name, "--dry-run", "--seed", "x"]) == ExitCode.USAGE  # still refused
