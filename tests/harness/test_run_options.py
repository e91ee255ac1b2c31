"""The options of a run are built once from the command line, with one default each:
the command line's defaults are ``RunOptions``' own, and every run option given on the
command line lands in the one value."""

from __future__ import annotations

import pytest

from harness.cli import build_parser
from harness.cli.emit import UsageError
from harness.cli.options import run_options
from harness.options import DEFAULT_OPTIONS, Roles, RunOptions
from harness.pipeline.check_result import Tier


def _options(*argv: str, command: str = "compare") -> RunOptions:
    args = build_parser(with_options=[command]).parse_args([command, *argv])
    return run_options(args)


@pytest.mark.parametrize("command", ["report", "compare", "stats", "repro"])
def test_the_command_line_defaults_are_the_run_options_defaults(command: str) -> None:
    assert _options(command=command) == DEFAULT_OPTIONS


def test_every_run_option_on_the_command_line_lands_in_the_one_value() -> None:
    given = _options(
        "--seed=7",
        "--time-limit=5",
        "--isolate",
        "--pair=old,new",
        "--expect-fail=old",
        "--require=lossless",
        "--max-memory=1G",
        "--no-stats",
        "--resume",
        "--verifiers=chain",
        "--jobs=3",
    )
    assert given == RunOptions(
        seed=7,
        time_limit_s=5.0,
        isolate=True,
        roles=Roles(pair=("old", "new"), expect_fail=("old",), require=Tier.LOSSLESS),
        max_memory_bytes=1 << 30,
        stats=False,
        verifiers=("chain",),
        resume=True,
        jobs=3,
    )


def test_a_bad_memory_limit_is_refused_with_the_option_named() -> None:
    with pytest.raises(UsageError, match="--max-memory"):
        _options("--max-memory=lots")


def test_the_progress_sink_is_no_option_of_the_outcome() -> None:
    lines: list[str] = []
    assert RunOptions(time_limit_s=3.0, progress=lines.append) == RunOptions(time_limit_s=3.0)
