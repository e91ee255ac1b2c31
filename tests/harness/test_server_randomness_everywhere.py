"""The drafter and the verifier on the server's own randomness, on every path: a drafter
whose noise is what the verifier draws next (its acceptance uniforms, its residual
draw) is NOT lossless in ``report``, ``compare --require lossless``, the Python API and
the pytest plugin twice over: the exact per-call check on torch's stream
(``torch_stream_shared_with_verifier``) fails it, and the oracle, run on the shared
plumbing by default, rejects it; a drafter sharing the stream at disjoint offsets is
lossless. ``--verifier-noise independent`` (the control) takes the oracle off the shared
plumbing, where it cannot see the couplings, and the verdicts say which plumbing was
used. ``report`` is held to it in the same run as another defect only the oracle sees
(``tests/harness/pipeline/test_verdicts_statistical.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.verdicts import INDEPENDENT_STREAMS
from harness.testing import assert_lossless, check_sampler
from tests.helpers import REPO_ROOT, lossless_compare_argv

CASES = [c for c in standard_matrix() if c.name in ("folded-sampled/vanilla", "greedy-fold/gated")]
MODULE = "tests.plugins.shared_stream_defects"
DEFECTS = {
    "uniforms": f"{MODULE}:VerifierUniformsSampler",
    "residual": f"{MODULE}:ResidualDrawSampler",
}
CORRECT = f"{MODULE}:ReservedBlockInverseCdfSampler"
EXACT = "torch_stream_shared_with_verifier"


# -- the option ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["stats", "compare", "report", "versions"])
def test_verifier_noise_of_another_name_is_bad_usage_before_any_work(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [command, "--verifier-noise", "together", "--out-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "--verifier-noise: expected one of shared, independent, got 'together'" in (
        capsys.readouterr().err
    )
    assert not list(tmp_path.iterdir())


# -- the Python API ----------------------------------------------------------------------------
@pytest.mark.parametrize("spec", list(DEFECTS.values()), ids=list(DEFECTS))
def test_assert_lossless_rejects_a_drafter_reading_the_verifiers_stream(spec: str) -> None:
    verdict = check_sampler(spec, cases=CASES, require="lossless")
    # the exact check, on the case's call and on each replay of its life
    failures = [f for f in verdict.failures if f.lossless]
    assert {f.check for f in failures} == {EXACT, "life_replays"}
    assert all(EXACT in f.detail for f in failures if f.check == "life_replays")
    assert verdict.statistical.ran and verdict.statistical.rejected is True  # and the oracle
    with pytest.raises(AssertionError, match=rf"NOT lossless: {EXACT}: the call's draw 1"):
        assert_lossless(spec, cases=CASES, stats=False)


def test_a_drafter_sharing_the_stream_at_disjoint_offsets_is_lossless() -> None:
    verdict = assert_lossless(CORRECT, cases=CASES)
    assert verdict.statistical.ran and verdict.statistical.rejected is False
    assert INDEPENDENT_STREAMS not in verdict.summary()  # the server's own plumbing


def test_a_verdict_on_independent_streams_says_so_in_its_summary_and_json() -> None:
    verdict = check_sampler(CORRECT, cases=CASES, require="lossless", verifier_noise="independent")
    assert verdict.ok and verdict.statistical.ran
    assert verdict.summary().endswith(f"(statistical oracle with {INDEPENDENT_STREAMS})")
    assert f"[{INDEPENDENT_STREAMS}]" in verdict.statistical_line()
    assert verdict.to_json()["statistical"]["independent_streams"] is True


# -- compare and report ------------------------------------------------------------------------
def test_compare_require_lossless_judges_on_the_servers_own_randomness(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = lossless_compare_argv(tmp_path, CASES, {**DEFECTS, "reserved": CORRECT})
    argv += ["--verifiers", "chain"]
    assert main([*argv, "--quiet", "--long", "--out-dir", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "verifier noise: shared (the server's own randomness" in " ".join(out.split())
    assert INDEPENDENT_STREAMS not in out
    judgement = json.loads((tmp_path / "out" / "compare.json").read_text())["judgement"]
    assert judgement["oracle"]["verifier_noise"] == "shared"
    assert all(judgement["oracle"]["shared_noise"].values())
    verdicts = judgement["implementations"]
    for name in DEFECTS:
        assert verdicts[name]["lossless"] is False
        assert verdicts[name]["statistical"]["rejected"] is True
    assert verdicts["reserved"]["lossless"] is True

    control = ["--verifier-noise", "independent", "--quiet", "--out-dir", str(tmp_path / "ind")]
    assert main([*argv, *control]) == 1  # the exact check does not depend on the oracle's
    judgement = json.loads((tmp_path / "ind" / "compare.json").read_text())["judgement"]
    assert judgement["oracle"]["verifier_noise"] == "independent"
    verdicts = judgement["implementations"]
    assert not any(verdicts[name]["statistical"]["rejected"] for name in DEFECTS)
    assert not any(verdicts[name]["lossless"] for name in DEFECTS)
    assert verdicts["reserved"]["lossless"] is True
    sections = json.loads((tmp_path / "ind" / "compare.json").read_text())["sections"]
    # the lossless verdict rests on the oracle, so its summary says on what streams; the
    # defects' verdicts rest on the exact check, whose summary names it instead
    assert INDEPENDENT_STREAMS in verdicts["reserved"]["summary"]
    for name in [*DEFECTS, "reserved"]:  # each oracle line and its JSON says so
        assert verdicts[name]["statistical"]["independent_streams"]
        line = next(s["verdict"] for s in sections if s["verdict"].startswith(f"{name}: "))
        assert f"[{INDEPENDENT_STREAMS}]" in line


# -- the pytest plugin -------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_pytest_plugin_rejects_a_drafter_reading_the_verifiers_residual_draw(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    select = ["-m", "dspark", "-k", "folded-sampled/vanilla or statistical-oracle"]
    impl = f"residual={DEFECTS['residual']}"
    result = pytester.runpytest_subprocess(
        "-p", "harness.pytest_plugin", "-p", "no:cacheprovider", *select,
        "--dspark-impl", impl, "--dspark-require", "lossless",
    )  # fmt: skip
    result.assert_outcomes(failed=3)  # the exact check on both cases, and the oracle
    result.stdout.fnmatch_lines(
        [
            "residual is not lossless on folded-sampled/vanilla:",
            f"{EXACT} [[]lossless]: the call's draw 1 *",
            "residual is NOT lossless: statistical oracle REJECTED it (family p=*; carried by *",
        ]
    )
