"""The sglang loader: the installed package's own DSpark modules, only listed stand-ins."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.upstream.loaders import sglang_loader
from harness.upstream.loaders.sglang_loader import (
    EXPORTS,
    STAND_INS,
    BoundaryUsed,
    load_sglang,
    unavailable_reason,
)

upstream = pytest.mark.upstream


def test_without_the_package_the_reason_is_one_line() -> None:
    reason = unavailable_reason()
    if reason is not None:  # the default environment: no sglang
        assert "\n" not in reason and "sglang" in reason


@upstream
def test_every_export_is_defined_in_the_installed_package_files() -> None:
    loaded = load_sglang()
    for name, module_name in EXPORTS.items():
        module = loaded.modules[module_name]
        expected = loaded.root.parent.joinpath(*module_name.split(".")).with_suffix(".py")
        assert Path(module.__file__ or "") == expected
        assert getattr(loaded, name).__module__ == module_name


@upstream
def test_loading_leaves_no_sglang_in_sys_modules() -> None:
    load_sglang()
    assert [name for name in sys.modules if name.split(".")[0] == "sglang"] == []


@upstream
def test_no_package_init_runs() -> None:
    finder = sglang_loader._DsparkFinder(load_sglang().root)
    for package in ("sglang", "sglang.srt.utils", "sglang.kernels"):
        spec = finder.find_spec(package)
        assert spec is not None and spec.loader is finder  # a bare package, never __init__.py
        module = finder.create_module(spec)
        assert "__version__" not in vars(module) and "LazyImport" not in vars(module)


@upstream
def test_a_stand_in_raises_on_every_use() -> None:
    heads = load_sglang().modules["sglang.srt.models.dspark"]
    # DSparkDraftModel subclasses the stand-in DFlashDraftModel: building one is a use.
    with pytest.raises(BoundaryUsed, match=r"sglang\.srt\.models\.dflash\.DFlashDraftModel"):
        heads.DSparkDraftModel(None)
    gather = heads.make_vocab_gather
    with pytest.raises(BoundaryUsed, match="called"):
        gather(None)
    with pytest.raises(BoundaryUsed, match=r"asked for \.world_size"):
        _ = gather.world_size
    with pytest.raises(BoundaryUsed, match="tested for truth"):
        bool(gather)


@upstream
def test_every_listed_stand_in_is_imported_by_the_version() -> None:
    loaded = load_sglang()
    imported = {
        value._boundary
        for module in loaded.modules.values()
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, sglang_loader.BoundaryStandIn)
        and value is not sglang_loader.BoundaryStandIn
    }
    listed = {f"{module.name}.{name}" for module in STAND_INS for name in module.names}
    assert imported == listed  # no stand-in kept for a name the version no longer imports


@upstream
def test_an_unlisted_sglang_import_fails_naming_the_module() -> None:
    finder = sglang_loader._DsparkFinder(load_sglang().root)
    with pytest.raises(ImportError, match=r"sglang\.srt\.server_args"):
        finder.find_spec("sglang.srt.server_args")


@upstream
def test_the_installed_package_is_the_supported_version() -> None:
    assert unavailable_reason() is None
    assert load_sglang().version == sglang_loader.SUPPORTED_VERSION
