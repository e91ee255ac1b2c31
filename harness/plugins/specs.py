"""The texts that name implementations, read without loading anything (so without
torch): ``--only NAMES`` and the ``NAME=TARGET`` form of an ``--impl`` spec;
``harness.plugins.implementations`` loads what they name."""

from __future__ import annotations

from harness.defaults import BUILTIN_NAMES
from harness.plugins.errors import ImplementationError

NO_BUILTINS = "none"  # ``--only none``: no built-in, only the ``--impl`` samplers
FILE_FORM = "NAME=path/to/module.py[:Class][@era]"
MODULE_FORM = "NAME=module:Class or NAME=module:function"


def parse_names(text: str) -> list[str]:
    """``"reference, fixed"`` -> ``["reference", "fixed"]``; ``"none"`` -> ``[]``."""
    if text.strip() == NO_BUILTINS:
        return []
    return [name.strip() for name in text.split(",") if name.strip()]


def bad_form(text: str) -> str:
    """What an ``--impl`` spec of the wrong form is told."""
    return (
        f"--impl must look like NAME=module:Class, got {text!r} "
        f"(or NAME=module:function, {FILE_FORM})"
    )


def split_name(text: str) -> tuple[str, str]:
    """``(name, target)`` of printable ``NAME=TARGET`` text, both non-empty."""
    if not text.isprintable():  # it is quoted in reports: a newline could forge a line
        raise ImplementationError(
            f"--impl must be printable text (no newline, tab or other control character), "
            f"got {text!r}"
        )
    name, sep, target = text.partition("=")
    if not sep or not name or not target:
        raise ImplementationError(bad_form(text))
    return name, target


def check_impl_name(name: str) -> None:
    """Refuse an ``--impl`` name that is not a plain word or is a built-in's."""
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ImplementationError(f"--impl name must be letters, digits, '-' or '_', got {name!r}")
    if name in BUILTIN_NAMES:
        raise ImplementationError(f"--impl name {name!r} is taken by a built-in implementation")
