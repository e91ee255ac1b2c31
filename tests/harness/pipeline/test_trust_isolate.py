"""One failure boundary, and ``--isolate`` as a real boundary: whatever a sampler raises
in any stage is its recorded failure; under ``--isolate`` plug-in code runs only in its
worker and results cross as plain tensors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import wire
from harness.case import make_case
from harness.cli import main
from harness.pipeline.compare import evaluate_run
from harness.pipeline.isolation import make_executor
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.helpers import run_harness, subprocess_env
from tests.plugins import untrusted_samplers

PLANTED = "tests.plugins.untrusted_samplers"
HOSTILE_FILE = "tests/plugins/hostile/tampers_with_the_judge.py"
CORRECT_FILE = "tests/plugins/upstream/dspark_after_fix.py"
CASE = make_case(bs=2, gamma=3, vocab_size=33, hidden_size=8, markov_rank=4, seed=3)
SMALL_STATS = ["--rows", "300", "--rounds", "2", "--heads", "vanilla"]


def _case_args(tmp_path: Path, count: int = 2) -> list[str]:
    paths = []
    for seed in range(count):
        path = tmp_path / f"case{seed}.json"
        make_case(bs=2, gamma=3, vocab_size=33, hidden_size=8, markov_rank=4, seed=seed).save(path)
        paths += ["--case", str(path)]
    return paths


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, env=subprocess_env(), timeout=900)


@pytest.mark.e2e
def test_under_isolate_a_plugin_tampering_at_import_and_at_exit_cannot_make_a_pass(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    argv = ["compare", *_case_args(tmp_path), "--only", "reference,fixed", "--isolate"]
    done = _harness(*argv, "--impl", f"bad={HOSTILE_FILE}", "--out-dir", str(out))
    assert done.returncode == 1, done.stderr
    assert "VERDICT: FAIL" in (out / "compare.txt").read_text()
    report = json.loads((out / "compare.json").read_text())
    assert not report["ok"] and len(report["cases"]) == 2
    assert not report["judgement"]["implementations"]["bad"]["lossless"]
    assert report["judgement"]["implementations"]["fixed"]["lossless"]


@pytest.mark.e2e
def test_under_isolate_a_correct_file_plugin_passes_and_is_never_imported_by_the_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", *_case_args(tmp_path), "--only", "reference,fixed", "--isolate"]
    argv += ["--impl", f"only_there={CORRECT_FILE}", "--out-dir", str(tmp_path / "out")]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "[ok] only_there: clean on 2/2 cases — lossless and drop-in" in stdout
    assert "in-process" not in stdout
    assert "dspark_impl_only_there" not in sys.modules


def test_in_process_the_report_says_plugin_code_shares_the_judge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compare", *_case_args(tmp_path, 1), "--only", "reference,fixed", "--no-stats"]
    argv += ["--impl", f"mine={PLANTED}:SlowSampler", "--out-dir", str(tmp_path / "out")]
    assert main(argv) == 0
    assert "(in-process: plug-in code shares the judge; --isolate keeps it out)" in (
        capsys.readouterr().out
    )


def test_a_command_without_isolate_names_no_isolate_option() -> None:
    """``releases`` (each row judged in a process of its own) and the other commands
    that take ``--impl`` without ``--isolate`` say the plug-in shares the judge, and do
    not point to an option they lack."""
    from harness.cli import build_parser
    from harness.cli.emit import IN_PROCESS_NOTE, plugin_note

    parser = build_parser()
    releases = parser.parse_args(["releases", "--sglang", "none", "--impl", "x=m:C"])
    assert not hasattr(releases, "isolate")
    assert plugin_note(releases) == IN_PROCESS_NOTE
    compare = parser.parse_args(["compare", "--impl", "x=m:C"])
    assert plugin_note(compare) == f"{IN_PROCESS_NOTE}; --isolate keeps it out"
    assert plugin_note(parser.parse_args(["compare", "--impl", "x=m:C", "--isolate"])) is None
    assert plugin_note(parser.parse_args(["compare"])) is None


@pytest.mark.parametrize("isolate", [False, pytest.param(True, marks=pytest.mark.e2e)])
def test_tensor_subclass_outputs_are_refused_with_or_without_isolate(isolate: bool) -> None:
    subclass = Implementation("subclass", untrusted_samplers.TensorSubclassSampler, "tests")
    with make_executor(isolate=isolate) as executor:
        run = run_case(CASE, [*builtin_implementations(), subclass], executor=executor)
    error = run.results["subclass"].error
    assert error is not None and error.type == "OutputError"
    assert "plain torch.Tensor" in error.message
    for result in run.results.values():
        assert result.tokens is None or type(result.tokens) is torch.Tensor
    verdict = evaluate_run(run, require_observable=False)
    assert verdict.failed_checks("subclass")
    assert not verdict.failed_checks("fixed")


TIMING = ["work", "--timing", "--repeats", "1", "--hidden-size", "64", "--no-callgrind"]


@pytest.mark.parametrize(
    ("command", "sampler"),
    [  # one command per stage the exit can happen in: matrix, oracle, work, timing
        (["report", "--no-work", "--no-stats"], "SystemExitSampler"),
        (["stats", *SMALL_STATS], "SystemExitAtStatsSizeSampler"),
        (["work"], "SystemExitSampler"),
        ([*TIMING, "--pair", "planted,fixed"], "SystemExitSampler"),
        pytest.param(
            [*TIMING, "--isolate", "--pair", "planted,fixed"],
            "SystemExitSampler",
            marks=pytest.mark.e2e,
        ),
    ],
    ids=["report", "stats-at-stats-size", "work", "timing", "timing-isolate"],
)
def test_a_system_exit_zero_sampler_makes_every_command_exit_1_with_a_complete_report(
    command: list[str], sampler: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = [*command, "--impl", f"planted={PLANTED}:{sampler}", "--out-dir", str(out)]
    code = main(argv)
    capsys.readouterr()
    report = json.loads((out / f"{command[0]}.json").read_text())
    assert code == 1 and not report["ok"]
    assert report["sections"], "the report has its sections"
    text = (out / f"{command[0]}.txt").read_text()
    assert "VERDICT: FAIL" in text and "SystemExit" in text


def test_a_slow_sampler_that_reaches_the_time_limit_in_the_oracle_is_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["stats", *SMALL_STATS, "--time-limit", "1"]
    argv += ["--impl", f"slow={PLANTED}:SlowAtStatsSizeSampler", "--out-dir", str(out)]
    assert main(argv) == 1
    stdout = capsys.readouterr().out
    assert "slow not judged (time limit reached" in stdout
    assert "slow REJECTED" not in stdout and "slow raised" not in stdout
    section = json.loads((out / "stats.json").read_text())["sections"][0]
    result = section["data"]["by_verifier"]["chain"]["slow"]
    assert result["error"] is None and "time limit" in result["not_judged"]


@pytest.mark.e2e
def test_a_segfaulting_sampler_under_report_isolate_gives_a_complete_report_and_exit_1(
    tmp_path: Path,
) -> None:
    """It segfaults at the oracle's batch size only: the stage that ran in process before."""
    out = tmp_path / "out"
    impl = f"planted={PLANTED}:SegfaultAtStatsSizeSampler"
    done = _harness("report", "--isolate", "--impl", impl, "--out-dir", str(out))
    assert done.returncode == 1, done.stderr
    report = json.loads((out / "report.json").read_text())
    titles = [s["title"] for s in report["sections"]]
    assert any("statistical" in t.lower() for t in titles), titles
    assert any("work" in t.lower() for t in titles), titles
    planted = report["judgement"]["implementations"]["planted"]
    assert not planted["lossless"]
    assert "WorkerDied" in planted["statistical"]["error"]
    assert "SIGSEGV" in planted["statistical"]["error"]
    assert report["judgement"]["implementations"]["fixed"]["lossless"]


