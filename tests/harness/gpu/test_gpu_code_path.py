"""The GPU path's CPU side: what CI can check without a GPU.

- the CUDA-only entry points refuse the CPU with a clear error, and every module imports;
- the graph path (static buffers at max_bs, per-replay inputs and seeds, read-out,
  checks, ledger, redraw) runs end to end with ``EagerReplay`` standing in for a graph,
  and catches planted defects;
- the GPU figures' byte model, peak table and timing path;
- ``scripts/gpu_check.sh``: syntax, usage, and a full run on the CPU that still writes
  its results; ``tests/harness/gpu/test_gpu.py`` is all ``gpu``-marked and skips cleanly here.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.case import Case, build_inputs
from harness.cli import graphs as graphs_command
from harness.cli import main as cli_main
from harness.gpu import clocks, graphs, host_sync, kernel_bandwidth
from harness.gpu import figures as gpu_figures
from harness.gpu.graphs import (
    EagerReplay,
    GraphCaseResult,
    GraphRunner,
    capture_and_replay,
    replay_inputs,
    replay_records,
)
from harness.judgement import Judgement, RedrawVerdict, SyncVerdict, judge_records
from harness.options import RunOptions
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.gpu_figures import figures_section, sampler_time_blocks
from harness.render.graphs import graph_sections, redraw_section
from harness.render.host_sync import sync_section
from harness.render.sections import render_blocks
from tests.helpers import REPO_ROOT, subprocess_env
from tests.plugins.broken_samplers import HalfWritingSampler, StaleCorrectedSampler

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.sh"
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
ALL = builtin_implementations()


def _matrix_case(name: str) -> Case:
    return next(case for case in standard_matrix() if case.name == name)


def eager_replay_runner(device: torch.device) -> GraphRunner:
    del device  # the stand-in runs on whatever device the tensors live on
    return EagerReplay()


# -- CUDA-only entry points on a CPU -----------------------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda: capture_and_replay(_matrix_case("folded-sampled/vanilla"), ALL), id="capture"
        ),
        pytest.param(lambda: graphs.CudaGraphRunner(device="cpu"), id="runner"),
        pytest.param(
            lambda: host_sync.no_host_sync(_matrix_case("folded-sampled/vanilla"), ALL[1]),
            id="sync",
        ),
        pytest.param(lambda: kernel_bandwidth.peak_bandwidth(torch.device("cpu")), id="peak"),
        pytest.param(
            lambda: kernel_bandwidth.kernel_figure(dtype="float32", device=torch.device("cpu")),
            id="kernel",
        ),
    ],
)
def test_cuda_only_entry_points_refuse_a_cpu_device_by_name(call) -> None:
    with pytest.raises(RuntimeError, match=r"needs a CUDA device; got device 'cpu'"):
        call()


@NO_CUDA
def test_a_cuda_case_on_a_machine_without_cuda_says_there_is_none() -> None:
    case = _matrix_case("folded-sampled/vanilla").with_changes(device="cuda")
    with pytest.raises(RuntimeError, match=r"needs a CUDA device, and this machine has none"):
        capture_and_replay(case, ALL)
    with pytest.raises(RuntimeError, match=r"needs a CUDA device, and this machine has none"):
        host_sync.no_host_sync(case, ALL[1])


@pytest.mark.e2e
def test_gpu_modules_import_in_a_fresh_process_without_touching_cuda() -> None:
    code = (
        "import torch, harness.gpu.graphs, harness.gpu.figures; print(torch.cuda.is_initialized())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# -- the graph path with EagerReplay standing in -----------------------------------------------
def _judged(results: list[GraphCaseResult], *, require_coverage: bool) -> Judgement:
    """The judgement of every replay's records, as the graphs command forms it."""
    records = [record for result in results for record in replay_records(result.replays)]
    judgement = judge_records(records, options=RunOptions(require_observable=require_coverage))
    return replace(judgement, redraws=RedrawVerdict.of(results))


