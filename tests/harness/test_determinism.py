"""Determinism: the same case and seed give byte-identical results, and the harness
leaves the caller's global state (CPU RNG, default dtype, environment) as it found it.

Wall times live under the report's ``timing`` key; everything else must repeat exactly,
within one process and across processes with different hash seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.case import Case
from harness.options import RunOptions
from harness.pipeline.compare import compare
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.runner import run_case
from harness.plugins.implementations import builtin_implementations
from tests.helpers import run_harness, small_case, subprocess_env

# A repeat's point is a second decode: never the session's kept one (tests/oracle_memo.py).
pytestmark = pytest.mark.fresh_oracle

# One of each kind of evidence: sampled rows, reduced precision, the fused path, a raise.
MATRIX_CASES = (
    "folded-sampled/vanilla",
    "folded-sampled/rnn/bf16",
    "greedy-fold/fused/vanilla/bf16",
    "no-anchor/gated/folded",
)
SMALL_CASE = small_case(seed=7, gamma=3, vocab_size=40, temperature=0.8, confidence=False)


def _matrix_cases() -> list[Case]:
    cases = [case for case in standard_matrix(seed=3) if case.name in MATRIX_CASES]
    assert [case.name for case in cases] == list(MATRIX_CASES)
    return cases


def _verdicts_text(cases: list[Case]) -> str:
    verdicts = compare(
        cases, builtin_implementations(), options=RunOptions(require_observable=True)
    )
    return json.dumps(verdicts, sort_keys=True)


def _without_timing(report: dict[str, Any]) -> dict[str, Any]:
    assert "timing" in report
    return {key: value for key, value in report.items() if key != "timing"}


@contextmanager
def _caller_default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Run the body as a caller whose default dtype is ``dtype``; put float32 back after."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def test_same_cases_and_seed_give_byte_identical_verdict_json() -> None:
    cases = _matrix_cases()
    torch.manual_seed(1)
    first = _verdicts_text(cases)
    torch.manual_seed(2)  # the caller's RNG state must not matter: each run seeds its own
    torch.rand(100)
    second = _verdicts_text(cases)
    assert first == second


@pytest.mark.e2e
def test_compare_json_repeats_apart_from_timing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    case_file = tmp_path / "case.json"
    SMALL_CASE.save(case_file)
    reports, written = [], []
    for run in ("a", "b"):
        out_dir = tmp_path / run
        argv = ["compare", "--case", str(case_file), "--json", "--quiet", "--out-dir"]
        assert main([*argv, str(out_dir)]) == 0
        reports.append(_without_timing(json.loads(capsys.readouterr().out)))
        written.append({p.name: p.read_text() for p in sorted(out_dir.iterdir())})
    assert reports[0] == reports[1]
    assert json.dumps(reports[0], sort_keys=True) == json.dumps(reports[1], sort_keys=True)
    assert written[0].keys() == {"compare.json", "compare.md", "compare.txt", "compare.cases.jsonl"}
    assert written[0]["compare.cases.jsonl"] == written[1]["compare.cases.jsonl"]
    for name in ("compare.md", "compare.txt"):
        assert written[0][name] == written[1][name]
    files = [_without_timing(json.loads(w["compare.json"])) for w in written]
    assert files[0] == files[1] == reports[0]


def _run_harness(args: list[str], *, hash_seed: str) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, env=subprocess_env(PYTHONHASHSEED=hash_seed))


@pytest.mark.e2e
def test_compare_json_repeats_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    case_file = tmp_path / "case.json"
    SMALL_CASE.save(case_file)
    reports = []
    for hash_seed in ("1", "2"):
        args = ["compare", "--case", str(case_file), "--json", "--quiet"]
        result = _run_harness([*args, "--out-dir", str(tmp_path / hash_seed)], hash_seed=hash_seed)
        assert result.returncode == 0, result.stderr
        reports.append(json.dumps(_without_timing(json.loads(result.stdout)), sort_keys=True))
    assert reports[0] == reports[1]


def _global_state() -> tuple[torch.Tensor, torch.dtype, torch.device, dict[str, str]]:
    environ = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return torch.get_rng_state(), torch.get_default_dtype(), torch.get_default_device(), environ


def _assert_same_global_state(
    before: tuple[torch.Tensor, torch.dtype, torch.device, dict[str, str]],
) -> None:
    rng_state, dtype, device, environ = _global_state()
    assert torch.equal(rng_state, before[0]), "the caller's CPU RNG state moved"
    assert dtype == before[1]
    assert device == before[2]
    assert environ == before[3]


def test_run_case_leaves_rng_dtype_and_environment_as_found() -> None:
    torch.manual_seed(2024)
    before = _global_state()
    run_case(SMALL_CASE, builtin_implementations())
    _assert_same_global_state(before)


def test_run_case_leaves_a_non_default_dtype_as_found() -> None:
    with _caller_default_dtype(torch.float64):
        before = _global_state()
        run_case(SMALL_CASE, builtin_implementations())
        _assert_same_global_state(before)


def test_cli_main_leaves_rng_dtype_and_environment_as_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    case_file = tmp_path / "case.json"
    SMALL_CASE.save(case_file)
    torch.manual_seed(99)
    before = _global_state()
    argv = ["compare", "--case", str(case_file), "--quiet", "--out-dir", str(tmp_path / "out")]
    assert main([*argv, "--jobs", "1"]) == 0  # the oracle in this process too
    capsys.readouterr()
    _assert_same_global_state(before)


def test_caller_default_dtype_does_not_change_the_case_numbers() -> None:
    cases = _matrix_cases()[:1]
    as_float32 = _verdicts_text(cases)
    with _caller_default_dtype(torch.float64):
        as_float64 = _verdicts_text(cases)
    assert as_float32 == as_float64


_FRESH_PROCESS_RUN = """
import os, torch
from harness.case import make_case
from harness.plugins.implementations import builtin_implementations
from harness.pipeline.runner import run_case
before = dict(os.environ)
run_case(make_case(bs=1, gamma=2, vocab_size=9, hidden_size=4, markov_rank=2),
         builtin_implementations())
print(sorted(set(os.environ.items()) ^ set(before.items())))
"""


@pytest.mark.e2e
def test_first_run_in_a_fresh_process_leaves_the_environment_as_found() -> None:
    env = subprocess_env(without=("TORCHINDUCTOR_CACHE_DIR",))
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS_RUN],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
