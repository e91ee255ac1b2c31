"""One function of a package's files loaded alone (``harness.upstream.loaders.wheel_functions``),
on a package of our own written to ``tmp_path``: its globals bound from the same file, from
other files of the package, from real imports and from answers; anything else refused
before it runs; nothing imported into ``sys.modules``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.upstream.loaders.wheel_functions import UnresolvedName, WheelFunctions

PACKAGE = "fakepkg_wheel_functions"

LAWS = """
from __future__ import annotations

import math as m
from collections import OrderedDict

from fakepkg_wheel_functions.helpers import double
from fakepkg_wheel_functions.platform import on_accelerator

raise RuntimeError("the module's top never runs")

if on_accelerator():
    kernel = object()
else:
    kernel = None


def halve(x: float) -> float:
    return x / 2


def law(x: float) -> float:
    return m.sqrt(double(halve(x))) + len(OrderedDict(a=1))


def with_kernel(x: float) -> object:
    return kernel if kernel is not None else -x
"""

HELPERS = """
def double(x):
    return 2 * x
"""

PLATFORM = """
import torch  # a module the package imports at its top; the loaded functions never do


def on_accelerator():
    return torch.cuda.is_available()
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('no __init__ runs')\n")
    (package / "laws.py").write_text(LAWS)
    (package / "helpers.py").write_text(HELPERS)
    (package / "platform.py").write_text(PLATFORM)
    return tmp_path


def test_a_function_is_bound_to_its_files_definitions_imports_and_the_packages_other_files(
    root: Path,
) -> None:
    law = WheelFunctions(root, package=PACKAGE).function(f"{PACKAGE}.laws", "law")
    assert law(64.0) == 8.0 + 1  # sqrt(2 * (64 / 2)) + len(one item)
    assert law.__code__.co_filename == str(root / PACKAGE / "laws.py")
    assert not [name for name in sys.modules if name.startswith(PACKAGE)]


def test_a_name_its_file_binds_by_code_that_does_not_run_is_refused_in_one_line(
    root: Path,
) -> None:
    with pytest.raises(UnresolvedName) as refused:
        WheelFunctions(root, package=PACKAGE).function(f"{PACKAGE}.laws", "with_kernel")
    assert str(refused.value).count("\n") == 0
    assert f"{PACKAGE}.laws.with_kernel reads 'kernel'" in str(refused.value)
    assert "answer it" in str(refused.value)


def test_an_answer_binds_such_a_name(root: Path) -> None:
    loaded = WheelFunctions(root, package=PACKAGE, answers={"kernel": None})
    assert loaded.function(f"{PACKAGE}.laws", "with_kernel")(3.0) == -3.0


def test_a_missing_function_or_file_is_named(root: Path) -> None:
    loaded = WheelFunctions(root, package=PACKAGE)
    with pytest.raises(UnresolvedName, match="defines no top-level function 'absent'"):
        loaded.function(f"{PACKAGE}.laws", "absent")
    with pytest.raises(UnresolvedName, match="no file"):
        loaded.function(f"{PACKAGE}.nowhere", "law")


@pytest.mark.parametrize(
    "damage", [b"def law(x:\n", b"\xff\xfe\x00 not text", b"x = 1\x00\n"], ids=str
)
def test_a_file_that_cannot_be_parsed_is_refused_in_one_line(root: Path, damage: bytes) -> None:
    """A truncated, binary or NUL-bearing file (a damaged wheel): one line naming it."""
    (root / PACKAGE / "laws.py").write_bytes(damage)
    with pytest.raises(UnresolvedName, match="cannot be parsed") as refused:
        WheelFunctions(root, package=PACKAGE).function(f"{PACKAGE}.laws", "law")
    assert "\n" not in str(refused.value) and "laws.py" in str(refused.value)
