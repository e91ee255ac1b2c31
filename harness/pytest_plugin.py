"""A pytest plugin: ``pytest --dspark-impl NAME=TARGET`` judges a sampler as ``compare``
does: one test per case of the matrix (the evidence of every failing check in the
failure message; a case outside the sampler's contract is skipped with its reason) and
one test for the statistical oracle, so "lossless" means here what it means in the
report. The ``dspark`` fixture judges a sampler of the user's own inside their own
(parametrized) tests, in the manner of pytest-benchmark's ``benchmark`` fixture.

Each sampler's tests are collected as ``dspark[NAME]`` (``dspark[NAME]::CASE``, and
``dspark[NAME]::statistical-oracle``), counted in pytest's "collected" line like any
other, and marked ``dspark``: ``pytest -m dspark`` runs them alone.

``TARGET`` is what ``--impl`` takes (``module:Class``, a file, or a function). The run's
options are one value (``harness.options.RunOptions``): ``--dspark-profile`` names a
profile (``default``, ``ci``, ``thorough``, or one registered with
``harness.options.register_profile`` in a conftest), and each other ``--dspark-*`` option
given changes one field of it: ``--dspark-require lossless`` relaxes the default
``drop-in``; ``--dspark-no-stats`` leaves the oracle out, and every line the plugin
prints then says "checks only; statistical oracle not run"; ``--dspark-rows`` and
``--dspark-thorough`` are ``compare``'s ``--rows`` and ``--thorough``. The targets are
loaded when pytest is configured, in every process, so a target that cannot be loaded is
the same usage error serially and under ``pytest -n auto``; the items are built the same
way on every process. Nothing is imported before it is used: the plugin costs nothing in
a run that does not ask for it. Installed, the package registers it under its module
name, so ``-p harness.pytest_plugin`` names it both from a checkout and once installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from harness.defaults import VerifierNoise
from harness.pipeline.check_result import TIER_LABELS

if TYPE_CHECKING:
    from harness.case import Case
    from harness.judgement import Judgement
    from harness.options import RunOptions
    from harness.pipeline.verdicts import Statistical, Verdict
    from harness.plugins.implementations import Implementation

IMPLEMENTATIONS = pytest.StashKey[list["Implementation"]]()
OPTIONS: pytest.StashKey[RunOptions] = pytest.StashKey()  # built once from --dspark-* options
# the oracle's verdict on each sampler the ``dspark`` fixture asked for, by spec: once a session
ORACLES = pytest.StashKey[dict[str, "Statistical"]]()
ORACLE_ITEM = "statistical-oracle"  # the oracle's test: dspark[NAME]::statistical-oracle
MARKER = "dspark"  # every test the plugin adds: ``pytest -m dspark`` selects them


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dspark", "DSpark draft-sampler verdicts")
    group.addoption(
        "--dspark-impl",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="judge this sampler: one test per case of the matrix and one for the "
        "statistical oracle (repeatable)",
    )
    group.addoption(
        "--dspark-profile",
        default="default",
        metavar="NAME",
        help="the run's options by name: default, ci (one process, no time limit), "
        "thorough (production shapes, 4x the oracle's rows), or one registered with "
        "harness.options.register_profile; the options below change it",
    )
    group.addoption(
        "--dspark-require",
        choices=TIER_LABELS,
        default=None,
        help="what each sampler must meet (default: the profile's, drop-in)",
    )
    group.addoption(
        "--dspark-no-stats",
        action="store_true",
        help="leave the statistical oracle out (checks only; statistical oracle not run)",
    )
    group.addoption(
        "--dspark-verifier-noise",
        choices=[noise.value for noise in VerifierNoise],
        default=None,
        help="where the oracle's verifier draws from: shared (the default), each server's "
        "own plumbing; independent, streams of their own (a control)",
    )
    group.addoption(
        "--dspark-threads",
        type=int,
        default=None,
        metavar="N",
        help="torch intra-op threads while judging (default: the profile's, 1, as the "
        "command line's --threads; 0: torch's own default)",
    )
    group.addoption(
        "--dspark-jobs",
        type=int,
        default=None,
        metavar="N",
        help="processes the oracle's decodes take beside the cases (default: the profile's, "
        "as the command line's --jobs; 1: one after another)",
    )
    group.addoption(
        "--dspark-rows",
        type=int,
        default=None,
        metavar="N",
        help="the statistical oracle's rows per head kind (default: the profile's, as the "
        "command line's --rows)",
    )
    group.addoption(
        "--dspark-thorough",
        action="store_true",
        help="the matrix with production shapes, as the command line's --thorough",
    )


def run_options(config: pytest.Config) -> RunOptions:
    """The run's options: ``--dspark-profile`` with each other ``--dspark-*`` option
    given as a change; a bad value is a usage error naming the option."""
    from harness.testing import options_of

    changes: dict[str, Any] = {
        field: config.getoption(option)
        for option, field in (
            ("dspark_verifier_noise", "verifier_noise"),
            ("dspark_jobs", "jobs"),
            ("dspark_rows", "oracle_rows"),
        )
        if config.getoption(option) is not None
    }
    if config.getoption("dspark_threads") is not None:
        changes["threads"] = config.getoption("dspark_threads") or None  # 0: torch's own
    if config.getoption("dspark_no_stats"):
        changes["stats"] = False
    if config.getoption("dspark_thorough"):
        changes["thorough"] = True
    rows = changes.get("oracle_rows")
    if rows is not None and rows < 1:
        raise pytest.UsageError(f"--dspark-rows must be a positive integer, got {rows}")
    try:
        return options_of(
            config.getoption("dspark_profile"),
            require=config.getoption("dspark_require"),
            **changes,
        )
    except ValueError as error:
        raise pytest.UsageError(f"--dspark-profile: {error}") from None


def pytest_configure(config: pytest.Config) -> None:
    """Gather the ``--dspark-*`` options into the run's options, and load every
    ``--dspark-impl`` target now, on the controller and each worker alike."""
    config.addinivalue_line(
        "markers", f"{MARKER}: a test of a --dspark-impl sampler (select them with -m {MARKER})"
    )
    config.stash[ORACLES] = {}
    specs = config.getoption("dspark_impl")
    if not specs:
        return
    config.stash[OPTIONS] = run_options(config)
    from harness.plugins.implementations import ImplementationError, parse_impl_spec

    implementations = []
    for spec in specs:
        try:
            implementations.append(parse_impl_spec(spec))
        except ImplementationError as error:
            raise pytest.UsageError(f"--dspark-impl: {error}") from None
    config.stash[IMPLEMENTATIONS] = implementations


def sampler_node_name(implementation: Implementation) -> str:
    """``dspark[NAME]``: the collector of one sampler's tests."""
    return f"{MARKER}[{implementation.name}]"


