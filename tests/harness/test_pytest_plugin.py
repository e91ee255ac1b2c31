"""The pytest plugin: ``--dspark-impl`` adds one test per standard case and one for the
statistical oracle, the evidence in the failure message; a target that cannot be loaded
is the same usage error serially and under xdist; the README's command works as written
once the package is installed."""

from __future__ import annotations

import shlex
from importlib.metadata import entry_points

import pytest

from harness.pipeline.matrix import standard_matrix
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.e2e  # every test here runs pytest again, in a subprocess

pytest_plugins = ["pytester"]
# Two cases of the matrix and the oracle's test: what -m and -k keep of one sampler's items.
SELECT = ["-m", "dspark", "-k", "folded-sampled/vanilla or statistical-oracle"]
LOAD_PLUGIN = ["-p", "harness.pytest_plugin"]  # from a checkout and installed alike
ONLY_THE_ORACLE = "tests.plugins.oracle_only_defects:ReusedUniformInverseCdfSampler"
CHECKS_ONLY = "checks only; statistical oracle not run"
DSPARK_ENTRY_POINTS = [
    e for e in entry_points(group="pytest11") if e.value == "harness.pytest_plugin"
]


@pytest.fixture
def plugin_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))

    def run(*args: str, select: list[str] = SELECT) -> pytest.RunResult:
        return pytester.runpytest_subprocess(*LOAD_PLUGIN, "-p", "no:cacheprovider", *select, *args)

    return run


@pytest.mark.parametrize("select", [["-m", "dspark"], ["-k", "dspark"]], ids=["-m", "-k"])
def test_dspark_selects_the_plugin_tests_alone_and_the_collected_line_counts_them(
    plugin_run, pytester: pytest.Pytester, select: list[str]
) -> None:
    pytester.makepyfile(test_own="def test_unrelated():\n    pass\n")
    gumbel = "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler"
    result = plugin_run(
        "--dspark-impl", gumbel, "--dspark-no-stats", "--collect-only", "-q", select=select
    )
    cases = len(standard_matrix())
    result.stdout.fnmatch_lines(
        [
            "*dspark[[]gumbel[]]::folded-sampled/vanilla",
            f"{cases}/{cases + 1} tests collected (1 deselected) in *",
        ]
    )
    assert "test_unrelated" not in result.stdout.str()


def test_a_correct_other_design_passes_when_lossless_is_required_under_xdist(plugin_run) -> None:
    result = plugin_run(
        "--dspark-impl",
        "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler",
        "--dspark-require",
        "lossless",
        "-n",
        "2",
    )
    result.assert_outcomes(passed=3)  # two cases and the oracle
    result.stdout.fnmatch_lines(
        ["dspark: gumbel held to lossless: one test per standard case and one for the *oracle"]
    )


def test_lossless_rejects_a_sampler_only_the_statistical_oracle_can_see(plugin_run) -> None:
    result = plugin_run("--dspark-impl", f"icdf={ONLY_THE_ORACLE}", "--dspark-require", "lossless")
    result.assert_outcomes(passed=2, failed=1)  # every per-call check passes; the oracle fails
    result.stdout.fnmatch_lines(
        [
            "*dspark?icdf?::statistical-oracle*",
            "icdf is NOT lossless: statistical oracle REJECTED it (family p=*; carried by *pos 1*",
        ]
    )


def test_a_planted_defect_fails_one_test_per_case_with_its_evidence_and_without_the_oracle_says_so(
    plugin_run,
) -> None:
    frozen = "frozen=tests.plugins.planted_defects_verdicts:FrozenNoiseSampler"
    result = plugin_run("--dspark-impl", frozen, "--dspark-no-stats")
    result.assert_outcomes(failed=2)  # the two cases; no oracle test
    assert "statistical-oracle" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"dspark: frozen held to drop-in: one test per standard case ({CHECKS_ONLY})",
            f"*frozen is not drop-in on folded-sampled/vanilla ({CHECKS_ONLY}):*",
            "fresh_noise [[]lossless[]]: the second call drew the same noise as the first*",
            f"dspark: ({CHECKS_ONLY})",
        ]
    )


# A sampler whose calling convention cannot express heads other than vanilla (as vLLM's
# Markov hooks, which take no hidden state): the conftest declares it, as a server would.
VANILLA_ONLY_CONFTEST = """
from harness.pipeline import runner
from harness.plugins.conventions import ConstructorConvention, ConventionName, bind_constructor
from fixed import DsparkDraftSampler


class VanillaOnlySampler(DsparkDraftSampler):
    pass


class VanillaOnly(ConstructorConvention):
    def outside_contract(self, case, *, sampler_class):
        return None if case.head_kind == "vanilla" else f"no {case.head_kind} head here"


declared = runner.convention_of


def convention_of(sampler_class):
    if sampler_class is VanillaOnlySampler:
        return VanillaOnly(ConventionName(bind_constructor(sampler_class).convention))
    return declared(sampler_class)


runner.convention_of = convention_of
"""


