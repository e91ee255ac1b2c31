"""The work the fix eliminates: counted work equals the analytic model, exactly.

For every ledger case kind (both layouts, all head kinds, folded / greedy / fused,
the legacy raising cases) the counted walks, head steps, step-sampler calls, noise
draws and elements and GEMM FLOPs equal ``predict_work``; legacy's surplus over
fixed is exactly one separately measured Markov walk (operators and bytes); folded
sampling draws exactly twice the noise elements. Also the A/B timing machinery.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import torch

from harness.case import Case, build_inputs, make_case
from harness.cli import build_parser, main
from harness.cli import work as work_command
from harness.defaults import BUILTIN_NAMES, PAIR_SIDES
from harness.judgement import WorkVerdict
from harness.measure import callgrind, counters, model, timing, work
from harness.options import RunOptions
from harness.pipeline.control_flow import legacy_pass1_error
from harness.pipeline.runner import run_case
from harness.plugins.implementations import builtin_implementations
from harness.render import work as work_sections
from harness.render.sections import render_blocks
from harness.render.timing import timing_blocks
from tests.helpers import assert_fresh_process_passes

EXHAUSTIVE = work.work_cases(seed=0, exhaustive=True)
BFLOAT16 = work.work_cases(seed=1, dtype="bfloat16")
ALL_CASES = EXHAUSTIVE + BFLOAT16


def _id(case: Case) -> str:
    return f"{work.case_kind(case)} {case.dtype}"


@cache
def measured(case: Case) -> work.CaseWork:
    return work.measure_work(case)


@pytest.mark.parametrize("case", ALL_CASES, ids=_id)
def test_counted_work_equals_the_model_for_every_implementation(case: Case) -> None:
    result = measured(case)
    for name in BUILTIN_NAMES:
        predicted, got = result.predicted[name], result.measured[name]
        assert got.error_type == predicted.raises, (name, got.error)
        if predicted.raises:
            continue
        for key in model.MODEL_COUNTERS:
            assert got.counter(key) == predicted.counter(key), (name, key)
    assert result.problems == []


def test_a_wrong_model_differs_for_its_implementation_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Planted: the model gives fixed one walk too many; legacy's model stays right.
    right = work.predict_work

    def planted(case: Case, implementation: str) -> model.PredictedWork:
        predicted = right(case, implementation)
        if implementation != "fixed":
            return predicted
        return replace(predicted, walks=predicted.walks + 1)

    monkeypatch.setattr(work, "predict_work", planted)
    result = work.measure_work(work.work_cases(seed=0)[0])
    assert [str(p) for p in result.problems] == ["fixed: walks counted 1, model 2"]
    assert result.model_status("fixed") is work.ModelStatus.DIFFERS
    assert result.model_status("legacy") is work.ModelStatus.AGREES
    assert "DIFFERS" in work_sections.overview_table([result]).render()


@pytest.mark.parametrize("case", ALL_CASES, ids=_id)
def test_legacy_surplus_is_exactly_one_walk(case: Case) -> None:
    result = measured(case)
    if result.comparison is None:
        assert result.predicted["legacy"].raises is not None
        return
    for difference in result.comparison.op_differences:
        assert difference.diff == difference.one_walk, difference
    counters = {c.key: c for c in result.comparison.counters}
    assert counters["walks"].diff == 1
    assert counters["head_steps"].diff == case.gamma
    assert counters["sampler_calls"].diff == case.gamma
    assert counters["gemm_flops"].diff == result.predicted["fixed"].walk.gemm_flops
    assert counters["allocated_bytes"].diff == result.one_walk.allocated_bytes
    assert counters["aten_ops"].diff == sum(result.one_walk.op_counts.values()) + (
        result.predicted["legacy"].pass1_views
    )


FOLDED_RUNNING = [c for c in ALL_CASES if c.folded_sampling and legacy_pass1_error(c) is None]


@pytest.mark.parametrize("case", FOLDED_RUNNING, ids=_id)
def test_folded_sampling_draws_exactly_twice_the_noise(case: Case) -> None:
    result = measured(case)
    assert result.comparison is not None
    noise = result.comparison.counter("noise_elements")
    calls = result.comparison.counter("noise_calls")
    assert noise is not None and calls is not None
    assert noise.fixed == case.gamma * case.bs * case.vocab_size
    assert noise.legacy == 2 * noise.fixed
    assert (calls.legacy, calls.fixed) == (2 * case.gamma, case.gamma)


def test_model_at_the_production_shape_is_the_closed_form() -> None:
    case = make_case(bs=8, gamma=7, vocab_size=129280, hidden_size=4096, markov_rank=256)
    legacy, fixed = model.predict_work(case, "legacy"), model.predict_work(case, "fixed")
    walk_flops = 2 * 8 * 7 * 256 * 129280  # gamma steps of [bs, r] x [r, V]
    lm_flops = 2 * 8 * 7 * 4096 * 129280
    assert fixed.walk.gemm_flops == walk_flops
    assert fixed.lm_head.gemm_flops == lm_flops
    assert (legacy.walks, fixed.walks) == (2, 1)
    assert (legacy.noise_elements, fixed.noise_elements) == (2 * 7 * 8 * 129280, 7 * 8 * 129280)
    assert legacy.gemm_flops - fixed.gemm_flops == walk_flops


def test_unknown_implementation_has_no_model() -> None:
    with pytest.raises(ValueError, match="no work model"):
        model.predict_work(EXHAUSTIVE[0], "mine")


def test_allocation_counter_counts_fresh_storage_only() -> None:
    base = torch.zeros(4, 8)
    with torch.inference_mode(), counters.AllocationCounter() as counter:
        fresh = base + 1  # 128 bytes
        fresh.add_(1)  # in place: nothing
        fresh.view(8, 4)  # a view: nothing
        torch.empty(3, dtype=torch.int64)  # 24 bytes
        base.split(2)  # views of an input: nothing
    assert counter.allocated_bytes == 4 * 8 * 4 + 3 * 8


@pytest.mark.e2e
def test_flop_counter_counts_gemms_as_torch_does_without_importing_dynamo() -> None:
    probe = (
        "import sys, torch; from harness.measure.counters import FlopCounter; "
        "x, w = torch.ones(3, 5), torch.ones(7, 5); "
        "exec('with torch.inference_mode(), FlopCounter() as c: "
        "torch.nn.functional.linear(x, w)'); "
        "assert c.gemm_flops == 2 * 3 * 5 * 7, c.gemm_flops; "
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'"
    )
    assert_fresh_process_passes(probe)


def test_measuring_leaves_the_global_rng_untouched() -> None:
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    measured(EXHAUSTIVE[0])
    work.measure_work(work.work_cases(seed=5)[0])
    assert torch.equal(torch.get_rng_state(), before)


def test_the_work_section_is_ok_and_shows_the_comparison() -> None:
    messages: list[str] = []
    section = work_sections.work_section(
        WorkVerdict.of(work.collect_work(seed=0, progress=messages.append))
    )
    assert section.ok, section.text
    assert section.title == "Eliminated work"
    assert "exactly one extra Markov walk" in section.verdict
    assert "legacy - fixed" in section.text and "one walk (+view)" in section.text
    assert len(section.data["cases"]) == len(work.work_cases(seed=0)) == len(messages)
    json.dumps(section.data)  # plain data


def _work_args(out_dir: Path, *argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["work", "--out-dir", str(out_dir), *argv])


def test_work_command_prints_json_and_exits_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert work_command.command(_work_args(tmp_path, "--json", "--quiet", "--seed", "3")) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is True
    cases = payload["sections"][0]["data"]["cases"]
    headline = next(c for c in cases if c["kind"].startswith("folded, sampled rows [vanilla"))
    noise = headline["legacy_vs_fixed"]["noise_elements"]
    assert noise["legacy"] == 2 * noise["fixed"] and noise["ratio"] == 2.0


def test_work_command_rejects_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["work", "--repeats", "0", "--quiet", "--out-dir", str(tmp_path)]) == 2
    assert "--repeats must be >= 1, got 0" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing written on bad usage


def test_work_out_dir_receives_the_report_files(tmp_path: Path) -> None:
    out_dir = tmp_path / "work-files"
    assert work_command.command(_work_args(out_dir, "--quiet")) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["work.json", "work.md", "work.txt"]
    assert json.loads((out_dir / "work.json").read_text())["command"] == "work"
    assert "| case kind (legacy \\| fixed)" in (out_dir / "work.md").read_text()


# -- A/B timing -----------------------------------------------------------------------------
SMALL = make_case(bs=2, gamma=3, vocab_size=64, hidden_size=8, markov_rank=4, seed=7)


def test_walk_only_calls_produce_the_same_outputs_as_whole_calls() -> None:
    inputs = build_inputs(SMALL)
    samplers = timing.make_samplers(SMALL, inputs=inputs)
    for name in PAIR_SIDES:
        outs = []
        for mode in timing.MODES:
            sampler = samplers[mode, name]
            torch.manual_seed(11)
            with torch.inference_mode():
                sampler(inputs.hidden_states, inputs.input_ids)
            outputs = sampler.read(SMALL)  # through its convention
            outs.append((outputs.tokens, outputs.step_logits))
        assert torch.equal(outs[0][0], outs[1][0])
        assert torch.equal(outs[0][1], outs[1][1])


def test_ab_timing_pairs_every_repetition_and_restores_threads() -> None:
    threads = torch.get_num_threads()
    result = timing.ab_timing(SMALL, repeats=3, warmup=1, threads=1)
    assert torch.get_num_threads() == threads
    assert result.threads == 1
    for mode in timing.MODES:
        for clock in timing.CLOCKS:
            times = result.times[mode][clock]
            assert len(times.legacy_s) == len(times.fixed_s) == 3
            summary = times.summary()
            assert 0 < summary["ratio_min"] <= summary["ratio_median"] <= summary["ratio_max"]
    json.dumps(result.to_json())
    assert "walk-only" in render_blocks(timing_blocks(result), fmt="text")


def test_production_like_case_states_its_shape() -> None:
    case = timing.production_like_case()
    assert (case.bs, case.gamma, case.vocab_size, case.markov_rank, case.hidden_size) == (
        8,
        7,
        129280,
        256,
        timing.PRODUCTION_HIDDEN,
    )
    assert "H=256" in case.label()


@pytest.mark.slow
@pytest.mark.skipif(callgrind.valgrind_path() is None, reason="valgrind is not on PATH")
def test_callgrind_counts_twice_the_walk_instructions() -> None:
    counts = callgrind.callgrind_instructions(callgrind.callgrind_case())
    assert 1.9 <= counts.ratio("walk_only") <= 2.1
    assert 1.0 < counts.ratio("whole_call") < counts.ratio("walk_only")


def test_runner_counts_feed_the_model_unchanged() -> None:
    # The counters come from the shared runner, not from a private re-count.
    case = EXHAUSTIVE[0]
    run = run_case(
        case, builtin_implementations(("fixed",)), options=RunOptions(record_noise=False)
    )
    assert run.results["fixed"].work == measured(case).measured["fixed"].counts
