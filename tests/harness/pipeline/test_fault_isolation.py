"""A broken implementation is a reported failure with its reason; the run goes on, and
under ``--isolate`` even a crash or an unstoppable hang of its process is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.options import RunOptions
from harness.pipeline import isolation
from harness.pipeline.compare import evaluate_run
from harness.pipeline.isolation import make_executor
from harness.pipeline.runner import run_case, run_in_domain
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.helpers import small_case
from tests.plugins import broken_samplers, untrusted_samplers

CASE = small_case(seed=3)


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that never answers is killed 1 s after its limit rather than 10 s: what is
    tested is that it is killed, and a sampler that never answers never answers sooner
    on a quiet machine."""
    monkeypatch.setattr(isolation, "ANSWER_GRACE_S", 1.0)


@pytest.mark.parametrize(
    ("sampler_class", "failed_check", "reason"),
    [
        (broken_samplers.RaisingSampler, "ran", "RuntimeError: planted failure"),
        (broken_samplers.WrongShapeSampler, "ran", "OutputError: out must be an int64 vector"),
        (broken_samplers.HalfWritingSampler, "outputs_written", "token ids outside [0, 48)"),
        (broken_samplers.NanWritingSampler, "outputs_written", "corrected_out unwritten or not"),
        (broken_samplers.StaleCorrectedSampler, "teacher_forcing", "corrected_out differs"),
    ],
)
def test_broken_implementation_is_flagged_and_the_others_still_run(
    sampler_class: type, failed_check: str, reason: str
) -> None:
    broken = Implementation("broken", sampler_class, "tests")
    run = run_case(CASE, [*builtin_implementations(), broken])
    verdict = evaluate_run(run, require_observable=False)
    failed = {c.name: c.detail for c in verdict.failed_checks("broken")}
    assert failed_check in failed, failed
    assert reason in failed[failed_check]
    assert not verdict.failed_checks("fixed")
    assert verdict.ledger is not None and verdict.ledger.holds


def test_hanging_implementation_is_stopped_by_the_time_limit() -> None:
    run_case(CASE, builtin_implementations())  # warm up, so only the hang meets the limit
    hanging = Implementation("hanging", broken_samplers.HangingSampler, "tests")
    run = run_case(
        CASE, [hanging, *builtin_implementations()], options=RunOptions(time_limit_s=2.0)
    )
    error = run.results["hanging"].error
    assert error is not None and error.type == "CallTimeout"
    assert "time limit of 2 s" in error.message
    verdict = evaluate_run(run, require_observable=False)
    assert not verdict.failed_checks("fixed")
    assert verdict.ledger is not None and verdict.ledger.holds


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("sampler_name", "reason"),
    [
        ("AbortingSampler", "the worker process died from signal SIGABRT (-6)"),
        ("SegfaultingSampler", "the worker process died from signal SIGSEGV (-11)"),
        ("ExitingSampler", "the worker process exited with status 0 before returning a result"),
    ],
)
def test_under_isolate_a_process_crash_is_a_recorded_failure_in_a_complete_report(
    sampler_name: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = tmp_path / "case.json"
    CASE.save(case)
    impl = f"planted=tests.plugins.untrusted_samplers:{sampler_name}"
    argv = ["compare", "--case", str(case), "--case", str(case), "--impl", impl, "--isolate"]
    argv += ["--no-stats"]  # a crash in the oracle's stage: test_trust_isolate's report
    assert main([*argv, "--out-dir", str(tmp_path / "out")]) == 1
    capsys.readouterr()
    report = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert len(report["cases"]) == 2
    for record in report["cases"]:
        planted = record["implementations"]["planted"]
        assert planted["error"] == {"type": "WorkerDied", "message": reason}
        assert all(c["status"] != "fail" for c in record["implementations"]["fixed"]["checks"])
        assert record["ledger"]["holds"]


@pytest.mark.e2e
def test_under_isolate_a_sampler_that_swallows_every_timeout_is_killed_and_recorded(
    short_grace: None,
) -> None:
    """Only the unstoppable sampler meets the tight limit; the built-ins of the same case
    run in their own worker under the default limit, so a loaded machine cannot time them
    out too."""
    unstoppable = Implementation("unstoppable", untrusted_samplers.UnstoppableSampler, "tests")
    with make_executor(isolate=True) as executor:
        killed = run_in_domain(
            unstoppable, case=CASE, options=RunOptions(time_limit_s=1.0), executor=executor
        )
        error = killed.error
        assert error is not None and error.type == "CallTimeout"
        assert "the worker process was killed" in error.message
        run = run_case(CASE, builtin_implementations(), executor=executor)
    run.results = {"unstoppable": killed, **run.results}
    verdict = evaluate_run(run, require_observable=False)
    assert verdict.failed_checks("unstoppable")
    for name in ("reference", "fixed"):
        assert run.results[name].error is None and not verdict.failed_checks(name), name
    assert verdict.ledger is not None and verdict.ledger.holds


@pytest.mark.e2e
def test_under_isolate_a_sampler_that_ignores_sigalrm_and_hangs_is_killed_and_recorded(
    short_grace: None,
) -> None:
    """In process nothing stops it (it turned the time limit's signal off); its worker is
    killed once the limit and the answer's grace have passed, long before it would end."""
    ignoring = Implementation("ignoring", untrusted_samplers.AlarmIgnoringSampler, "tests")
    with make_executor(isolate=True) as executor:
        run = run_case(CASE, [ignoring], options=RunOptions(time_limit_s=0.5), executor=executor)
    error = run.results["ignoring"].error
    assert error is not None and error.type == "CallTimeout"
    assert "the worker process was killed" in error.message


@pytest.mark.e2e
def test_isolated_results_equal_in_process_results() -> None:
    implementations = builtin_implementations()
    here = run_case(CASE, implementations)
    with make_executor(isolate=True) as executor:
        there = run_case(CASE, implementations, executor=executor)
    for name in here.results:
        mine, theirs = here.results[name], there.results[name]
        for field in ("tokens", "corrected", "confidence"):
            a, b = getattr(mine, field), getattr(theirs, field)
            assert (a is None and b is None) or torch.equal(a, b), (name, field)
        assert mine.work == theirs.work
        assert len(mine.noise_draws) == len(theirs.noise_draws)
        assert all(
            torch.equal(a, b) for a, b in zip(mine.noise_draws, theirs.noise_draws, strict=True)
        )
