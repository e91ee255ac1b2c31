"""Every entry point reads its verdict from the one judgement: the command line's
``compare``, the Python API and the pytest plugin give the same verdicts for the same
inputs. The statistical oracle runs once for the whole module (its verdict then stands in
for every entry point's own run), so the entry points differ in nothing but their path to
``harness.judge.judge``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import judge as judge_module
from harness.cli import main
from harness.judgement import OracleVerdict
from harness.options import RunOptions
from harness.pipeline.check_result import Tier
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import builtin_implementations, parse_impl_spec
from harness.testing import check_sampler

pytest_plugins = ["pytester"]

# Checks pass, the oracle rejects it: its verdict depends on the oracle reaching every path.
ONLY_THE_ORACLE = "reused=tests.plugins.stats_defects:ReusedNoiseSampler"
# Lossless, not drop-in: a verdict the checks decide and the oracle confirms.
ANOTHER_DESIGN = "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler"
SPECS = (ONLY_THE_ORACLE, ANOTHER_DESIGN)
NAMES = tuple(spec.partition("=")[0] for spec in SPECS)


@pytest.fixture(scope="module")
def oracle_once() -> OracleVerdict:
    """The oracle's verdict on the built-ins and both samplers, run once."""
    implementations = [*builtin_implementations(), *(parse_impl_spec(s) for s in SPECS)]
    return judge_module.judge_oracle(implementations, options=RunOptions(), power=False)


@pytest.fixture
def one_oracle(monkeypatch: pytest.MonkeyPatch, oracle_once: OracleVerdict) -> list[list[str]]:
    """Every judgement in the test takes the module's oracle verdict; the names each
    entry point asked the oracle for are recorded."""
    asked: list[list[str]] = []

    def the_one_oracle(implementations, **_: object) -> judge_module.OracleLater:
        asked.append([i.name for i in implementations])
        return judge_module.OracleLater(lambda: oracle_once)

    monkeypatch.setattr(judge_module, "start_oracle", the_one_oracle)
    return asked


@pytest.mark.e2e
def test_compare_the_api_and_the_plugin_give_the_same_verdicts(
    one_oracle: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pytester: pytest.Pytester,
) -> None:
    argv = ["compare", "--only", "reference", "--require", "lossless", "--quiet", "--json"]
    for spec in SPECS:
        argv += ["--impl", spec]
    main([*argv, "--out-dir", str(tmp_path / "compare"), "--expect-fail", "reused"])
    by_cli = json.loads(capsys.readouterr().out)["judgement"]["implementations"]

    by_api = {}
    for spec, name in zip(SPECS, NAMES, strict=True):
        by_api[name] = check_sampler(spec, require=Tier.LOSSLESS)
        assert one_oracle[-1] == [name]  # the API's oracle decodes the sampler, not the reference

    plugin = pytester.runpytest_inprocess(
        "-p", "harness.pytest_plugin", "-p", "no:cacheprovider", "--dspark-require", "lossless",
        *(f"--dspark-impl={spec}" for spec in SPECS),
    )  # fmt: skip
    reports = plugin.reprec.getreports("pytest_runtest_logreport")  # type: ignore[attr-defined]
    calls = [r for r in reports if r.when == "call"]
    assert len(calls) == len(SPECS) * (len(standard_matrix()) + 1)  # every case and the oracle
    failed = {r.nodeid for r in calls if r.failed}

    for name in NAMES:
        cli, api = by_cli[name], by_api[name]
        assert (cli["lossless"], cli["drop_in"]) == (api.lossless, api.drop_in), name
        assert cli["summary"] == api.summary()
        assert cli["statistical"] == api.statistical.to_json()
        cases_failed = {n for n in failed if f"dspark[{name}]::" in n and "oracle" not in n}
        assert len(cases_failed) == len({f.case for f in api.failures if f.lossless})
        oracle_failed = any(f"dspark[{name}]::statistical-oracle" in n for n in failed)
        assert oracle_failed == api.statistical.failed
    # the verdicts themselves: the oracle's defect is NOT lossless on every path
    assert not by_api["reused"].lossless and by_api["reused"].statistical.rejected
    assert by_api["gumbel"].lossless and not by_api["gumbel"].drop_in
    assert len(standard_matrix()) == by_api["gumbel"].cases


def test_report_device_reaches_the_eliminated_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device of the command line is the device the work is counted on (no CUDA in
    CI: the options are checked where the work stage receives them)."""
    from harness.cli import build_parser
    from harness.cli.options import run_options
    from harness.measure import work

    seen: list[str] = []

    def counted_on(*, device: str, **_: object) -> list[object]:
        seen.append(device)
        return []

    monkeypatch.setattr(work, "collect_work", counted_on)
    args = build_parser(with_options=["report"]).parse_args(["report", "--device", "cuda:1"])
    options = run_options(args, require_observable=True)
    verdict = judge_module.judge_work([], options=options)
    assert seen == ["cuda:1"] and not verdict.ok  # nothing compared: no pass