def test_graph_path_passes_fixed_and_holds_the_ledger_on_the_whole_standard_matrix() -> None:
    results = [
        capture_and_replay(case, ALL, replays=2, runner_factory=eager_replay_runner)
        for case in standard_matrix()
    ]
    judgement = _judged(results, require_coverage=True)
    sections = graph_sections(judgement)
    assert judgement.ok, [(s.title, s.verdict, s.text) for s in sections if not s.ok]
    assert all(section.ok for section in sections)  # each section shows its part's ok
    assert sections[0].title == "CUDA graph replays: Fixed sampler"
    assert "noise redrawn" in sections[-2].title
    for result in results:
        assert [v.case.name.rsplit(" ", 1)[-1] for v in result.replays] == ["0]", "1]"]
        json.dumps(result.to_json())  # the report's data is plain JSON


def test_replays_read_new_inputs_generated_from_the_seed_plus_the_replay_index() -> None:
    case = _matrix_case("folded-sampled/vanilla/V=2047/padded")  # bs=4 in buffers of max_bs=8
    base = build_inputs(case)
    assert replay_inputs(case, base=base, replay=0) is base
    second = replay_inputs(case, base=base, replay=1)
    fresh = build_inputs(case.with_changes(seed=case.seed + 1))
    assert second.model is base.model and second.sampling_info is base.sampling_info
    assert torch.equal(second.hidden_states, fresh.hidden_states)
    assert torch.equal(second.input_ids, fresh.input_ids)
    assert not torch.equal(second.hidden_states, base.hidden_states)

    static = graphs.StaticInputs.allocate(case)
    assert static.hidden_states.shape == (case.max_bs * case.query_rows, case.hidden_size)
    static.load(second)
    hidden, ids = static.call_arguments()
    assert torch.equal(hidden, second.hidden_states) and torch.equal(ids, second.input_ids)

    result = capture_and_replay(case, ALL, replays=2, runner_factory=eager_replay_runner)
    first_tokens, second_tokens = (v.results["fixed"].tokens for v in result.replays)
    assert first_tokens is not None and second_tokens is not None
    assert not torch.equal(first_tokens, second_tokens)
    assert all(not v.failed_checks("fixed") for v in result.replays)


def test_noise_drawn_in_the_captured_call_is_read_back_on_every_replay() -> None:
    case = _matrix_case("folded-sampled/gated+confidence")
    result = capture_and_replay(case, ALL, replays=2, runner_factory=eager_replay_runner)
    for verdict in result.replays:
        fixed, legacy = verdict.results["fixed"], verdict.results["legacy"]
        assert fixed.work.noise_calls == len(fixed.noise_draws) == case.gamma
        assert legacy.work.noise_calls == len(legacy.noise_draws) == 2 * case.gamma
        assert len(legacy.walk_tokens) == 2
        statuses = {c.name: c.status for c in verdict.checks["fixed"]}
        assert statuses["noise_replay"] == "pass"
        assert verdict.ledger is not None
        assert {"teacher_forcing_fails", "noise_doubled"} <= verdict.ledger.observed
    draws = [v.results["fixed"].noise_draws[0] for v in result.replays]
    assert not torch.equal(draws[0], draws[1])  # each replay's own draws, not the capture's


def test_redraw_check_separates_sampled_rows_from_greedy_rows() -> None:
    folded = capture_and_replay(
        _matrix_case("folded-sampled/vanilla"), ALL, replays=1, runner_factory=eager_replay_runner
    )
    for redraw in folded.redraws:
        assert redraw.ok
        assert redraw.noise_redrawn is redraw.sampled_tokens_differ is True
        assert redraw.greedy_tokens_equal is True
    greedy_fold = capture_and_replay(
        _matrix_case("greedy-fold/gated"), ALL, replays=1, runner_factory=eager_replay_runner
    )
    for redraw in greedy_fold.redraws:
        assert (redraw.noise_redrawn, redraw.sampled_tokens_differ) == (None, None)
        assert redraw.greedy_tokens_equal is True and redraw.ok


