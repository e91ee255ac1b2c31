"""The versions table: the before-fix module, the after-fix module and sglang 0.5.23 in one
run, each with its verdicts, work per call, time against fixed, the statistical verdicts
under both verifiers and its findings."""

from __future__ import annotations

import re

import pytest

from harness.cli import main
from harness.upstream.loaders import vllm_loader
from harness.upstream.rejection import BLOCKWISE_REJECTION
from reference.verifier import CHAIN_VERIFIER

pytestmark = pytest.mark.upstream


@pytest.fixture(scope="module")
def rows():  # type: ignore[no-untyped-def]
    from harness.releases.versions import collect_versions

    versions = collect_versions(scan_triples_per_point=1 << 14, repeats=1)
    return {row.name: row for row in versions.rows}


def test_the_before_fix_module_is_not_lossless_by_its_double_walk(rows) -> None:  # type: ignore[no-untyped-def]
    before = rows["before-fix"]
    assert not before.lossless and "teacher_forcing" in before.why
    assert before.work.walks == 2 and before.work.counter_advances is None
    for verifier in (CHAIN_VERIFIER.name, BLOCKWISE_REJECTION.name):
        assert before.statistics[verifier].rejected


def test_the_after_fix_module_is_lossless_and_drop_in(rows) -> None:  # type: ignore[no-untyped-def]
    after = rows["after-fix"]
    assert after.lossless and after.drop_in and not after.findings
    assert after.work.walks == 1 and after.work.torch_launches == 4  # gamma exponential_ draws
    assert all(result.passed for result in after.statistics.values())


def test_the_release_passes_the_oracle_but_the_scan_finds_a_masked_draft(rows) -> None:  # type: ignore[no-untyped-def]
    release = rows["sglang-0.5.23"]
    assert release.work.walks == 1
    assert release.work.torch_launches == 0 and release.work.counter_advances == 1
    assert all(result.passed for result in release.statistics.values())
    assert not release.lossless and release.why.startswith("NOT lossless: support scan")
    assert any(f.startswith("support scan:") for f in release.findings)
    # its verify target is not its own sampler's law (harness.releases.laws)
    assert any(f.startswith("verify target law:") and "min-p" in f for f in release.findings)
    assert release.time_ratio is not None and release.time_ratio > 0


def test_the_versions_command_writes_its_table(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    args = ["versions", "--scan-triples", "1024", "--repeats", "1", "--quiet"]
    assert main([*args, "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "before-fix NOT lossless; after-fix lossless and drop-in" in out
    verdict = " ".join(out.split())  # the verdict line wraps at the terminal's width
    assert re.search(
        r"sglang-0\.5\.23 [A-Za-z -]+ \(judged on sglang 0\.5\.23's own randomness\)", verdict
    )
    assert (tmp_path / "versions.md").exists()
    if vllm_loader.unavailable_reason() is not None:  # its rows are absent, and say why
        assert "absent: vllm-0.33-dense, vllm-0.33-topk4: not run here: " in out
