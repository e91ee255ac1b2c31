"""A pytest plugin: ``pytest --dspark-impl NAME=TARGET`` judges a sampler as ``compare``
does: one test per case of the standard matrix (the evidence of every failing check in
the failure message) and one test for the statistical oracle (its verdict at the
report's defaults), so "lossless" means here what it means in the report.

Each sampler's tests are collected as ``dspark[NAME]`` (``dspark[NAME]::CASE``, and
``dspark[NAME]::statistical-oracle``), counted in pytest's "collected" line like any
other, and marked ``dspark``: ``pytest -m dspark`` runs them alone.

``TARGET`` is what ``--impl`` takes (``module:Class``, a file, or a function).
``--dspark-require lossless`` relaxes the default ``drop-in``; ``--dspark-no-stats``
leaves the oracle out, and every line the plugin prints then says "checks only;
statistical oracle not run". The targets are loaded when pytest is configured, in
every process, so a target that cannot be loaded is the same usage error serially
and under ``pytest -n auto``; the items are built the same way on every process.
Nothing is imported before it is used: the plugin costs nothing in a run that does
not ask for it. Installed, the package registers it under its module name, so
``-p harness.pytest_plugin`` names it both from a checkout and once installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from harness.defaults import DEFAULT_JOBS, DEFAULT_THREADS, DEFAULT_VERIFIER_NOISE, VerifierNoise
from harness.pipeline.check_result import TIER_LABELS, Tier

if TYPE_CHECKING:
    from harness.case import Case
    from harness.judgement import Judgement
    from harness.options import RunOptions
    from harness.plugins.implementations import Implementation

IMPLEMENTATIONS = pytest.StashKey[list["Implementation"]]()
OPTIONS: pytest.StashKey[RunOptions] = pytest.StashKey()  # built once from --dspark-* options
ORACLE_ITEM = "statistical-oracle"  # the oracle's test: dspark[NAME]::statistical-oracle
MARKER = "dspark"  # every test the plugin adds: ``pytest -m dspark`` selects them


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dspark", "DSpark draft-sampler verdicts")
    group.addoption(
        "--dspark-impl",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="judge this sampler: one test per case of the standard matrix and one for the "
        "statistical oracle (repeatable)",
    )
    group.addoption(
        "--dspark-require",
        choices=TIER_LABELS,
        default=Tier.DROP_IN.label,
        help="what each --dspark-impl must meet (default drop-in)",
    )
    group.addoption(
        "--dspark-no-stats",
        action="store_true",
        help="leave the statistical oracle out (checks only; statistical oracle not run)",
    )
    group.addoption(
        "--dspark-verifier-noise",
        choices=[noise.value for noise in VerifierNoise],
        default=DEFAULT_VERIFIER_NOISE.value,
        help="where the oracle's verifier draws from: shared (default), each server's own "
        "plumbing; independent, streams of their own (a control)",
    )
    group.addoption(
        "--dspark-threads",
        type=int,
        default=DEFAULT_THREADS,
        metavar="N",
        help=f"torch intra-op threads while judging (default {DEFAULT_THREADS}, as the "
        "command line's --threads; 0: torch's own default)",
    )
    group.addoption(
        "--dspark-jobs",
        type=int,
        default=DEFAULT_JOBS,
        metavar="N",
        help=f"processes the oracle's decodes take beside the cases (default {DEFAULT_JOBS}, "
        "as the command line's --jobs; 1: one after another)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Load every ``--dspark-impl`` target now, on the controller and each worker alike,
    and gather the ``--dspark-*`` options into the run's options."""
    config.addinivalue_line(
        "markers", f"{MARKER}: a test of a --dspark-impl sampler (select them with -m {MARKER})"
    )
    specs = config.getoption("dspark_impl")
    if not specs:
        return
    from harness import options

    config.stash[OPTIONS] = options.RunOptions(
        roles=options.Roles(require=Tier.from_label(config.getoption("dspark_require"))),
        stats=not config.getoption("dspark_no_stats"),
        threads=config.getoption("dspark_threads") or None,
        verifier_noise=VerifierNoise(config.getoption("dspark_verifier_noise")),
        jobs=config.getoption("dspark_jobs"),
    )
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


def _checks_only(config: pytest.Config) -> str:
    """What a line must add when the oracle is left out."""
    from harness.pipeline.verdicts import CHECKS_ONLY

    return "" if config.stash[OPTIONS].stats else f" ({CHECKS_ONLY})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    implementations = config.stash.get(IMPLEMENTATIONS, [])
    if not implementations:
        return []
    options = config.stash[OPTIONS]
    names = ", ".join(i.name for i in implementations)
    tests = "one test per standard case"
    if options.stats:
        tests += " and one for the statistical oracle"
    return [f"dspark: {names} held to {options.roles.require.label}: {tests}{_checks_only(config)}"]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.stash.get(IMPLEMENTATIONS, []) and not config.stash[OPTIONS].stats:
        terminalreporter.write_line(f"dspark:{_checks_only(config)}")


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
    """One case of the standard matrix for one sampler: its per-call checks."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        from dataclasses import replace

        from harness.defaults import REFERENCE
        from harness.judge import judge
        from harness.plugins.implementations import builtin_implementations

        options = self.options
        require = options.roles.require
        implementations = [*builtin_implementations((REFERENCE,)), self.implementation]
        judgement = judge([self.case], implementations, options=replace(options, stats=False))
        held = judgement.held_verdict(self.implementation.name)
        verdict = held.verdict
        if not verdict.judged:  # nothing ran: no claim either way
            pytest.skip(f"{self.case.label()}: {_outside_contract(judgement, verdict.name)}")
        if not held.ok:
            lines = [
                f"{f.check} [{f.tier}]: {f.detail}"
                for f in verdict.failures
                if require.includes(f.tier)  # the evidence of what it is held to
            ]
            raise SamplerCheckFailure(
                f"{self.implementation.name} is not {require.label} on {self.case.label()}"
                f"{_checks_only(self.config)}:\n" + "\n".join(lines)
            )


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
    """The statistical oracle's verdict on one sampler, at the report's defaults."""

    def runtest(self) -> None:
        from harness.testing import oracle_verdict

        statistical = oracle_verdict(
            self.implementation,
            threads=self.options.threads,
            verifier_noise=self.options.verifier_noise,
            jobs=self.options.jobs,
        )
        if statistical.failed:
            raise SamplerCheckFailure(
                f"{self.implementation.name} is NOT lossless: {statistical.describe()}"
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


class DsparkSampler(pytest.Collector):
    """One sampler's tests, ``dspark[NAME]``: one per case of the standard matrix and,
    unless ``--dspark-no-stats``, one for the statistical oracle; marked ``dspark``."""

    def __init__(self, *, implementation: Implementation, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.implementation = implementation
        self.add_marker(MARKER)

    def collect(self) -> list[pytest.Item]:
        from harness.pipeline.matrix import standard_matrix

        implementation = self.implementation
        items: list[pytest.Item] = [
            DsparkCaseItem.from_parent(
                self, name=case.label(), implementation=implementation, case=case
            )
            for case in standard_matrix()
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
