"""Command-line options that several sub-commands share, defined once."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from harness.plugins.implementations import BUILTIN_IMPLEMENTATIONS

T = TypeVar("T", int, float)


def add_impl_option(parser: argparse.ArgumentParser, *, verb: str = "add") -> None:
    """``--impl NAME=TARGET`` (repeatable): a class or block sampler function, by module or file."""
    parser.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help=(
            f"{verb} this sampler (repeatable). TARGET is module:Class, path/to/module.py[:Class] "
            "(default class DsparkDraftSampler; sglang.* imports are supplied when no sglang "
            "is installed), or module:function / file.py:function for a block sampler "
            "function; see docs/plugins.md"
        ),
    )


def add_selection_options(parser: argparse.ArgumentParser, *, verb: str) -> None:
    """``--case FILE`` (repeatable; default the standard matrix), ``--only NAMES`` and
    ``--impl``: which cases and which implementations a command runs."""
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a case JSON file (repeatable); default: the standard matrix",
    )
    parser.add_argument(
        "--only",
        default=",".join(BUILTIN_IMPLEMENTATIONS),
        metavar="NAMES",
        help=f"built-in implementations to {verb}, comma-separated (default: all three)",
    )
    add_impl_option(parser, verb=f"also {verb}")


def comma_separated(
    convert: Callable[[str], T], *, what: str, minimum: T | None = None
) -> Callable[[str], tuple[T, ...]]:
    """An argparse ``type`` for ``"a,b,c"``: at least one value, each converted and, with
    ``minimum``, at least that."""

    def parse(text: str) -> tuple[T, ...]:
        try:
            values = tuple(convert(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} must be comma-separated numbers, got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"at least one {what} value is needed")
        if minimum is not None and any(v < minimum for v in values):
            raise argparse.ArgumentTypeError(f"{what} must be >= {minimum}, got {text!r}")
        return values

    return parse
