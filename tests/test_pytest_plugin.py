"""The pytest plugin: ``--dspark-impl`` adds one test per standard case, the evidence in
the failure message, and works under xdist."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from tests.helpers import REPO_ROOT

pytest_plugins = ["pytester"]
SELECT = ["-k", "dspark and folded-sampled/vanilla"]  # two cases of the matrix
# Installed, the package registers the plugin itself (entry point ``dspark``); from a
# checkout it is named with ``-p``, as the README says.
INSTALLED = any(e.name == "dspark" for e in entry_points(group="pytest11"))
LOAD_PLUGIN = [] if INSTALLED else ["-p", "harness.pytest_plugin"]


@pytest.fixture
def plugin_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess(*LOAD_PLUGIN, "-p", "no:cacheprovider", *SELECT, *args)

    return run


def test_a_planted_defect_fails_one_test_per_case_with_its_evidence(plugin_run) -> None:
    result = plugin_run(
        "--dspark-impl", "frozen=tests.plugins.planted_defects_verdicts:FrozenNoiseSampler"
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*frozen is not drop-in on folded-sampled/vanilla:*",
            "fresh_noise [[]lossless[]]: the second call drew the same noise as the first*",
        ]
    )


def test_a_correct_other_design_passes_when_lossless_is_required_under_xdist(plugin_run) -> None:
    result = plugin_run(
        "--dspark-impl",
        "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler",
        "--dspark-require",
        "lossless",
        "-n",
        "2",
    )
    result.assert_outcomes(passed=2)


def test_an_impl_that_cannot_be_loaded_is_a_usage_error(plugin_run) -> None:
    result = plugin_run("--dspark-impl", "bad=no.such.module:Sampler")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dspark-impl*cannot import module*"])