class ReseedingReplay(EagerReplay):
    """A broken graph: every replay restarts the generator, so the noise never changes."""

    def replay(self) -> None:
        torch.manual_seed(0)
        super().replay()


class FrozenReplay(EagerReplay):
    """A broken graph: a replay does nothing, so no output is ever rewritten."""

    def replay(self) -> None:
        pass


def test_a_graph_that_does_not_redraw_its_noise_fails_the_redraw_section() -> None:
    def reseeding(device: torch.device) -> GraphRunner:
        return ReseedingReplay()

    result = capture_and_replay(
        _matrix_case("folded-sampled/vanilla"), ALL, replays=1, runner_factory=reseeding
    )
    assert all(r.noise_redrawn is False and not r.ok for r in result.redraws)
    judgement = _judged([result], require_coverage=False)
    assert judgement.redraws is not None and not judgement.redraws.ok and not judgement.ok
    section = redraw_section(judgement.redraws)
    assert not section.ok and "do NOT redraw" in section.verdict


def test_a_replay_that_writes_nothing_fails_the_checks_on_the_poisoned_outputs() -> None:
    def frozen(device: torch.device) -> GraphRunner:
        return FrozenReplay()

    result = capture_and_replay(
        _matrix_case("folded-sampled/vanilla"),
        builtin_implementations(("fixed",)),
        replays=1,
        runner_factory=frozen,
    )
    failed = {c.name for c in result.replays[0].failed_checks("fixed")}
    assert "outputs_written" in failed


@pytest.mark.parametrize(
    ("sampler_class", "failing_check"),
    [(HalfWritingSampler, "outputs_written"), (StaleCorrectedSampler, "teacher_forcing")],
)
def test_planted_defects_are_named_through_the_graph_path(
    sampler_class: type, failing_check: str
) -> None:
    broken = Implementation("broken", sampler_class, "tests.plugins.broken_samplers")
    result = capture_and_replay(
        _matrix_case("folded-sampled/vanilla"),
        [*ALL, broken],
        replays=2,
        runner_factory=eager_replay_runner,
    )
    for verdict in result.replays:
        assert failing_check in {c.name for c in verdict.failed_checks("broken")}
        assert not verdict.failed_checks("fixed")
    judgement = _judged([result], require_coverage=False)
    assert not judgement.ok
    assert not all(section.ok for section in graph_sections(judgement))


def test_an_implementation_that_raises_is_recorded_on_every_replay() -> None:
    case = _matrix_case("no-anchor/gated/folded")  # legacy's pass-1 view raises
    result = capture_and_replay(case, ALL, replays=2, runner_factory=eager_replay_runner)
    for verdict in result.replays:
        assert verdict.results["legacy"].error is not None
        assert verdict.ledger is not None and verdict.ledger.observed == {"legacy_raises"}
    assert {r.implementation for r in result.redraws} == {"reference", "fixed"}


def test_capture_and_replay_leaves_the_global_rng_as_it_was() -> None:
    before = torch.get_rng_state()
    capture_and_replay(
        _matrix_case("folded-sampled/vanilla"), ALL, replays=1, runner_factory=eager_replay_runner
    )
    assert torch.equal(torch.get_rng_state(), before)


def test_capture_and_replay_rejects_zero_replays() -> None:
    with pytest.raises(ValueError, match="replays must be >= 1"):
        capture_and_replay(
            _matrix_case("folded-sampled/vanilla"),
            ALL,
            replays=0,
            runner_factory=eager_replay_runner,
        )


def test_sync_section_requires_every_implementation_but_legacy_to_be_sync_free() -> None:
    case = _matrix_case("folded-sampled/vanilla")
    checks = [
        host_sync.SyncCheck("fixed", case, host_sync.SyncStatus.SYNC_FREE),
        host_sync.SyncCheck("legacy", case, host_sync.SyncStatus.RAISED),
    ]
    assert sync_section(SyncVerdict.of(checks)).ok
    syncing = host_sync.SyncCheck(
        "fixed", case, host_sync.SyncStatus.SYNCS, stack=("fixed/x.py:3 in __call__",)
    )
    section = sync_section(SyncVerdict.of([syncing]))
    assert not section.ok and "fixed/x.py:3" in section.text


