"""One meaning of "lossless" on every path: ``compare`` and the Python API (and, in
tests/harness/test_pytest_plugin.py, the pytest plugin) run the per-call checks and the
statistical oracle at the same defaults; ``report`` calls the same judge
(tests/harness/test_one_judge.py holds that the paths agree).

Two planted defects pass every per-call check, so only the oracle can see them: an
inverse-CDF sampler whose step 1 reuses step 0's uniform (draws not replayable), and a
sampler that is the fixed one bit for bit while a dispatch mode observes it and reuses
its noise when nothing does (the oracle decodes unobserved). Every path rejects both;
the correct designs of tests/plugins/alternative_samplers.py, the inverse-CDF one
among them, pass. Without the oracle, every verdict line says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.pipeline.matrix import standard_matrix
from harness.testing import assert_lossless, check_sampler
from tests.helpers import case_file_args, lossless_compare_argv

CASES = [c for c in standard_matrix() if c.name in ("folded-sampled/vanilla", "greedy-fold/gated")]
DEFECTS = "tests.plugins.oracle_only_defects"
REUSED_UNIFORM = f"{DEFECTS}:ReusedUniformInverseCdfSampler"
OBSERVED_ONLY = f"{DEFECTS}:CorrectOnlyWhenObservedSampler"
ALTERNATIVES = {
    "pre": "tests.plugins.alternative_samplers:PrestagedNoiseSampler",
    "gumbel": "tests.plugins.alternative_samplers:UniformGumbelSampler",
    "multi": "tests.plugins.alternative_samplers:MultinomialSampler",
    "icdf": "tests.plugins.alternative_samplers:InverseCdfSampler",
}
CHECKS_ONLY = "checks only; statistical oracle not run"


def _verdicts(out_dir: Path, command: str) -> dict:
    return json.loads((out_dir / f"{command}.json").read_text())["judgement"]["implementations"]


# -- the Python API ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec", [REUSED_UNIFORM, OBSERVED_ONLY], ids=["reused-uniform", "observed"]
)
def test_the_api_rejects_what_only_the_oracle_sees(spec: str) -> None:
    by_checks = check_sampler(spec, cases=CASES, require="lossless", stats=False)
    assert by_checks.ok and by_checks.lossless  # the checks alone are fooled
    assert by_checks.summary().endswith(f"({CHECKS_ONLY})")
    assert not by_checks.statistical.ran
    if spec == OBSERVED_ONLY:  # assert_lossless: the same verdict, raised with its evidence
        with pytest.raises(AssertionError, match=r"NOT lossless: statistical oracle REJECTED it"):
            assert_lossless(spec, cases=CASES)
        return
    verdict = check_sampler(spec, cases=CASES, require="lossless")
    assert verdict.statistical.ran and verdict.statistical.rejected is True
    assert (verdict.lossless, verdict.drop_in, verdict.ok) == (False, False, False)
    # the second token is where it shows
    assert any("/pos 1" in carrier for carrier in verdict.statistical.carried_by)


def test_a_sampler_correct_only_when_observed_is_drop_in_by_its_checks_alone() -> None:
    """What makes it a planted defect of the oracle alone: observed, it is the fixed
    sampler bit for bit."""
    verdict = check_sampler(OBSERVED_ONLY, cases=CASES, stats=False)
    assert verdict.drop_in and verdict.ok, verdict.evidence()


# -- compare and report ------------------------------------------------------------------------
def test_compare_require_lossless_rejects_what_only_the_oracle_sees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = lossless_compare_argv(
        tmp_path, CASES, {"reused": REUSED_UNIFORM, "observed": OBSERVED_ONLY}
    )
    assert main([*argv, "--quiet", "--long", "--out-dir", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "reused: passes every lossless check on 2/2 cases, but NOT lossless" in out
    assert "observed: passes every lossless check on 2/2 cases, but NOT lossless" in out
    verdicts = _verdicts(tmp_path / "out", "compare")
    for name in ("reused", "observed"):
        assert verdicts[name]["lossless"] is False
        assert verdicts[name]["statistical"]["rejected"] is True
    assert verdicts["reference"]["lossless"] and verdicts["reference"]["statistical"]["ran"]

    assert (
        main([*argv, "--no-stats", "--quiet", "--long", "--out-dir", str(tmp_path / "checks")]) == 0
    )
    out = capsys.readouterr().out
    for name in ("reused", "observed"):
        line = next(line for line in out.splitlines() if f"] {name}: " in line)  # its verdict
        assert line.endswith(CHECKS_ONLY), line


def test_compare_require_lossless_passes_the_correct_alternative_designs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", *case_file_args(tmp_path, CASES), "--only", "reference,fixed"]
    argv += [arg for name, spec in ALTERNATIVES.items() for arg in ("--impl", f"{name}={spec}")]
    argv += ["--require", "lossless", "--quiet", "--out-dir", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().out
    verdicts = _verdicts(tmp_path, "compare")
    for name in ALTERNATIVES:
        assert (verdicts[name]["lossless"], verdicts[name]["drop_in"]) == (True, False)
        assert verdicts[name]["statistical"]["rejected"] is False
    assert verdicts["fixed"]["drop_in"] and verdicts["fixed"]["statistical"]["ran"]


@pytest.mark.e2e
def test_under_isolate_the_oracle_runs_in_the_worker_and_rejects_as_in_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", *case_file_args(tmp_path, CASES)[:2], "--only", "reference", "--isolate"]
    argv += ["--impl", f"reused={REUSED_UNIFORM}", "--require", "lossless"]
    assert main([*argv, "--quiet", "--out-dir", str(tmp_path)]) == 1
    capsys.readouterr()
    verdicts = _verdicts(tmp_path, "compare")
    assert verdicts["reused"]["lossless"] is False
    assert verdicts["reused"]["statistical"]["rejected"] is True
    assert verdicts["reference"]["statistical"]["rejected"] is False


def test_the_python_apis_time_limit_reaches_the_oracles_decode() -> None:
    from harness.testing import implementation_of, oracle_verdict

    slow = implementation_of("slow=tests.plugins.untrusted_samplers:SlowAtStatsSizeSampler")
    part = oracle_verdict(slow, time_limit_s=1.0)  # 2 s per call at the oracle's batch
    assert part.not_judged is not None and "time limit" in part.not_judged, part
    assert part.failed and not part.rejected
