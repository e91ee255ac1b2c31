"""A pytest plugin: ``pytest --dspark-impl NAME=TARGET`` judges a sampler on the standard
matrix, one test per case, the evidence of every failing check in the failure message.

``TARGET`` is what ``--impl`` takes (``module:Class``, a file, or a function).
``--dspark-require lossless`` relaxes the default ``drop-in``. The items are built
the same way on every process, so the plugin works under ``pytest -n auto``. Nothing
is imported before it is used: the plugin costs nothing in a run that does not ask
for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from harness.pipeline.case import Case
    from harness.plugins.implementations import Implementation


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dspark", "DSpark draft-sampler verdicts")
    group.addoption(
        "--dspark-impl",
        action="append",
        default=[],
        metavar="NAME=TARGET",
        help="judge this sampler on the standard case matrix, one test per case (repeatable)",
    )
    group.addoption(
        "--dspark-require",
        choices=("lossless", "drop-in"),
        default="drop-in",
        help="what each --dspark-impl must meet (default drop-in)",
    )


class SamplerCheckFailure(Exception):
    """A case on which the sampler misses what it is required to meet."""


class DsparkCaseItem(pytest.Item):
    """One case of the standard matrix for one sampler."""

    def __init__(
        self, *, implementation: Implementation, case: Case, require: str, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.implementation = implementation
        self.case = case
        self.require = require

    def runtest(self) -> None:
        from harness.pipeline.compare import REFERENCE, evaluate_run
        from harness.pipeline.runner import run_case
        from harness.plugins.implementations import builtin_implementations

        run = run_case(self.case, [*builtin_implementations((REFERENCE,)), self.implementation])
        checks = evaluate_run(run, require_observable=False).checks[self.implementation.name]
        tiers = ("lossless",) if self.require == "lossless" else ("lossless", "drop_in")
        failing = [c for c in checks if c.failed and c.tier in tiers]
        if failing:
            lines = [f"{c.name} [{c.tier}]: {c.detail}" for c in failing]
            raise SamplerCheckFailure(
                f"{self.implementation.name} is not {self.require} on {self.case.label()}:\n"
                + "\n".join(lines)
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, SamplerCheckFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.name


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect among the items
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    specs = config.getoption("dspark_impl")
    if not specs:
        return
    from harness.pipeline.matrix import standard_matrix
    from harness.plugins.implementations import ImplementationError, parse_impl_spec

    require = config.getoption("dspark_require")
    for spec in specs:
        try:
            implementation = parse_impl_spec(spec)
        except ImplementationError as error:
            raise pytest.UsageError(f"--dspark-impl: {error}") from None
        for case in standard_matrix():
            items.append(
                DsparkCaseItem.from_parent(
                    session,
                    name=f"dspark[{implementation.name}][{case.label()}]",
                    implementation=implementation,
                    case=case,
                    require=require,
                )
            )