def _checks_only(options: RunOptions) -> str:
    """What a line must add when the oracle is left out."""
    from harness.pipeline.verdicts import CHECKS_ONLY

    return "" if options.stats else f" ({CHECKS_ONLY})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    implementations = config.stash.get(IMPLEMENTATIONS, [])
    if not implementations:
        return []
    options = config.stash[OPTIONS]
    names = ", ".join(i.name for i in implementations)
    matrix = "thorough" if options.thorough else "standard"
    tests = f"one test per {matrix} case"
    if options.stats:
        tests += " and one for the statistical oracle"
    return [
        f"dspark: {names} held to {options.roles.require.label}: {tests}{_checks_only(options)}"
    ]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.stash.get(IMPLEMENTATIONS, []) and not config.stash[OPTIONS].stats:
        terminalreporter.write_line(f"dspark:{_checks_only(config.stash[OPTIONS])}")


class SamplerCheckFailure(Exception):
    """A case, or the oracle, on which the sampler misses what it is required to meet."""


class DsparkItem(pytest.Item):
    """One test of one sampler; its failure message is the evidence."""

    def __init__(self, *, implementation: Implementation, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.implementation = implementation
        self.options = self.config.stash[OPTIONS]

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, SamplerCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{sampler_node_name(self.implementation)}::{self.name}"


class DsparkCaseItem(DsparkItem):
    """One case of the matrix for one sampler: its per-call checks."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        judge_case(self.implementation, self.case, options=self.options)


def judge_case(implementation: Implementation, case: Case, *, options: RunOptions) -> Verdict:
    """``implementation``'s per-call checks on ``case`` next to the reference (the oracle
    left out), its verdict; a case outside its contract is a skip with the reason, and a
    verdict that misses what the options require a ``SamplerCheckFailure`` with its
    evidence."""
    from dataclasses import replace

    from harness.defaults import REFERENCE
    from harness.judge import judge
    from harness.plugins.implementations import builtin_implementations

    require = options.roles.require
    implementations = [*builtin_implementations((REFERENCE,)), implementation]
    judgement = judge([case], implementations, options=replace(options, stats=False))
    held = judgement.held_verdict(implementation.name)
    verdict = held.verdict
    if not verdict.judged:  # nothing ran: no claim either way
        pytest.skip(f"{case.label()}: {_outside_contract(judgement, verdict.name)}")
    if not held.ok:
        lines = [
            f"{f.check} [{f.tier}]: {f.detail}"
            for f in verdict.failures
            if require.includes(f.tier)  # the evidence of what it is held to
        ]
        raise SamplerCheckFailure(
            f"{implementation.name} is not {require.label} on {case.label()}"
            f"{_checks_only(options)}:\n" + "\n".join(lines)
        )
    return verdict


def _outside_contract(judgement: Judgement, name: str) -> str:
    """Why ``name``'s one case did not run: its ``ran`` check's words."""
    from harness.pipeline.check_result import Skip

    (record,) = judgement.records
    return next(
        c["detail"]
        for c in record["implementations"][name]["checks"]
        if c["skip"] == Skip.OUTSIDE_CONTRACT
    )


class DsparkOracleItem(DsparkItem):
    """The statistical oracle's verdict on one sampler, under the run's options."""

    def runtest(self) -> None:
        judge_oracle(self.implementation, options=self.options)


def judge_oracle(implementation: Implementation, *, options: RunOptions) -> Statistical:
    """The statistical oracle's verdict on ``implementation``; a rejection (or a finding
    on its calls) is a ``SamplerCheckFailure`` with every rejected test and finding."""
    from harness.testing import oracle_verdict

    statistical = oracle_verdict(implementation, options=options)
    if statistical.failed:
        raise SamplerCheckFailure(
            f"{implementation.name} is NOT lossless: {statistical.describe()}"
            + (
                f"\nevery rejected test: {statistical.every_carrier()}"
                if statistical.carried_by
                else ""
            )
            + (
                f"\nevery finding on the oracle's calls:\n{statistical.every_finding()}"
                if statistical.call_findings
                else ""
            )
        )
    return statistical


class DsparkSampler(pytest.Collector):
    """One sampler's tests, ``dspark[NAME]``: one per case of the standard matrix and,
    unless ``--dspark-no-stats``, one for the statistical oracle; marked ``dspark``."""

    def __init__(self, *, implementation: Implementation, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.implementation = implementation
        self.add_marker(MARKER)

    def collect(self) -> list[pytest.Item]:
        from harness.pipeline.matrix import matrix_for

        implementation = self.implementation
        items: list[pytest.Item] = [
            DsparkCaseItem.from_parent(
                self, name=case.label(), implementation=implementation, case=case
            )
            for case in matrix_for(self.config.stash[OPTIONS])
        ]
        if self.config.stash[OPTIONS].stats:
            items.append(
                DsparkOracleItem.from_parent(self, name=ORACLE_ITEM, implementation=implementation)
            )
        return items


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect among the items
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Collect each sampler's tests as pytest collects a file's, so that they are counted
    in the "collected" line and reported like any other collection."""
    for implementation in config.stash.get(IMPLEMENTATIONS, []):
        sampler = DsparkSampler.from_parent(
            session, name=sampler_node_name(implementation), implementation=implementation
        )
        items.extend(session.genitems(sampler))