def test_a_call_that_syncs_fails_the_judgement_it_is_added_to() -> None:
    case = _matrix_case("folded-sampled/vanilla")
    result = capture_and_replay(case, ALL, replays=1, runner_factory=eager_replay_runner)
    judgement = _judged([result], require_coverage=False)
    assert judgement.ok
    clean = host_sync.SyncCheck("fixed", case, host_sync.SyncStatus.SYNC_FREE)
    assert replace(judgement, syncs=SyncVerdict.of([clean])).ok
    syncing = replace(clean, status=host_sync.SyncStatus.SYNCS)
    failed = replace(judgement, syncs=SyncVerdict.of([syncing]))
    assert not failed.ok and failed.to_json()["syncs"] == {"ok": False}


# -- the graphs command ------------------------------------------------------------------------
def _graphs_args(**overrides: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    graphs_command.add_arguments(parser)
    args = parser.parse_args([])
    for key, value in {
        "device": "cpu",
        "seed": 0,
        "quiet": True,
        "max_memory": None,
        **overrides,
    }.items():
        setattr(args, key, value)
    return args


def test_graphs_command_needs_cuda_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert graphs_command.command(_graphs_args()) == 2
    assert "needs a CUDA device; got device 'cpu'" in capsys.readouterr().err


@NO_CUDA
def test_graphs_command_with_device_cuda_on_a_machine_without_cuda(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert graphs_command.command(_graphs_args(device="cuda")) == 2
    assert "this machine has none" in capsys.readouterr().err


def test_graphs_options_and_cli_entry_point(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _graphs_args()
    assert (args.replays, args.case, args.impl, args.no_sync_check) == (3, [], [], False)
    assert args.only == "reference,fixed,legacy"
    assert cli_main(["graphs", "--device", "cpu", "--out-dir", str(tmp_path)]) == 2
    assert cli_main(["graphs", "--replays", "many"]) == 2
    assert cli_main(["graphs", "--help"]) == 0
    assert "--replays" in capsys.readouterr().out
    assert not list(tmp_path.iterdir())  # nothing half-written


# -- GPU figures -------------------------------------------------------------------------------
def test_step_kernel_byte_model_at_the_production_shape() -> None:
    model = kernel_bandwidth.race_kernel_bytes(bs=64, vocab_size=129280, dtype="float32")
    tiles = 127  # ceil(129280 / 1024)
    assert model.logits == model.noise == 64 * 129280 * 4
    assert model.tile_partials == 64 * tiles * 20
    assert model.compulsory == 2 * 64 * 129280 * 4 + 64 * 5 + 64 * 8
    assert model.moved == model.compulsory + 2 * 64 * tiles * 20
    bf16 = kernel_bandwidth.race_kernel_bytes(bs=64, vocab_size=129280, dtype="bfloat16")
    assert bf16.logits == 64 * 129280 * 2 and bf16.noise == model.noise


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA H200 NVL", 4.8e12),
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA H100 NVL", 3.9e12),
        ("NVIDIA A100-SXM4-80GB", 2.039e12),
        ("NVIDIA A100-SXM4-40GB", 1.555e12),
        ("NVIDIA L40S", 8.64e11),
        ("NVIDIA L4", 3.0e11),
    ],
)
def test_datasheet_peak_by_device_name(name: str, peak: float) -> None:
    found = kernel_bandwidth.datasheet_peak(name)
    assert found is not None and found[0] == peak and "datasheet" in found[1]


def test_unknown_device_has_no_datasheet_peak_and_reported_peak_needs_both_fields() -> None:
    assert kernel_bandwidth.datasheet_peak("Some Future GPU") is None
    h100 = SimpleNamespace(memory_clock_rate=2_619_000, memory_bus_width=5120)  # kHz, bits
    assert kernel_bandwidth.reported_peak(h100) == pytest.approx(3.352e12, rel=1e-3)
    assert kernel_bandwidth.reported_peak(SimpleNamespace(memory_bus_width=5120)) is None


def test_graph_device_time_divides_by_replays_and_calls() -> None:
    calls_made = []
    ms = clocks.graph_device_ms(
        [lambda: calls_made.append("a"), lambda: calls_made.append("b")],
        device=torch.device("cpu"),
        replays=5,
        runner_factory=eager_replay_runner,
        clock=lambda call: (call(), 20.0)[1],
    )
    assert ms == 20.0 / (5 * 2)
    assert len(calls_made) == 2 * (1 + 1 + 5)  # capture, first replay, timed replays


def test_sampler_times_alternate_and_cover_both_executions_and_modes() -> None:
    case = gpu_figures.figure_case(
        device="cpu", bs=2, vocab_size=300, hidden_size=16, dtype="float32"
    )
    times = gpu_figures.sampler_times(
        case, repeats=2, warmup=0, clock=clocks.wall_ms, runner_factory=eager_replay_runner
    )
    assert set(times.times) == {"eager", "graph"}
    for by_mode in times.times.values():
        assert set(by_mode) == {"walk_only", "whole_call"}
        for paired in by_mode.values():
            assert len(paired.legacy_s) == len(paired.fixed_s) == 2
            assert min(paired.legacy_s + paired.fixed_s) > 0
    data = times.to_json()
    assert data["clock"] == "host wall clock" and data["case"]["vocab_size"] == 300
    text = render_blocks(sampler_time_blocks(times), fmt="text")
    assert "walk-only (lm_head precomputed)" in text and "graph" in text


def test_figures_section_states_bandwidth_against_both_peaks() -> None:
    model = kernel_bandwidth.race_kernel_bytes(bs=64, vocab_size=129280, dtype="float32")
    figure = kernel_bandwidth.KernelFigure("float32", 64, 129280, model, 0.05, 0.02, 4)
    peak = kernel_bandwidth.PeakBandwidth("NVIDIA H200", 4.8e12, "datasheet", None, 4.0e12)
    section = figures_section(None, [figure], peak)
    achieved = model.moved / 0.02e-3
    assert section.ok
    assert f"{achieved / 1e9:.0f} GB/s = {100 * achieved / 4.8e12:.0f}% of peak" in section.verdict
    row = section.data["step_kernel"][0]
    assert row["fraction_of_measured_copy_peak"] == pytest.approx(achieved / 4.0e12)
    assert "device-reported (memory clock x bus width): unknown" in section.text


def test_gpu_figures_command_needs_cuda(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["gpu-figures", "--device", "cpu", "--out-dir", str(tmp_path)]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# -- scripts/gpu_check.sh ----------------------------------------------------------------------
def _run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=REPO_ROOT,
        env=env or subprocess_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.e2e
def test_gpu_check_script_parses() -> None:
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    header = SCRIPT.read_text()
    assert header.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in header


def test_gpu_check_script_without_arguments_prints_usage_and_fails() -> None:
    done = _run_script()
    assert done.returncode == 2
    assert re.search(r"^usage: .*gpu_check\.sh \[--allow-cpu\] OUTDIR$", done.stderr, re.M)
    helped = _run_script("--help")
    assert helped.returncode == 0 and "usage:" in helped.stdout
    assert _run_script("--bogus", "out").returncode == 2


def _script_env() -> dict[str, str]:
    return {
        **subprocess_env(),
        "PYTHON": sys.executable,
        "GPU_CHECK_TESTS": "tests/harness/gpu/test_gpu.py",
    }


@pytest.mark.e2e
@NO_CUDA
def test_gpu_check_script_without_cuda_stops_early_but_writes_its_results(tmp_path: Path) -> None:
    done = _run_script(str(tmp_path / "out"), env=_script_env())
    assert done.returncode == 2, done.stdout + done.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["ok"] is False and results["reason"] == "torch finds no CUDA device"
    assert [s["name"] for s in results["stages"]] == ["env"]
    assert results["environment"]["torch"] == torch.__version__
    assert "no CUDA device" in (tmp_path / "out" / "log.txt").read_text()


@pytest.mark.e2e
@NO_CUDA
def test_gpu_check_script_runs_every_stage_and_records_each_outcome(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run_script("--allow-cpu", str(out), env=_script_env())
    assert done.returncode == 1, done.stdout + done.stderr  # the CUDA-only stages refuse
    results = json.loads((out / "results.json").read_text())
    stages = {s["name"]: (s["status"], s["exit"]) for s in results["stages"]}
    assert stages == {
        "env": ("passed", 0),
        "pytest": ("passed", 0),  # every gpu test skipped
        "graphs": ("failed", 2),
        "figures": ("failed", 2),
    }
    assert results["ok"] is False and results["allow_cpu"] is True
    assert results["pytest"]["skipped"] == results["pytest"]["tests"] > 0
    log = (out / "log.txt").read_text()
    assert "needs a CUDA device" in log and "gpu_check: FAIL" in log


def test_gpu_check_script_skips_the_stages_once_its_time_budget_is_spent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run_script("--allow-cpu", str(out), env={**_script_env(), "GPU_CHECK_BUDGET_S": "0"})
    assert done.returncode == 1, done.stdout + done.stderr
    results = json.loads((out / "results.json").read_text())
    assert [(s["name"], s["status"]) for s in results["stages"]] == [
        ("env", "skipped"),
        ("pytest", "skipped"),
        ("graphs", "skipped"),
        ("figures", "skipped"),
    ]
    assert results["ok"] is False


# -- tests/harness/gpu/test_gpu.py here ------------------------------------------------------------
WARNER = """
import warnings


def pytest_collection_modifyitems(items):
    warnings.warn(UserWarning("what an environment may print"))
"""


def _pytest(pytester: pytest.Pytester, *args: str, warning: bool) -> pytest.RunResult:
    """pytest run on ``tests/harness/gpu/test_gpu.py`` (in this process: the module and torch are
    imported already, so it takes a second), with ``warning`` a warning line in its
    summary; read through pytester's outcome API."""
    plugin = []
    if warning:
        pytester.makepyfile(warner=WARNER)
        pytester.syspathinsert()
        plugin = ["-p", "warner"]
    return pytester.runpytest(
        "-p",
        "no:cacheprovider",
        *plugin,
        str(REPO_ROOT / "tests" / "harness" / "gpu" / "test_gpu.py"),
        *args,
    )


WITH_AND_WITHOUT_A_WARNING = pytest.mark.parametrize(
    "warning", [False, True], ids=["quiet", "with-a-warning"]
)


@WITH_AND_WITHOUT_A_WARNING
def test_every_test_in_the_gpu_module_carries_the_gpu_marker(
    pytester: pytest.Pytester, warning: bool
) -> None:
    done = _pytest(pytester, "--collect-only", "-q", "-m", "not gpu", warning=warning)
    assert done.ret == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout.str()
    deselected = done.parseoutcomes().get("deselected", 0)
    assert deselected > 0, done.stdout.str()
    done.assert_outcomes(deselected=deselected)  # nothing else ran


@NO_CUDA
@WITH_AND_WITHOUT_A_WARNING
def test_gpu_module_is_collected_and_skipped_without_cuda(
    pytester: pytest.Pytester, warning: bool
) -> None:
    done = _pytest(pytester, "-q", "-rs", warning=warning)
    assert done.ret == pytest.ExitCode.OK, done.stdout.str()
    skipped = done.parseoutcomes().get("skipped", 0)
    assert skipped > 0, done.stdout.str()
    done.assert_outcomes(skipped=skipped, warnings=int(warning))  # none passed, failed or errored
    assert "needs a CUDA device" in done.stdout.str()
