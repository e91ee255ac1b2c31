"""``--impl`` and ``--pair`` in the work, timing and sweep measurements.

A plug-in's work is counted (random draws by op included) and marked "counted only
(no model)"; a plug-in that raises is a recorded result of its case. The upstream-
shaped buggy and fixed modules, as the pair, show exactly legacy's surplus over fixed:
one extra walk and twice the noise. A pair without the bug (two correct samplers) is
caught by the surplus check; a mixed pair (upstream buggy vs built-in fixed) passes.
The timing and the sweep time the pair, staging before every call, and the sweep's
journal fingerprint covers the plug-in's file. The default output is unchanged.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import build_inputs, make_case
from harness.cli import build_parser, main
from harness.cli import work as work_command
from harness.defaults import BUILTIN_NAMES, PAIR_SIDES
from harness.io import fingerprint
from harness.io.fingerprint import code_fingerprint
from harness.judgement import WorkVerdict
from harness.measure import sweep, time_ratio, timing, work
from harness.plugins.implementations import Implementation, select_implementations
from harness.render import work as work_sections
from harness.render.sections import render_blocks
from harness.render.timing import timing_blocks, timing_section

UPSTREAM = "tests/plugins/upstream"
GUMBEL = "gumbel=tests.plugins.alternative_samplers:UniformGumbelSampler"
BEFORE = f"before={UPSTREAM}/dspark_before_fix.py"
AFTER = f"after={UPSTREAM}/dspark_after_fix.py"
RAISING = "raising=tests.plugins.broken_samplers:RaisingSampler"
UPSTREAM_PAIR = ("before", "after")
# Counters the pair's surplus shares with legacy's over fixed, whatever the step sampler.
STRUCTURAL = ("walks", "fused_calls", "head_steps", "sampler_calls", "noise_calls")
STRUCTURAL += ("noise_elements", "gemm_flops")


@cache
def implementations() -> tuple[Implementation, ...]:
    return tuple(select_implementations(BUILTIN_NAMES, [GUMBEL, BEFORE, AFTER, RAISING]))


@cache
def upstream_works() -> tuple[work.CaseWork, ...]:
    return tuple(work.collect_work(seed=0, implementations=implementations(), pair=UPSTREAM_PAIR))


@cache
def default_works() -> tuple[work.CaseWork, ...]:
    return tuple(work.collect_work(seed=0))


def test_a_plugin_is_counted_with_its_own_random_draws_and_no_model() -> None:
    for case_work in upstream_works():
        case = case_work.case
        gumbel = case_work.measured["gumbel"]
        assert gumbel.error is None
        assert case_work.model_status("gumbel") == work.ModelStatus.NO_MODEL
        assert "gumbel" not in case_work.predicted
        expected = {"uniform_": [case.gamma, case.gamma * case.bs * case.vocab_size]}
        assert gumbel.counts.rng.get("call", {}) == (expected if case.folded_sampling else {})
        assert gumbel.counts.noise_calls == 0  # no exponential_ at all
        for name in BUILTIN_NAMES:  # the built-ins are still held to the model
            assert case_work.model_status(name) == work.ModelStatus.AGREES
    section = work_sections.work_section(
        WorkVerdict.of(list(upstream_works()), expect_fail=frozenset({"raising"}))
    )
    assert section.ok, section.text
    assert "uniform_ 4x 4,096" in section.text
    assert f"gumbel, before, after, raising: {work.ModelStatus.NO_MODEL.value}" in section.verdict
    rows = [r for r in section.data["counted_work"] if r["implementation"] == "gumbel"]
    assert len(rows) == len(upstream_works())
    json.dumps(section.data)


def test_a_plugin_that_raises_is_a_recorded_result() -> None:
    for case_work in upstream_works():
        raising = case_work.measured["raising"]
        assert raising.error == "RuntimeError: planted failure"
        assert raising.counts.walks == 0
        assert case_work.model_status("raising") == work.ModelStatus.NO_MODEL
    section = work_sections.work_section(WorkVerdict.of(list(upstream_works())))
    rows = [r for r in section.data["counted_work"] if r["implementation"] == "raising"]
    assert {r["error"] for r in rows} == {"RuntimeError: planted failure"}
    assert "raises RuntimeError" in section.text
    kinds = len(upstream_works())  # a raise is no measurement: the section fails unless expected
    assert not section.ok
    assert f"NOT measured: raising raised on {kinds}/{kinds} case kinds" in section.verdict
    assert work_sections.work_section(
        WorkVerdict.of(list(upstream_works()), expect_fail=frozenset({"raising"}))
    ).ok


def test_the_upstream_pair_shows_exactly_legacys_surplus() -> None:
    compared = 0
    for case_work, default in zip(upstream_works(), default_works(), strict=True):
        assert case_work.problems == [], case_work.problems
        before, legacy = case_work.measured["before"], case_work.measured["legacy"]
        assert before.error_type == legacy.error_type  # the same crashes of pass 1
        if case_work.comparison is None:
            assert default.comparison is None
            continue
        assert default.comparison is not None
        compared += 1
        ours = {c.key: c for c in case_work.comparison.counters}
        builtin = {c.key: c for c in default.comparison.counters}
        assert ours["walks"].diff == 1
        if case_work.case.folded_sampling:
            assert ours["noise_elements"].legacy == 2 * ours["noise_elements"].fixed
        for key in STRUCTURAL:  # before vs after == legacy vs fixed, counter by counter
            assert (ours[key].legacy, ours[key].fixed) == (builtin[key].legacy, builtin[key].fixed)
    assert compared == sum(w.comparison is not None for w in default_works()) >= 8
    section = work_sections.work_section(WorkVerdict.of(list(upstream_works())))
    assert "before does exactly one extra Markov walk" in section.verdict
    assert "case kind (before | after)" in section.text
    headline = section.data["cases"][0]["before_vs_after"]
    assert headline["walks"] == {"before": 2, "after": 1, "diff": 1, "ratio": 2.0}
    assert headline["noise_elements"]["ratio"] == 2.0


HEADLINE = work.work_cases(seed=0)[0]  # folded, sampled rows, vanilla, anchor


def test_a_pair_without_the_bug_fails_the_surplus_check() -> None:
    # Planted: two correct samplers as the pair; there is no extra walk to find.
    result = work.measure_work(HEADLINE, implementations=implementations(), pair=("after", "fixed"))
    problems = [str(problem) for problem in result.problems]
    assert "after - fixed walks = 0, expected 1" in problems
    assert "folded: noise elements drawn are not exactly 2:1" in problems
    section = work_sections.work_section(WorkVerdict.of([result]))
    assert not section.ok


def test_a_mixed_pair_is_no_false_alarm() -> None:
    # The upstream buggy module against the built-in fixed: a different step sampler.
    result = work.measure_work(
        HEADLINE, implementations=implementations(), pair=("before", "fixed")
    )
    assert result.problems == []
    assert result.comparison is not None and result.comparison.pair == ("before", "fixed")


def _work_args(out_dir: Path, *argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["work", "--out-dir", str(out_dir), "--quiet", *argv])


def test_the_default_work_output_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    section = work_sections.work_section(WorkVerdict.of(list(default_works())))
    assert set(section.data) == {"cases"}
    assert all("legacy_vs_fixed" in c for c in section.data["cases"])
    assert "counted work per call" not in section.text
    assert "case kind (legacy | fixed)" in section.text
    outputs = []
    for argv in ((), ("--pair", "legacy,fixed")):
        out_dir = tmp_path / str(len(outputs))
        assert work_command.command(_work_args(out_dir, *argv)) == 0
        outputs.append((out_dir / "work.txt").read_text().replace(str(out_dir), "OUT"))
    assert outputs[0] == outputs[1]
    assert outputs[0].count("\n") > 40
    assert "== Eliminated work ==" in outputs[0]
    capsys.readouterr()


def test_the_work_command_takes_impl_and_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["work", "--out-dir", str(tmp_path / "a"), "--quiet", "--pair", "x,fixed"]) == 2
    assert "--pair names implementations not in the comparison" in capsys.readouterr().err
    argv = ["work", "--out-dir", str(tmp_path / "b"), "--quiet", "--json"]
    argv += ["--impl", BEFORE, "--impl", AFTER, "--pair", "before,after"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    data = payload["sections"][0]["data"]
    assert {r["implementation"] for r in data["counted_work"]} >= {"before", "after"}


# -- timing ---------------------------------------------------------------------------------
SMALL = make_case(bs=2, gamma=3, vocab_size=64, hidden_size=8, markov_rank=4, seed=7)


class CountingStages(FixedSampler):  # type: ignore[misc]
    """The fixed sampler, counting its stagings (one per timed call is the protocol)."""

    stages = 0

    def stage_sampling_params(self, *, bs: int, sampling_info: Any) -> None:
        type(self).stages += 1
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)


def _pair(*names: str) -> timing.Pair:
    by_name = {i.name: i for i in implementations()}
    return by_name[names[0]], by_name[names[1]]


def test_the_timing_times_the_pair_and_stages_before_every_call() -> None:
    CountingStages.stages = 0
    counting = Implementation("counting", CountingStages, "test:CountingStages")
    result = timing.ab_timing(
        SMALL, repeats=3, warmup=1, threads=1, pair=(_pair("before", "after")[0], counting)
    )
    assert result.pair == ("before", "counting")
    assert result.to_json()["pair"] == ["before", "counting"]
    # per mode: the build's staging, then one before each warm-up and timed call
    assert CountingStages.stages == len(timing.MODES) * (1 + 1 + 3)
    for mode in timing.MODES:
        assert len(result.times[mode]["wall"].legacy_s) == 3
    assert "before ms" in render_blocks(timing_blocks(result), fmt="text")


def test_walk_only_and_whole_call_agree_for_the_upstream_pair() -> None:
    inputs = build_inputs(SMALL)
    samplers = timing.make_samplers(SMALL, inputs=inputs, pair=_pair(*UPSTREAM_PAIR))
    for slot in PAIR_SIDES:
        outs = []
        for mode in timing.MODES:
            sampler = samplers[mode, slot]
            torch.manual_seed(11)
            with torch.inference_mode():
                sampler(inputs.hidden_states, inputs.input_ids)
            outputs = sampler.read(SMALL)  # through its convention
            outs.append((outputs.tokens, outputs.step_logits))
        assert torch.equal(outs[0][0], outs[1][0])
        assert torch.equal(outs[0][1], outs[1][1])


def test_a_raising_plugin_fails_the_timing_section_instead_of_crashing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timing, "production_like_case", lambda **_: SMALL)
    monkeypatch.setattr(time_ratio, "production_like_case", lambda **_: SMALL)
    timed = time_ratio.time_ratio(
        seed=0, device="cpu", repeats=1, callgrind=False, pair=_pair("legacy", "raising")
    )
    section = timing_section(timed)
    assert not section.ok
    assert section.verdict == "timing failed: raising: RuntimeError: planted failure"


# -- sweep ----------------------------------------------------------------------------------
TINY = replace(sweep.QUICK_CONFIG, bs=(1,), gamma=(2,), vocab=(64, 128), repeats=1)


def test_the_default_sweep_keys_and_fingerprint_are_unchanged() -> None:
    assert sweep.sweep_fingerprint(TINY) == code_fingerprint()
    key = TINY.point_key((1, 2, 64))
    assert key.endswith("float32,cpu") and "pair" not in key
    assert "pair" not in TINY.describe()
    legacy, fixed = sweep.sweep_pair(TINY)
    assert (legacy.name, fixed.name) == ("legacy", "fixed")


def _sweep(out: Path, *extra: str) -> list[str]:
    grid = ["--bs", "1", "--gamma", "2", "--vocab", "64,128", "--repeats", "1"]
    return ["sweep", "--out", str(out), "--out-dir", str(out / "report"), *grid, *extra]


def test_the_sweep_times_the_pair_and_fingerprints_the_plugin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "mine_after.py"
    shutil.copy(f"{UPSTREAM}/dspark_after_fix.py", plugin)
    extra = ["--impl", BEFORE.replace("before=", "old="), "--impl", f"mine={plugin}"]
    extra += ["--pair", "old,mine"]
    out = tmp_path / "sweep"
    assert main(_sweep(out, *extra)) == 0
    err = capsys.readouterr().err
    assert "walk-only old " in err and ", mine " in err
    document = json.loads((out / sweep.JSON_FILE).read_text())
    assert document["config"]["pair"] == ["old", "mine"]
    assert all("pair old,mine" in p["key"] for p in document["points"])
    assert "median old/mine ratio" in (out / "report" / "sweep.md").read_text()
    records = [json.loads(line) for line in (out / sweep.POINTS_FILE).read_text().splitlines()]
    assert {r["fingerprint"] for r in records} != {code_fingerprint()}

    assert main(_sweep(out, *extra)) == 0  # the same plug-in: both points resumed
    assert "2 already done" in capsys.readouterr().err
    plugin.write_text(plugin.read_text() + "\n# edited\n")
    assert main(_sweep(out, *extra)) == 0  # its file changed: both points recomputed
    assert "2 finished point(s) will be recomputed" in capsys.readouterr().err


def test_the_sweep_refuses_a_plugin_outside_the_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sweep(tmp_path, "--impl", GUMBEL)) == 2
    assert "the sweep times the pair only" in capsys.readouterr().err
    assert main(_sweep(tmp_path, "--pair", "legacy,nobody")) == 2
    assert "nobody" in capsys.readouterr().err
    assert not (tmp_path / sweep.POINTS_FILE).exists()


# -- the main report ------------------------------------------------------------------------
def test_the_reports_work_section_gets_the_plugins_and_the_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.pipeline import matrix as matrix_module

    calls: list[dict[str, Any]] = []

    def recorded(**kwargs: Any) -> list[work.CaseWork]:
        calls.append(kwargs)
        return []

    matrix = matrix_module.standard_matrix
    monkeypatch.setattr(matrix_module, "standard_matrix", lambda **kw: matrix(**kw)[:1])  # one
    monkeypatch.setattr(work, "collect_work", recorded)
    argv = ["report", "--quiet", "--no-stats", "--out-dir", str(tmp_path)]
    main([*argv, "--impl", BEFORE, "--impl", AFTER, "--pair", "before,after"])
    capsys.readouterr()
    (kwargs,) = calls
    assert kwargs["pair"] == UPSTREAM_PAIR
    names = [i.name for i in kwargs["implementations"]]
    assert names == [*BUILTIN_NAMES, "before", "after"]


def test_the_fingerprint_of_a_function_plugin_covers_the_functions_file(tmp_path: Path) -> None:
    # Planted: an edit of the function's file must change the fingerprint; the wrapper
    # class lives in the harness, so digesting the class's own module would miss it.
    source = tmp_path / "my_block.py"
    shutil.copy("tests/plugins/functional_samplers.py", source)
    (functional,) = select_implementations([], [f"myblock={source}:race_block"])
    assert functional.kind == "function"
    before = fingerprint.class_source_digest(functional.sampler_class)
    source.write_text(source.read_text() + "\n# edited\n")
    assert fingerprint.class_source_digest(functional.sampler_class) != before


def test_a_raising_plugin_fails_the_sweep_with_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_sweep(tmp_path, "--impl", RAISING, "--pair", "legacy,raising")) == 1
    assert "sweep failed: raising" in capsys.readouterr().err
