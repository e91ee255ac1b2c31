"""Wheel-shaped zips of OUR OWN test modules, served to pip from a local folder.

A release's wheel is a zip holding the package's files and a ``.dist-info``; these hold
one sampler file of ours at the path a release keeps its sampler, so the fetch, the
extraction, the contract check and the judgement run end to end with no network:
``pip download`` reads the folder through ``PIP_FIND_LINKS`` with ``PIP_NO_INDEX``.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from harness.upstream.releases.eras import era_of

UPSTREAM = Path(__file__).resolve().parents[2] / "plugins" / "upstream"
BEFORE_FIX = UPSTREAM / "dspark_before_fix.py"  # the harness's constructor: 0.5.17-0.5.18
AFTER_FIX = UPSTREAM / "dspark_after_fix.py"  # with tp_sync: 0.5.19-0.5.21
SHAPE_0_5_16 = UPSTREAM / "dspark_draft_0_5_16_shape.py"  # the 0.5.16 contract
SHAPE_FILE = "sglang/srt/speculative/dspark_components/dspark_draft.py"  # where 0.5.16 keeps it


def build_wheel(folder: Path, *, package: str, version: str, files: dict[str, str]) -> Path:
    """``PACKAGE-VERSION-py3-none-any.whl`` in ``folder`` with ``files`` and metadata."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{package}-{version}-py3-none-any.whl"
    info = f"{package}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


def sampler_wheel(folder: Path, *, version: str, source: Path) -> Path:
    """An sglang-shaped wheel whose sampler module is ``source`` (one of ours)."""
    era = era_of("sglang", version)
    assert era is not None
    return build_wheel(
        folder, package="sglang", version=version, files={era.sampler_file: source.read_text()}
    )


def serve_folder(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """pip reads packages from ``folder`` only (no index, no network)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