@pytest.mark.e2e
def test_a_worker_is_not_told_the_out_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["compare", *_case_args(tmp_path, 1), "--only", "reference,fixed", "--isolate"]
    argv += ["--impl", f"nosy={PLANTED}:CommandLineSampler", "--out-dir", str(out), "--no-stats"]
    done = _harness(*argv)
    assert done.returncode == 1, done.stderr
    error = json.loads((out / "compare.json").read_text())["cases"][0]["implementations"]
    message = error["nosy"]["error"]["message"]
    assert message.startswith("argv:") and str(out) not in message


def test_answers_cross_as_plain_data_and_plain_tensors_only() -> None:
    tensors = [
        torch.arange(5),
        torch.tensor([True, False]),
        torch.randn(2, 3).to(torch.bfloat16),
        torch.empty(0, 3),
        torch.tensor(3.5),
    ]
    for tensor in tensors:
        back = wire.read_answer(wire.write_answer(tensor))
        assert type(back) is torch.Tensor and back.dtype == tensor.dtype
        assert torch.equal(back, tensor)
    with pytest.raises(wire.WireError, match=r"not a plain torch\.Tensor"):
        wire.write_answer(torch.zeros(2).as_subclass(untrusted_samplers.AlwaysEqualTensor))
    subclass = io.BytesIO()  # written by a worker that does not refuse it: the reader does
    torch.save([torch.zeros(2).as_subclass(untrusted_samplers.AlwaysEqualTensor)], subclass)
    with pytest.raises(wire.WireError, match=r"may not cross.*AlwaysEqualTensor"):
        wire.read_answer(subclass.getvalue())
    popen = io.BytesIO()  # a class reference
    torch.save({"args": ["sh"], "class": subprocess.Popen}, popen)
    with pytest.raises(wire.WireError, match=r"may not cross.*Popen"):
        wire.read_answer(popen.getvalue())