def test_a_case_outside_the_samplers_contract_is_skipped_with_its_reason(
    plugin_run, pytester: pytest.Pytester
) -> None:
    pytester.makeconftest(VANILLA_ONLY_CONFTEST)
    result = plugin_run(
        "--dspark-impl", "mine=conftest:VanillaOnlySampler", "--dspark-no-stats", "-rs",
        select=["-m", "dspark"],
    )  # fmt: skip
    heads = [case.head_kind for case in standard_matrix()]
    outside = sum(head != "vanilla" for head in heads)
    assert 0 < outside < len(heads)
    result.assert_outcomes(passed=len(heads) - outside, skipped=outside)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: outside this contract: no gated head here"])


USERS_OWN_TESTS = """
import pytest

from harness.pipeline.matrix import standard_matrix

CASES = [c for c in standard_matrix() if c.name in ("folded-sampled/vanilla", "greedy-fold/gated")]
SAMPLERS = {
    "fixed": "fixed:DsparkDraftSampler",
    "frozen": "tests.plugins.planted_defects_verdicts:FrozenNoiseSampler",
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("sampler", list(SAMPLERS), ids=list(SAMPLERS))
def test_my_sampler(dspark, sampler, case):
    verdict = dspark(SAMPLERS[sampler], case)
    assert verdict.judged == 1 and not verdict.statistical.ran


@pytest.mark.parametrize("round", [1, 2])
def test_my_sampler_under_the_oracle(dspark, round):
    first = dspark.oracle("fixed:DsparkDraftSampler")
    assert first.ran and not first.failed
    assert dspark.oracle("fixed:DsparkDraftSampler") is first  # decoded once a session
    assert dspark.options.oracle_rows == 1000
"""


def test_the_dspark_fixture_judges_a_users_sampler_in_their_own_parametrized_tests(
    plugin_run, pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(test_mine=USERS_OWN_TESTS)
    result = plugin_run("--dspark-rows", "1000", "-n", "2", select=[])
    # the planted defect fails its sampled case alone, with its evidence; the rest pass
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_my_sampler?frozen-folded-sampled/vanilla?*",
            "FrozenNoiseSampler is not drop-in on folded-sampled/vanilla:",
            "fresh_noise [[]lossless[]]: the second call drew the same noise as the first*",
        ]
    )


def test_the_plugin_takes_a_named_profile_and_refuses_an_unknown_one(plugin_run) -> None:
    gumbel = "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler"
    select = ["-m", "dspark", "-k", "thorough"]
    argv = ["--dspark-impl", gumbel, "--dspark-profile", "thorough", "--co"]
    result = plugin_run(*argv, select=select)
    result.stdout.fnmatch_lines(
        [
            "dspark: gumbel held to drop-in: one test per thorough case *",
            "*thorough/gated/V=151936/fp16*",  # the production shapes
        ]
    )
    result = plugin_run("--dspark-impl", gumbel, "--dspark-profile", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --dspark-profile: unknown profile 'fast': expected *"])
    result = plugin_run("--dspark-impl", gumbel, "--dspark-rows", "0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --dspark-rows must be a positive integer, got 0"])


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_an_impl_that_cannot_be_loaded_is_the_same_usage_error_serially_and_under_xdist(
    plugin_run, pytester: pytest.Pytester, workers: list[str]
) -> None:
    """The plug-in loader's own messages are tested where it lives
    (tests/harness/plugins/); here, that the plugin stops the session with one."""
    pytester.makepyfile(broken="class DsparkDraftSampler(:\n")
    target, message = "broken.py", "*importing 'broken.py' raised SyntaxError*"
    result = plugin_run("--dspark-impl", f"bad={target}", *workers)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --dspark-impl: --impl bad={target}: {message[1:]}"])


def test_the_installed_plugin_is_named_after_its_module() -> None:
    """So ``-p harness.pytest_plugin`` names the installed plugin rather than loading the
    module a second time ("Plugin already registered")."""
    if not DSPARK_ENTRY_POINTS:
        pytest.skip("the package is not installed (pip install -e .)")
    assert [e.name for e in DSPARK_ENTRY_POINTS] == ["harness.pytest_plugin"], (
        "stale package metadata: reinstall with pip install -c constraints.txt -e ."
    )


def test_the_readme_command_works_as_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = (REPO_ROOT / "docs" / "usage.md").read_text()
    block = usage.split("#### Use it from pytest", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:3] == ["pytest", "-p", "harness.pytest_plugin"], argv
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))  # its sampler is the checkout's
    result = pytester.runpytest_subprocess(*argv[1:], "-p", "no:cacheprovider")
    cases = len(standard_matrix())
    result.assert_outcomes(passed=cases + 1)  # every standard case and the statistical oracle
