"""Released versions and their wheels: the selection, pip's fetch into a cache, the
extraction, and the era table's contract check, all on wheels of our own modules
served from a local folder (no network)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from harness.upstream.releases.eras import (
    ERAS,
    contract_differences,
    era_of,
    known_versions,
    unknown_contract,
)
from harness.upstream.releases.wheels import (
    NotFetched,
    cached_wheel,
    extract,
    fetch,
    index_versions,
    select,
)
from tests.harness.upstream.fake_wheels import AFTER_FIX, BEFORE_FIX, build_wheel, serve_folder

KNOWN = ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")


@pytest.mark.parametrize(
    ("selection", "chosen"),
    [
        (("0.5.19", "0.5.21-0.5.23"), ("0.5.19", "0.5.21", "0.5.22", "0.5.23")),
        (("0.5.23", "0.5.16"), ("0.5.16", "0.5.23")),
        (("0.5.99",), ("0.5.99",)),  # named, not known: kept, and judged "not judged"
        (("0.5.18-0.5.17",), ()),
    ],
)
def test_a_selection_names_versions_and_ranges_of_known_ones(
    selection: tuple[str, ...], chosen: tuple[str, ...]
) -> None:
    assert select(selection, known=KNOWN) == chosen


def test_the_era_table_lists_every_release_once_in_order() -> None:
    assert known_versions("sglang") == KNOWN
    assert known_versions("vllm")[0] == "0.25.0" and known_versions("vllm")[-1] == "0.34.0"
    for era in ERAS:
        assert all(era_of(era.package, v) is era for v in era.versions)


def test_a_wheel_is_fetched_once_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = tmp_path / "index"
    build_wheel(index, package="sglang", version="0.5.19", files={"sglang/a.py": "A = 1\n"})
    serve_folder(monkeypatch, index)
    cache = tmp_path / "cache"
    path = fetch("sglang", "0.5.19", cache=cache)
    assert path.parent == cache / "sglang-0.5.19" and path.is_file()
    (index / path.name).unlink()  # the second time it comes from the cache
    assert fetch("sglang", "0.5.19", cache=cache, offline=True) == path
    assert cached_wheel("sglang", "0.5.19", cache=cache) == path


def test_a_wheel_that_cannot_be_fetched_says_pips_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_folder(monkeypatch, tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFetched, match=r"No matching distribution found for sglang==0\.5\.20"):
        fetch("sglang", "0.5.20", cache=tmp_path / "cache")
    with pytest.raises(NotFetched, match=r"offline: not fetched"):
        fetch("sglang", "0.5.20", cache=tmp_path / "cache", offline=True)


def test_the_index_lists_versions_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for version in ("0.5.21", "0.5.9", "0.5.19"):
        build_wheel(tmp_path, package="sglang", version=version, files={"sglang/a.py": ""})
    serve_folder(monkeypatch, tmp_path)
    assert index_versions("sglang") == ("0.5.9", "0.5.19", "0.5.21")


def test_extraction_takes_the_named_folders_only_and_never_site_packages(tmp_path: Path) -> None:
    wheel = build_wheel(
        tmp_path / "c" / "sglang-0.5.19",
        package="sglang",
        version="0.5.19",
        files={"sglang/srt/x.py": "X = 1\n", "sglang/other/y.py": "Y = 2\n"},
    )
    files = extract("sglang", "0.5.19", wheel=wheel, members=("sglang/srt/",))
    assert (files.extracted / "sglang/srt/x.py").read_text() == "X = 1\n"
    assert not (files.extracted / "sglang/other").exists()
    assert files.extracted.is_relative_to(tmp_path)
    # its metadata too, so a module asking importlib.metadata for its version finds it
    assert (files.extracted / "sglang-0.5.19.dist-info/METADATA").is_file()
    found = importlib.metadata.distributions(name="sglang", path=[str(files.extracted)])
    assert [d.version for d in found] == ["0.5.19"]


def _tree(root: Path, relative: str, source: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return root


def test_files_that_fit_their_era_have_no_differences(tmp_path: Path) -> None:
    pr_era = era_of("sglang", "0.5.18")
    fix_era = era_of("sglang", "0.5.19")
    assert pr_era is not None and fix_era is not None
    before = _tree(tmp_path / "b", pr_era.sampler_file, BEFORE_FIX.read_text())
    after = _tree(tmp_path / "a", fix_era.sampler_file, AFTER_FIX.read_text())
    assert contract_differences(pr_era, files=before) == []
    assert contract_differences(fix_era, files=after) == []
    assert contract_differences(pr_era, files=after) == ["constructor adds tp_sync"]


def test_a_version_in_no_era_says_what_differs_from_the_nearest(tmp_path: Path) -> None:
    era = era_of("sglang", "0.5.23")
    assert era is not None
    newer = (
        "class DsparkDraftSampler:\n"
        "    def __init__(self, *, model, gamma, max_bs, device, noise, tp_sync, out=None, "
        "draft_plan=None):\n        pass\n"
        "    def __call__(self, hidden_states, input_ids):\n        pass\n"
        "    def plan(self):\n        pass\n"
    )
    files = _tree(tmp_path, era.sampler_file, newer)
    said = unknown_contract("sglang", "0.5.24", files=files)
    assert "against sglang-0.5.22-0.5.23" in said
    assert "constructor lacks greedy_draft" in said
    assert "constructor adds draft_plan" in said
    assert "lacks stage_sampling_params" in said
    assert "also has plan" in said


def test_a_vllm_release_is_imported_from_its_extracted_folder(tmp_path: Path) -> None:
    """In a process of its own (the release joins ``sys.path`` there): the loader holds the
    release's version, and its modules come from the extracted folder."""
    import subprocess
    import sys

    speculator = tmp_path / "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py"
    speculator.parent.mkdir(parents=True)
    speculator.write_text("class DSparkSpeculator:\n    pass\n")
    script = (
        "import importlib, sys\n"
        "from pathlib import Path\n"
        "from harness.upstream import vllm_loader\n"
        f"vllm_loader.use_release(vllm_loader.VllmRelease(root=Path({str(tmp_path)!r}), "
        "version='0.25.0'))\n"
        "print(vllm_loader.installed_version())\n"
        "print(importlib.import_module(vllm_loader.SPECULATOR_MODULE).__file__)\n"
        "print(vllm_loader.unavailable_reason())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    version, origin, reason = done.stdout.splitlines()
    assert version == "0.25.0"
    assert origin == str(speculator)
    assert "0.33.0 only" not in reason  # the release's version, not the installed one's
