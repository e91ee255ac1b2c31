"""The checks judge a 0.5.23 sampler against the server's plumbing, not its own
bookkeeping (docs/design.md, "What the checks compare against").

Each sampler of ``tests/plugins/plumbing_samplers.py`` is the installed package's
sampler with one change: a greedy mask from the temperature is NOT lossless (a greedy
request drafted as a sample); draws at another fresh counter, another transform of the
fresh counters' words and float32 kept logits over a bfloat16 base are lossless, their
difference named; a draw at a counter handed out before stays a lossless failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from harness.case import Case, make_case
from harness.pipeline.check_result import CheckResult, Skip
from harness.pipeline.checks import tier_of
from harness.pipeline.compare import evaluate_run
from harness.pipeline.life import MIN_REPLAYS
from harness.pipeline.runner import ImplResult, run_case
from harness.plugins.implementations import Implementation

pytestmark = pytest.mark.upstream

SHAPE = {"bs": 4, "gamma": 4, "vocab_size": 64, "hidden_size": 16, "markov_rank": 8}
MIXED = (False, True, False, False)  # row 1 is a greedy request: T = 1, top_k = 1 on the wire
FLOAT32 = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, max_bs=6, seed=15)
BFLOAT16 = make_case(**SHAPE, greedy_rows=MIXED, max_bs=6, seed=15, dtype="bfloat16")
LIFE = make_case(**SHAPE, greedy_rows=MIXED, max_bs=6, replays=MIN_REPLAYS, seed=21)
FILE = "tests/plugins/plumbing_samplers.py"


@pytest.fixture(scope="module")
def samplers() -> ModuleType:
    from tests.plugins import plumbing_samplers  # loads the installed package

    return plumbing_samplers


def _run(case: Case, sampler_class: type) -> tuple[ImplResult, dict[str, CheckResult]]:
    run = run_case(case, [Implementation("under-test", sampler_class, "test")])
    checks = evaluate_run(run, require_observable=False).checks["under-test"]
    return run.results["under-test"], {c.name: c for c in checks}


def _failing(checks: dict[str, CheckResult], tier: str) -> set[str]:
    return {n for n, c in checks.items() if c.status == "fail" and tier_of(n) == tier}


def test_a_greedy_mask_from_the_temperature_drafts_a_greedy_request_as_a_sample(
    samplers: ModuleType,
) -> None:
    result, checks = _run(FLOAT32, samplers.TemperatureGreedyMask)
    assert result.staged is not None and not bool(result.staged.greedy_mask[1])  # its own
    assert result.requested is not None and bool(result.requested.greedy_mask[1])  # the server's
    assert _failing(checks, "lossless") == {"greedy_rows_argmax", "noise_replay"}
    greedy = checks["greedy_rows_argmax"]
    assert "greedy request(s) [1] (top_k <= 1, as the server stages them)" in greedy.detail
    assert "as sampled at T = 1: greedy requests drafted as samples" in greedy.detail
    assert {row for row, _ in greedy.positions} == {1}


def test_steps_after_the_first_at_the_next_counter_are_fresh_and_named(
    samplers: ModuleType,
) -> None:
    result, checks = _run(FLOAT32, samplers.StepsAfterTheFirstAtNextCounter)
    assert result.noise_counter is not None and result.noise_counter.advances == 2
    assert result.counter_reads is not None and result.counter_reads.own == (0, 1)
    assert _failing(checks, "lossless") == set()
    layout = (
        "draws at counters 0, 1: not the package's layout (every step at the block's counter 0)"
    )
    assert checks["noise_replay"].status == "pass" and layout in checks["noise_replay"].detail
    assert checks["fresh_noise"].status == "pass"  # the second call at 2 and 3
    assert layout in checks["noise_budget"].detail  # the drop-in difference, named


def test_an_inverse_cdf_on_the_fresh_counters_words_is_left_to_the_oracle(
    samplers: ModuleType,
) -> None:
    result, checks = _run(FLOAT32, samplers.InverseCdfOnPhiloxUniforms)
    assert result.counter_reads is not None
    assert (result.counter_reads.own, result.counter_reads.other) == ((), (0,))
    assert _failing(checks, "lossless") == set()
    replay = checks["noise_replay"]
    assert (replay.status, replay.skip) == ("skip", Skip.NOT_VISIBLE)
    assert "another transform of the stream's words at fresh counter(s) 0" in replay.detail
    assert "another transform" in checks["noise_budget"].detail


def test_float32_kept_logits_over_a_bfloat16_base_are_rebuilt_in_float32(
    samplers: ModuleType,
) -> None:
    import torch

    result, checks = _run(BFLOAT16, samplers.Float32KeptLogits)
    assert result.corrected is not None and result.corrected.dtype == torch.float32
    # rounded to the base dtype, as the rebuild did before, the kept logits do not agree
    assert not torch.equal(result.corrected.bfloat16().float(), result.corrected)
    assert _failing(checks, "lossless") == set()
    forced = checks["teacher_forcing"]
    assert forced.status == "pass"
    assert "kept dtype torch.float32 over a torch.bfloat16 base" in forced.detail


def test_a_draw_at_a_counter_handed_out_before_stays_a_lossless_failure(
    samplers: ModuleType,
) -> None:
    _, checks = _run(FLOAT32, samplers.StepsAfterTheFirstAtCounterZero)
    assert checks["noise_replay"].status == "pass"  # its first call: counter 0 is fresh
    assert _failing(checks, "lossless") == {"fresh_noise"}
    assert "second call: noise_replay: draws at counter(s) [0] handed out before this call" in (
        checks["fresh_noise"].detail
    )
    _, life = _run(LIFE, samplers.StepsAfterTheFirstAtCounterZero)
    assert life["life_replays"].status == "fail"
    assert "(reused noise)" in life["life_replays"].detail


@pytest.mark.parametrize(
    "sampler",
    ["StepsAfterTheFirstAtNextCounter", "InverseCdfOnPhiloxUniforms", "Float32KeptLogits"],
)
def test_each_correct_design_lives_a_server_life_without_a_lossless_failure(
    samplers: ModuleType, sampler: str
) -> None:
    _, checks = _run(LIFE, getattr(samplers, sampler))
    assert _failing(checks, "lossless") == set()
    assert checks["life_replays"].status == "pass"
    assert checks["life_fresh_noise"].status == "pass"


def test_compare_judges_the_four_on_the_plumbing(tmp_path: Path, capsys) -> None:
    from harness.cli import main

    cases = []
    for name, case in (("float32", FLOAT32), ("bfloat16", BFLOAT16)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(case.to_json_dict()))
        cases += ["--case", str(path)]
    impls = {
        "greedy": "TemperatureGreedyMask",
        "layout": "StepsAfterTheFirstAtNextCounter",
        "icdf": "InverseCdfOnPhiloxUniforms",
        "f32": "Float32KeptLogits",
    }
    argv = ["compare", "--only", "none", "--no-stats", "--quiet", "--long", *cases]
    argv += ["--require", "lossless", "--expect-fail", "greedy", "--out-dir", str(tmp_path)]
    for name, sampler in impls.items():
        argv += ["--impl", f"{name}={FILE}:{sampler}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "greedy requests drafted as samples" in out
    assert "not the package's layout" in out
    assert "another transform of the stream's words" in out
