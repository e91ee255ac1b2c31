"""Server-shaped sampler modules load from their files unchanged and get a true verdict.

The two modules under ``tests/plugins/upstream`` import from ``sglang.*``, read the
fused switch from the environment, call the confidence function by keyword and (after
the fix) require ``tp_sync``. Loaded with ``--impl NAME=FILE.py`` and no adapter, the
after-fix one is clean and equal to the built-in fixed sampler on every standard case,
and the before-fix one reproduces every ledger class the built-in legacy sampler shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.pipeline.compare import CaseVerdict, evaluate_run
from harness.pipeline.control_flow import legacy_pass1_error
from harness.pipeline.ledger import observe_divergence
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.runner import CaseRun, ImplResult, run_case
from harness.plugins.eras import Era
from harness.plugins.implementations import parse_impl_spec, select_implementations
from harness.plugins.sglang_surface import SURFACE
from harness.upstream.dispatch import provenance
from reference import VanillaMarkovHead
from tests.session_share import computed_once

UPSTREAM = Path("tests/plugins/upstream")
AFTER = f"after={UPSTREAM}/dspark_after_fix.py"
BEFORE = f"before={UPSTREAM}/dspark_before_fix.py"


def _sglang_modules() -> list[str]:
    return sorted(name for name in sys.modules if name.split(".")[0] == "sglang")


@pytest.fixture(scope="module")
def matrix_runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[CaseRun, CaseVerdict]]:
    """The standard matrix for the built-ins and both upstream-shaped files (once a
    session)."""
    return computed_once(tmp_path_factory, "upstream-files-matrix-runs", _matrix_runs)


def _matrix_runs() -> list[tuple[CaseRun, CaseVerdict]]:
    implementations = select_implementations(["reference", "fixed", "legacy"], [AFTER, BEFORE])
    runs = [run_case(case, implementations) for case in standard_matrix()]
    return [(run, evaluate_run(run, require_observable=True)) for run in runs]


def _same_outputs(mine: ImplResult, builtin: ImplResult) -> bool:
    def equal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
        return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))

    if mine.error is not None or builtin.error is not None:
        return mine.error is not None and builtin.error is not None
    return (
        equal(mine.tokens, builtin.tokens)
        and equal(mine.corrected, builtin.corrected)
        and equal(mine.confidence, builtin.confidence)
    )


def test_server_modules_load_on_the_harness_surface_and_leave_sys_modules_as_found() -> None:
    before = _sglang_modules()
    after_fix, before_fix = parse_impl_spec(AFTER), parse_impl_spec(BEFORE)
    assert (after_fix.era, before_fix.era) == (Era.PR36934, Era.PR36934)  # detected
    assert (after_fix.kind, before_fix.kind) == ("class", "class")
    assert _sglang_modules() == before == []
    assert provenance(after_fix) == {
        "name": "after",
        "spec": AFTER,
        "kind": "class",
        "era": "pr36934",
        "convention": "server",
        "adaptations": [],
    }


def test_the_surface_vanilla_markov_is_the_reference_vanilla_head() -> None:
    module = sys.modules[parse_impl_spec(AFTER).sampler_class.__module__]
    assert module.VanillaMarkov is VanillaMarkovHead
    assert set(SURFACE["sglang.srt.models.dspark"]) == {"VanillaMarkov"}


def test_after_fix_module_is_clean_on_every_standard_case(matrix_runs) -> None:
    for run, verdict in matrix_runs:
        failed = [c.name for c in verdict.failed_checks("after")]
        assert failed == [], f"{run.case.label()}: {failed}"


def test_after_fix_module_is_bit_exact_against_the_reference_in_float32(matrix_runs) -> None:
    float32 = [(run, v) for run, v in matrix_runs if run.case.dtype == "float32"]
    assert len(float32) >= 10
    for run, verdict in float32:
        (check,) = [c for c in verdict.checks["after"] if c.name == "matches_reference"]
        assert check.detail == "bit-exact", run.case.label()


def test_after_fix_module_equals_the_builtin_fixed_sampler(matrix_runs) -> None:
    for run, _ in matrix_runs:
        assert _same_outputs(run.results["after"], run.results["fixed"]), run.case.label()


def test_fused_switch_reaches_the_server_constructor(matrix_runs) -> None:
    fused = [run for run, _ in matrix_runs if run.case.fused_path_available]
    assert fused
    for run in fused:
        assert run.results["after"].work.fused_calls == 1, run.case.label()
        assert run.results["after"].work.walks == 0, run.case.label()


def test_before_fix_module_shows_every_ledger_class_legacy_shows(matrix_runs) -> None:
    for run, _ in matrix_runs:
        results = run.results
        theirs = observe_divergence(
            run, results["before"], results["after"], require_observable=True
        )
        ours = observe_divergence(run, results["legacy"], results["fixed"], require_observable=True)
        assert theirs.holds, f"{run.case.label()}: {theirs.problems}"
        assert theirs.observed == ours.observed, run.case.label()
        assert _same_outputs(results["before"], results["legacy"]), run.case.label()


def test_before_fix_module_fails_teacher_forcing_on_sampled_cases(matrix_runs) -> None:
    sampled = [
        (run, v)
        for run, v in matrix_runs
        if run.case.has_sampled_rows and legacy_pass1_error(run.case) is None
    ]
    assert len(sampled) >= 5
    for run, verdict in sampled:
        failed = {c.name for c in verdict.failed_checks("before")}
        assert {"teacher_forcing", "single_walk", "matches_reference"} <= failed, run.case.label()


def test_cli_compare_judges_both_files_without_an_adapter(tmp_path: Path, capsys) -> None:
    """The command line loads both files as they are; their oracle verdicts are
    tests/harness/oracles/test_stats_roles.py's."""
    argv = ["compare", "--only", "reference,fixed", "--no-stats", "--quiet", "--long"]
    assert main([*argv, "--out-dir", str(tmp_path), "--impl", AFTER, "--impl", BEFORE]) == 1
    out = capsys.readouterr().out
    assert "after: clean on" in out
    assert "before: FAILS" in out
    assert "teacher_forcing: corrected_out differs" in out
