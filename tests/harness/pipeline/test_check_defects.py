"""Every check fails on the defect aimed at it, and on nothing else.

Each check of the registry (``harness.pipeline.checks.CHECKS``) has exactly one planted
defect in ``tests/plugins/check_defects.py``: its sampler (``tests/plugins``), the case of
this table that exposes it and the other checks it must fail with; one test per
registered check runs it. Add a check by declaring it in the registry and its defect
there.

Self-checks need no second implementation, so a defect runs alone unless
``against_reference``: a defect that changes the emitted tokens, logits or confidence
also differs from the reference by construction, and ``matches_reference`` has its own
defect (a self-consistent sampler that is not drop-in). Support has no defect of its
own: no token wins the race at zero probability, so a recorded draw cannot explain a
zero-probability token and noise replay fails with it.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from harness.case import Case, make_case
from harness.pipeline.checks import CHECKS, Check, CheckResult
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins.check_defects import PLANTED_DEFECTS, PlantedDefect
from tests.plugins.planted_defects import DroppedLogitSampler

SHAPE = {"bs": 4, "gamma": 4, "vocab_size": 64, "hidden_size": 16, "markov_rank": 8}
MIXED = (False, True, False, False)  # one greedy row among sampled ones
FOLDED = make_case(**SHAPE, greedy_rows=MIXED, seed=11, name="folded, mixed rows")
FOLDED_CONFIDENCE = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, seed=12)
GREEDY_FOLD = make_case(**SHAPE, greedy_rows=(True,) * 4, folded_sampling=False, seed=13)
COLD = make_case(**SHAPE, temperature=1e-3, seed=14, name="folded, T=0.001")
BUCKETED = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, max_bs=6, seed=15)
LIFE = make_case(**SHAPE, greedy_rows=MIXED, max_bs=6, replays=8, seed=16, name="a life")
CASES = {  # the names a planted defect's ``case`` takes
    "folded": FOLDED,
    "folded, confidence": FOLDED_CONFIDENCE,
    "greedy fold": GREEDY_FOLD,
    "cold": COLD,
    "bucketed": BUCKETED,
    "life": LIFE,
}
DEFECT = "defect"


def defect_sampler(defect: PlantedDefect) -> type:
    if defect.package is not None and importlib.util.find_spec(defect.package) is None:
        pytest.skip(f"{defect.sampler} needs the {defect.package} package")
    module, _, name = defect.sampler.partition(":")
    sampler: type = getattr(importlib.import_module(f"tests.plugins.{module}"), name)
    return sampler


def _checks_of_defect(defect: PlantedDefect, *, case: Case | None = None) -> list[CheckResult]:
    """The defect's checks on its declared case (or on ``case``)."""
    sampler = defect_sampler(defect)
    planted = Implementation(DEFECT, sampler, f"tests.plugins:{sampler.__name__}")
    others = builtin_implementations(("reference",)) if defect.against_reference else []
    run = run_case(CASES[defect.case] if case is None else case, [*others, planted])
    return evaluate_run(run, require_observable=False).checks[DEFECT]


def test_every_registered_check_has_exactly_one_planted_defect() -> None:
    assert list(PLANTED_DEFECTS) == [check.name for check in CHECKS]  # one each, in order


def test_every_planted_defect_sampler_is_aimed_at_one_check() -> None:
    samplers = [defect.sampler for defect in PLANTED_DEFECTS.values()]
    assert len(set(samplers)) == len(samplers)


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.name)
def test_each_planted_defect_fails_exactly_its_checks(check: Check) -> None:
    checks = _checks_of_defect(PLANTED_DEFECTS[check.name])
    failed = {c.name for c in checks if c.failed}
    assert failed == {check.name, *PLANTED_DEFECTS[check.name].also_fails}, [
        (c.name, c.status, c.detail) for c in checks
    ]


def test_every_registered_check_runs_in_registry_order() -> None:
    # the matches_reference defect is self-consistent and has a life, so every check runs
    (full,) = [check for check in CHECKS if check.name == "matches_reference"]
    names = [c.name for c in _checks_of_defect(PLANTED_DEFECTS[full.name])]
    assert names == [check.name for check in CHECKS]


@pytest.mark.parametrize("case", list(CASES.values()), ids=Case.label)
def test_fixed_passes_every_check_on_the_defect_cases(case: Case) -> None:
    run = run_case(case, builtin_implementations(("reference", "fixed")))
    checks = evaluate_run(run, require_observable=False).checks["fixed"]
    assert not [c for c in checks if c.failed], [(c.name, c.detail) for c in checks]


@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.name)
def test_a_reduced_draft_vocabulary_changes_no_checks_meaning(check: Check) -> None:
    """The same defect on its case with a reduced draft vocabulary (24 of the 64 ids) fails
    the same checks, and nothing else: no check reads the option."""
    case = CASES[PLANTED_DEFECTS[check.name].case]
    checks = _checks_of_defect(PLANTED_DEFECTS[check.name], case=case.with_changes(draft_vocab=24))
    failed = {c.name for c in checks if c.failed}
    assert failed == {check.name, *PLANTED_DEFECTS[check.name].also_fails}, [
        (c.name, c.status, c.detail) for c in checks
    ]


@pytest.mark.parametrize("draft_vocab", [0, 24], ids=["full", "reduced"])
def test_minus_inf_is_written_only_where_the_drafter_has_no_entry(draft_vocab: int) -> None:
    """``outputs_written`` takes ``-inf`` where the base logit is ``-inf`` (outside a reduced
    draft vocabulary) and nowhere else: over an entry the law has, it is unwritten."""
    planted = Implementation(DEFECT, DroppedLogitSampler, "tests.plugins:DroppedLogitSampler")
    run = run_case(FOLDED.with_changes(draft_vocab=draft_vocab), [planted])
    checks = evaluate_run(run, require_observable=False).checks[DEFECT]
    failed = {c.name for c in checks if c.failed}
    assert failed == {"outputs_written", "teacher_forcing"}, [(c.name, c.detail) for c in checks]
