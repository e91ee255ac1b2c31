"""Every call the statistical oracle's decodes make is held to the exact per-call checks
(``harness.oracles.percall``): a sampler that emits a wrong token once in about 50,000
draft positions passes every test of the oracle and every case of the matrix, and is NOT
lossless on every path, its finding named with its round, call, row and step; the
correct designs have no finding (docs/statistics.md, "Every call of the oracle, held to
the per-call checks")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.options import Roles
from harness.oracles.decode import life_batches
from harness.oracles.part import statistical_coverage
from harness.oracles.percall import HELD_CHECKS, held_decode, outside_support
from harness.oracles.problem import FAR, StatsConfig, build_problems
from harness.oracles.stats import StatsResult, meets_expectation, run_oracle, run_stats
from harness.pipeline.checks.walk import tokens_outside_support
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import builtin_implementations
from harness.testing import check_sampler, implementation_of
from harness.wire import read_answer, write_answer
from reference.verifier import CHAIN_VERIFIER
from tests.plugins.rare_defects import RareWrongGreedyTokenSampler, RareWrongTokenSampler
from tests.session_share import computed_once

RARE = "tests.plugins.rare_defects:RareWrongTokenSampler"
RARE_GREEDY = "tests.plugins.rare_defects:RareWrongGreedyTokenSampler"
CASES = [c for c in standard_matrix() if c.name in ("folded-sampled/vanilla", "greedy-fold/gated")]
# Eight rows (rows 3 and 7 greedy), two rounds: the first call drafts every row in order.
SMALL = StatsConfig(rows=8, rounds=2, head_kinds=("vanilla",), targets=(FAR,))


class WrongFourthToken(RareWrongTokenSampler):
    first = 3  # row 1's step 0: rows 0 and 1 are sampled, 3 counted steps each


class WrongFirstGreedyToken(RareWrongGreedyTokenSampler):
    first = 0  # row 3's last step, in the first call


def _small_decode(sampler_class: type):
    problem = build_problems(SMALL)[0]
    return problem, held_decode(
        sampler_class, problem=problem, head_kind="vanilla", seed=0, verifier=CHAIN_VERIFIER
    )


# -- by hand -------------------------------------------------------------------------------------
def test_a_wrong_token_shows_in_the_next_steps_kept_logits_with_its_call_row_and_step() -> None:
    problem, (decoded, held) = _small_decode(WrongFourthToken)
    assert [f.check for f in held.findings] == ["teacher_forcing"]
    (finding,) = held.findings
    assert (finding.round, finding.call, finding.row, finding.slot) == (0, 0, 1, 1)
    assert finding.step == 1  # row 1's step 0 token is wrong: step 1's logits are not its
    assert (finding.positions, finding.calls) == (1, 1)
    assert "step 0's emitted token" in finding.expected
    assert finding.describe().startswith(
        "teacher_forcing [oracle]: far/vanilla under chain: round 0, call 0, row 1 (slot 1), "
        "step 1: token "
    )
    assert held.calls == sum(len(life_batches(problem, r)) for r in range(decoded.rounds))


def test_a_wrong_greedy_token_at_the_last_step_fails_only_greedy_rows_argmax() -> None:
    _, (_, held) = _small_decode(WrongFirstGreedyToken)
    assert [f.check for f in held.findings] == ["greedy_rows_argmax"]
    (finding,) = held.findings
    assert (finding.round, finding.call, finding.row, finding.step) == (0, 0, 3, 3)
    assert "argmax" in finding.expected


def test_the_fixed_samplers_calls_are_each_held_to_every_check_and_pass() -> None:
    problem, (decoded, held) = _small_decode(builtin_implementations(("fixed",))[0].sampler_class)
    assert held.findings == ()
    gamma = SMALL.gamma
    drafted = sum(
        int(batch.shape[0]) * gamma
        for r in range(decoded.rounds)
        for batch in life_batches(problem, r)
    )
    greedy = 2 * gamma * decoded.rounds  # rows 3 and 7, every round
    assert tuple(held.positions) == HELD_CHECKS
    assert held.positions == {
        "outputs_written": drafted,
        "teacher_forcing": drafted,
        "greedy_rows_argmax": greedy,
        "support": drafted - greedy,
        "target_truncation": 0,  # its 8 rows take the temperature groups: none truncates
    }


def test_the_support_shortcut_decides_as_the_check_does() -> None:
    """Literal rows: a token far below the maximum (q underflows to 0 at T = 0.01, not at
    T = 1), an entry at -inf, NaN logits, a greedy row (never judged)."""
    inf, nan = float("inf"), float("nan")
    kept = torch.tensor(
        [
            [[0.0, -100.0, 1.0], [0.0, -100.0, 1.0]],
            [[0.0, -inf, 1.0], [nan, 0.0, 1.0]],
            [[0.0, -inf, 1.0], [0.0, -inf, 1.0]],
        ]
    )  # [bs=3, gamma=2, V=3]
    tokens = torch.tensor([[1, 1], [1, 2], [1, 1]])
    temperatures = torch.tensor([0.01, 1.0, 1.0])
    greedy = torch.tensor([False, False, True])
    expected = torch.tensor([[True, True], [True, True], [False, False]])
    for temperature_row0, want_row0 in ((0.01, True), (1.0, False)):
        temperatures[0] = temperature_row0
        expected[0] = want_row0
        by_check = tokens_outside_support(
            kept, tokens=tokens, temperatures=temperatures, greedy_mask=greedy
        )
        shortcut = outside_support(
            kept, tokens=tokens, temperatures=temperatures, greedy_mask=greedy
        )
        assert torch.equal(by_check, expected) and torch.equal(shortcut, expected)


def test_the_findings_cross_the_worker_boundary() -> None:
    _, (_, held) = _small_decode(WrongFourthToken)
    assert read_answer(write_answer(held)) == held


# -- the oracle at its defaults ------------------------------------------------------------------
@pytest.fixture(scope="module")
def rare_result(tmp_path_factory: pytest.TempPathFactory) -> StatsResult:
    """The oracle on the rare wrong token (once a session)."""
    return computed_once(tmp_path_factory, "every-call-rare-result", _rare_result)


def _rare_result() -> StatsResult:
    return run_stats(implementation_of(f"rare={RARE}"))


def test_the_rare_wrong_token_passes_the_tests_and_fails_its_calls(rare_result) -> None:
    result = rare_result
    assert not result.rejected and result.p_value > 1e-6  # the tests cannot see it
    assert [(f.target, f.check) for f in result.held_calls.findings] == [
        ("far", "teacher_forcing")
    ] * 3  # once in each head's far decode: 3 wrong tokens in ~189,000 sampled positions
    assert not result.passed
    statistical = result.statistical()
    assert statistical.failed and statistical.rejected is False
    assert statistical.describe().startswith("teacher_forcing [oracle]: far/")
    assert "which clears nothing" in statistical.describe()
    assert not meets_expectation(result)
    assert meets_expectation(result, Roles(expect_fail=("rare",)))


def test_the_correct_designs_have_no_finding_on_the_oracles_calls() -> None:
    specs = [
        "mine=harness.examples.my_sampler:MySampler",
        "pre=tests.plugins.alternative_samplers:PrestagedNoiseSampler",
        "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler",
        "multi=tests.plugins.alternative_samplers:MultinomialSampler",
        "icdf=tests.plugins.alternative_samplers:InverseCdfSampler",
    ]
    oracle = run_oracle(
        replace(SMALL, rows=400, rounds=4, head_kinds=("vanilla", "gated", "rnn")),
        implementations=[
            *builtin_implementations(("fixed", "reference")),
            *(implementation_of(spec) for spec in specs),
        ],
    )
    for result in oracle.every_result():
        assert result.held_calls.findings == (), result.name
        assert result.held_calls.calls > 0 and result.passed, result.name
    coverage = statistical_coverage(oracle)
    assert coverage is not None and coverage.calls_held == oracle.results["fixed"].held_calls.calls
    assert coverage.positions_held["teacher_forcing"] > 0


# -- every path ----------------------------------------------------------------------------------
def test_the_python_api_says_not_lossless_with_the_call_row_and_step() -> None:
    verdict = check_sampler(f"rare={RARE}", cases=CASES, require="lossless")
    assert not verdict.lossless_failures()  # every case's checks pass: the calls are small
    assert (verdict.lossless, verdict.ok) == (False, False)
    assert verdict.summary().startswith("NOT lossless: teacher_forcing [oracle]: far/")
    assert "round " in verdict.reason and ", row " in verdict.reason and ", step " in verdict.reason


def _case_files(tmp_path: Path) -> list[str]:
    args = []
    for index, case in enumerate(CASES):
        path = tmp_path / f"case{index}.json"
        case.save(path)
        args += ["--case", str(path)]
    return args


def test_compare_require_lossless_says_not_lossless(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", *_case_files(tmp_path), "--only", "reference", "--require", "lossless"]
    argv += ["--impl", f"rare={RARE}", "--quiet", "--long", "--out-dir", str(tmp_path / "out")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "rare: passes every lossless check on 2/2 cases, but NOT lossless" in out
    assert "teacher_forcing [oracle]: far/vanilla under chain: round " in out
    verdicts = json.loads((tmp_path / "out" / "compare.json").read_text())["judgement"]
    rare = verdicts["implementations"]["rare"]
    assert rare["lossless"] is False and rare["statistical"]["rejected"] is False
    assert [f["check"] for f in rare["statistical"]["call_findings"]] == ["teacher_forcing"] * 3
    assert verdicts["implementations"]["reference"]["lossless"] is True


@pytest.mark.e2e  # the whole report: 24 cases and the oracle
def test_report_says_not_lossless_as_compare_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--impl", f"rare={RARE}", "--require", "lossless", "--no-work"]
    assert main([*argv, "--quiet", "--long", "--out-dir", str(tmp_path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "rare: passes every lossless check on 24/24 cases, but NOT lossless" in out
    report = json.loads((tmp_path / "report.json").read_text())["judgement"]
    rare = report["implementations"]["rare"]
    assert rare["lossless"] is False
    assert rare["summary"].startswith("NOT lossless: teacher_forcing [oracle]: far/")
    statistical = report["coverage"]["statistical"]
    assert statistical["calls_held"] > 0 and statistical["positions_held"]["support"] > 0


def test_stats_fails_the_rare_wrong_token_against_its_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["stats", "--impl", f"rare={RARE}", "--quiet", "--out-dir", str(tmp_path)]
    assert main(argv) == 1  # with --expect-fail rare it holds (meets_expectation, above)
    out = " ".join(capsys.readouterr().out.split())  # the verdict line wraps
    assert "rare FAILS teacher_forcing on its calls (tests p=" in out and "UNEXPECTED" in out
    assert "rare (chain): teacher_forcing [oracle]: far/vanilla under chain: round " in out


@pytest.mark.e2e  # pytest again, in a subprocess
def test_the_pytest_plugin_fails_the_oracles_item(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers import REPO_ROOT

    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    result = pytester.runpytest_subprocess(
        "-p",
        "harness.pytest_plugin",
        "-p",
        "no:cacheprovider",
        "-m",
        "dspark",
        "-k",
        "statistical-oracle",
        "--dspark-impl",
        f"rare={RARE}",
        "--dspark-require",
        "lossless",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "rare is NOT lossless: teacher_forcing [[]oracle[]]: far/* round *, call *, row *",
            "every finding on the oracle's calls:",
        ]
    )


# -- the released server's samplers (sglang 0.5.23 installed) -----------------------------------
@pytest.mark.upstream
def test_the_oracles_calls_judge_the_plumbing_samplers_by_the_servers_requests() -> None:
    """Correct designs on the server's plumbing (another counter layout, inverse CDF on the
    package's Philox uniforms, float32 kept logits) have no finding; a greedy mask read from
    the temperature drafts the server's greedy requests (``T = 1, top_k = 1``) as samples,
    which its kept logits say and the oracle's tests do not see."""
    module = "tests.plugins.plumbing_samplers"
    correct = ("StepsAfterTheFirstAtNextCounter", "InverseCdfOnPhiloxUniforms", "Float32KeptLogits")
    oracle = run_oracle(
        replace(SMALL, rows=400, rounds=4),
        implementations=[
            implementation_of(f"{name}={module}:{name}")
            for name in (*correct, "TemperatureGreedyMask")
        ],
    )
    for name in correct:
        assert oracle.results[name].held_calls.findings == (), name
    findings = oracle.results["TemperatureGreedyMask"].held_calls.findings
    assert {f.check for f in findings} == {"greedy_rows_argmax"}