class DsparkFixture:
    """What the ``dspark`` fixture gives a test: ``dspark(sampler, case)`` judges the
    sampler's per-call checks on the case next to the reference and returns its verdict;
    the test fails with the evidence where it misses what the options require, and is
    skipped with the reason where the case is outside its contract.
    ``dspark.oracle(sampler)`` is the statistical oracle's verdict on it, decoded once a
    session whichever test asks first, and fails the test on a rejection. ``options`` is
    the run's (``--dspark-profile`` and the other ``--dspark-*`` options)."""

    def __init__(self, options: RunOptions, oracles: dict[str, Statistical]) -> None:
        self.options = options
        self._oracles = oracles

    def __call__(self, sampler: str | type[Any], case: Case) -> Verdict:
        from harness.testing import implementation_of

        return _failing_test(judge_case)(implementation_of(sampler), case, options=self.options)

    def oracle(self, sampler: str | type[Any]) -> Statistical:
        from harness.testing import implementation_of

        implementation = implementation_of(sampler)
        if implementation.spec not in self._oracles:
            self._oracles[implementation.spec] = _failing_test(judge_oracle)(
                implementation, options=self.options
            )
        return self._oracles[implementation.spec]


def _failing_test(judged: Callable[..., Any]) -> Callable[..., Any]:
    """``judged``, its ``SamplerCheckFailure`` a failure of the calling test whose
    message is the evidence alone (no traceback into the harness)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return judged(*args, **kwargs)
        except SamplerCheckFailure as failure:
            evidence = str(failure)
        pytest.fail(evidence, pytrace=False)

    return call


@pytest.fixture
def dspark(request: pytest.FixtureRequest) -> DsparkFixture:
    """Judge a sampler of your own in your own tests (``DsparkFixture``)."""
    config = request.config
    options = config.stash[OPTIONS] if OPTIONS in config.stash else run_options(config)
    return DsparkFixture(options, config.stash[ORACLES])
