"""A server's life: one instance replayed with changing batches and restaged parameters.

The schedule and the matrix are checked for what they must cover; every defect of
``tests/plugins/life_defects.py`` is called NOT lossless over the standard matrix by
the check it targets, and the correct designs whose draws the harness cannot replay
from the call itself pass lossless (not drop-in, with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.case import Case, make_case
from harness.cli import main
from harness.options import RunOptions
from harness.pipeline.checks import Tier, tier_of
from harness.pipeline.compare import compare, evaluate_run
from harness.pipeline.isolation import make_executor
from harness.pipeline.life import LIFE_TRUNCATIONS, MIN_REPLAYS, GreedyMix, life_schedule
from harness.pipeline.matrix import standard_matrix, thorough_matrix
from harness.pipeline.memory import check_cases_fit
from harness.pipeline.records import CaseRecord
from harness.pipeline.runner import run_case
from harness.pipeline.verdicts import implementation_verdict
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.plugins import life_defects
from tests.session_share import computed_once

PLUGIN_FILE = Path(life_defects.__file__)
NOT_VISIBLE = "draws not visible / not replayable"
LIFE_CASE = make_case(
    bs=4,
    gamma=4,
    vocab_size=64,
    hidden_size=16,
    markov_rank=8,
    greedy_rows=(False, True, False, False),
    max_bs=6,
    replays=MIN_REPLAYS,
    seed=21,
)


@dataclass(frozen=True)
class LifeDefect:
    """A sampler wrong only over a life or at some shapes, and the check that kills it."""

    sampler: str
    check: str


LIFE_DEFECTS = (
    LifeDefect("FirstCallLogitsSampler", "life_replays"),
    LifeDefect("StagesOncePerBucketSampler", "life_replays"),
    LifeDefect("OwnOutBufferSampler", "life_server_buffer"),
    LifeDefect("FusedForEveryHeadSampler", "greedy_consistency"),
    LifeDefect("WrongFromThirdCallSampler", "life_replays"),
    LifeDefect("LongBlockSampler", "teacher_forcing"),
    LifeDefect("MidBatchSampler", "teacher_forcing"),
    LifeDefect("AlternatingNoiseSampler", "life_fresh_noise"),
    LifeDefect("TruncationAsGreedyOnRestageSampler", "life_replays"),
)
CORRECT_DESIGNS = ("DoubleBufferedNoiseSampler", "NumpyNoiseSampler")


def _implementation(name: str) -> Implementation:
    return Implementation(name, getattr(life_defects, name), f"{PLUGIN_FILE}:{name}")


@pytest.fixture(scope="module")
def matrix_records(tmp_path_factory: pytest.TempPathFactory) -> list[CaseRecord]:
    """The standard matrix for every sampler of the module, judged by their own checks
    (once a session)."""
    return computed_once(tmp_path_factory, "life-matrix-records", _matrix_records)


def _matrix_records() -> list[CaseRecord]:
    names = [d.sampler for d in LIFE_DEFECTS] + list(CORRECT_DESIGNS)
    implementations = [_implementation(name) for name in names]
    return compare(standard_matrix(), implementations, options=RunOptions())


# -- what the life and the matrix cover ------------------------------------------------------
def test_a_life_changes_the_batch_and_restages_every_mix_and_truncation_in_changing_order() -> None:
    steps = life_schedule(LIFE_CASE)
    assert len(steps) == MIN_REPLAYS
    sizes = [s.bs for s in steps]
    assert {1, LIFE_CASE.max_bs} <= set(sizes)
    assert any(1 < bs < LIFE_CASE.max_bs for bs in sizes)
    assert len(set(sizes)) < len(sizes)  # a bucket comes back after others ran
    mixes = [s.mix for s in steps]
    assert set(mixes) == set(GreedyMix)
    orders = {tuple(mixes[i : i + 3]) for i in range(0, len(mixes) - 2, 3)}
    assert len(orders) >= 2
    for step in steps:
        sampled = [not g for g in step.greedy_rows]
        assert len(step.temperatures) == len(step.greedy_rows) == step.bs
        assert (step.mix is GreedyMix.ALL_GREEDY) == (not any(sampled))
        assert (step.mix is GreedyMix.ALL_SAMPLED) == all(sampled)
    # every truncation is restaged on some sampled row, none on a greedy one
    staged = {
        (k, p, m)
        for step in steps
        for g, k, p, m in zip(step.greedy_rows, step.top_ks, step.top_ps, step.min_ps, strict=True)
        if not g
    }
    assert staged == set(LIFE_TRUNCATIONS)
    for step in steps:
        on_greedy = [
            (k, p, m)
            for g, k, p, m in zip(
                step.greedy_rows, step.top_ks, step.top_ps, step.min_ps, strict=True
            )
            if g
        ]
        assert set(on_greedy) <= {LIFE_TRUNCATIONS[0]}
    same_bucket = [s for s in steps if s.bs == LIFE_CASE.max_bs]
    assert len({(s.mix, s.temperatures) for s in same_bucket}) == len(same_bucket)
    assert len({s.input_seed for s in steps}) == len(steps)


def test_every_flag_lives_on_every_head_in_both_layouts() -> None:
    lives = [c for c in standard_matrix() if c.replays]
    assert all(c.replays >= MIN_REPLAYS and c.max_bs > c.bs for c in lives)
    folded = {(c.head_kind, c.sample_from_anchor) for c in lives if c.folded_sampling}
    fused = {(c.head_kind, c.sample_from_anchor) for c in lives if c.fused_greedy}
    every = {(h, a) for h in ("vanilla", "gated", "rnn") for a in (True, False)}
    assert folded == fused == every


def test_the_default_matrix_reaches_gamma_1_to_8_and_bs_64_with_room_past_it() -> None:
    cases = standard_matrix()
    assert set(range(1, 9)) <= {c.gamma for c in cases}
    assert max(c.bs for c in cases) == 64
    assert all(c.max_bs > c.bs for c in cases if c.bs > 8)
    assert sum(c.max_bs > c.bs for c in cases) > len(cases) // 2


def test_the_thorough_matrix_adds_production_shapes_within_the_memory_guard() -> None:
    standard, thorough = standard_matrix(), thorough_matrix()
    extra = thorough[len(standard) :]
    assert thorough[: len(standard)] == standard
    assert {129280, 151936} <= {c.vocab_size for c in extra}
    assert {"bfloat16", "float16"} <= {c.dtype for c in extra}
    assert {1, 256} <= {c.bs for c in extra}
    assert len({c.seed for c in thorough}) == len(thorough)
    check_cases_fit(thorough, max_memory_bytes=None)


# -- the built-ins live it cleanly -----------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["folded-sampled/gated+confidence", "no-anchor/rnn/greedy-fold/fused"]
)
def test_reference_and_fixed_pass_every_replay(name: str) -> None:
    case = next(c for c in standard_matrix() if c.name == name)
    run = run_case(case, builtin_implementations(("reference", "fixed")))
    for impl, checks in evaluate_run(run, require_observable=False).checks.items():
        life = {c.name: c for c in checks if c.name.startswith("life_")}
        assert set(life) == {
            "life_replays",
            "life_server_buffer",
            "life_fresh_noise",
            "life_drop_in",
        }
        assert not [c for c in checks if c.failed], (impl, [c.detail for c in checks if c.failed])
        assert life["life_replays"].detail == f"{MIN_REPLAYS} of {MIN_REPLAYS} replays"
        assert life["life_server_buffer"].status == "pass"


def test_the_life_reads_the_servers_out_buffer_and_every_replay_is_recorded() -> None:
    run = run_case(LIFE_CASE, builtin_implementations(("fixed",)))
    life = run.results["fixed"].life
    assert life is not None and life.out_passed and life.error is None
    assert [r.step for r in life.replays] == life_schedule(LIFE_CASE)
    for replay in life.replays:
        assert replay.result.tokens is not None
        assert replay.result.tokens.shape == (replay.step.bs, LIFE_CASE.gamma)


# -- defects only a life or a production shape shows -------------------------------------------
@pytest.mark.parametrize("defect", LIFE_DEFECTS, ids=lambda d: d.sampler)
def test_each_life_defect_is_not_lossless_by_the_check_it_targets(
    defect: LifeDefect, matrix_records: list[CaseRecord]
) -> None:
    verdict = implementation_verdict(matrix_records, defect.sampler)
    assert not verdict.lossless, verdict.summary()
    assert verdict.summary().startswith("NOT lossless: ")
    failing = {f.check for f in verdict.failures if f.lossless}
    assert defect.check in failing, verdict.evidence()


@pytest.mark.parametrize("defect", LIFE_DEFECTS, ids=lambda d: d.sampler)
def test_each_life_defect_passes_one_call_on_a_small_case(defect: LifeDefect) -> None:
    # What the harness saw before it drove a life: one case, bs=4, gamma=4, no replays.
    case = LIFE_CASE.with_changes(replays=0)
    if defect.sampler == "FusedForEveryHeadSampler":  # the flag on a vanilla head only
        case = case.with_changes(folded_sampling=False, fused_greedy=True)
    run = run_case(case, [_implementation(defect.sampler)])
    checks = evaluate_run(run, require_observable=False).checks[defect.sampler]
    assert not [c for c in checks if c.failed and tier_of(c.name) is Tier.LOSSLESS]


@pytest.mark.parametrize("name", CORRECT_DESIGNS)
def test_designs_with_unseen_or_carried_draws_are_lossless_not_drop_in(
    name: str, matrix_records: list[CaseRecord]
) -> None:
    verdict = implementation_verdict(matrix_records, name)
    assert verdict.lossless, verdict.evidence()
    assert verdict.summary().startswith("lossless; not drop-in: noise_budget: drew ")


def test_noise_drawn_by_the_previous_call_is_replayed_from_there() -> None:
    run = run_case(LIFE_CASE, [_implementation("DoubleBufferedNoiseSampler")])
    checks = {
        c.name: c
        for c in evaluate_run(run, require_observable=False).checks["DoubleBufferedNoiseSampler"]
    }
    assert checks["noise_replay"].status == "pass"
    assert checks["noise_replay"].detail == "noise drawn before the call (double-buffered)"
    assert checks["fresh_noise"].status == "pass"
    assert checks["life_fresh_noise"].status == "pass"


def test_noise_the_harness_cannot_see_leaves_the_verdict_to_the_oracle() -> None:
    run = run_case(LIFE_CASE, [_implementation("NumpyNoiseSampler")])
    checks = {
        c.name: c for c in evaluate_run(run, require_observable=False).checks["NumpyNoiseSampler"]
    }
    for name in ("noise_replay", "fresh_noise", "life_fresh_noise"):
        assert checks[name].status == "skip", checks[name]
        assert checks[name].detail.startswith(NOT_VISIBLE)
        assert checks[name].detail.endswith("the statistical oracle carries the lossless verdict")


def test_compare_require_lossless_judges_the_life(tmp_path: Path, capsys: Any) -> None:
    """One run, both verdicts: a life defect fails it, and the design whose noise only the
    oracle can judge is lossless there."""
    argv = ["compare", "--only", "reference", "--require", "lossless"]
    for sampler in ("StagesOncePerBucketSampler", "NumpyNoiseSampler"):
        argv += ["--impl", f"{sampler}={PLUGIN_FILE}:{sampler}"]
    assert main([*argv, "--quiet", "--long", "--out-dir", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    stages = next(line for line in lines if "] StagesOncePerBucketSampler: " in line)
    numpy = next(line for line in lines if "] NumpyNoiseSampler: " in line)
    assert "NOT lossless: life_replays" in stages, stages
    assert numpy.lstrip().startswith("[ok]") and "; not drop-in: noise_budget" in numpy, numpy


@pytest.mark.slow
@pytest.mark.parametrize("defect", LIFE_DEFECTS, ids=lambda d: d.sampler)
def test_the_default_report_calls_each_life_defect_not_lossless(
    defect: LifeDefect, tmp_path: Path, capsys: Any
) -> None:
    spec = f"{defect.sampler}={PLUGIN_FILE}:{defect.sampler}"
    argv = ["--impl", spec, "--require", "lossless", "--no-work", "--quiet"]
    assert main([*argv, "--long", "--out-dir", str(tmp_path)]) == 1
    verdict_line = next(
        line for line in capsys.readouterr().out.splitlines() if f"{defect.sampler}:" in line
    )
    assert "NOT lossless: " in verdict_line, verdict_line  # the first failure is named there
    # the evidence names the check the defect targets (it may not be the first one failing)
    assert f": {defect.check}: " in (tmp_path / "report.txt").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", CORRECT_DESIGNS)
def test_the_default_report_passes_the_correct_designs_lossless(
    name: str, tmp_path: Path, capsys: Any
) -> None:
    argv = ["--impl", f"{name}={PLUGIN_FILE}:{name}", "--require", "lossless", "--no-work"]
    assert main([*argv, "--quiet", "--long", "--out-dir", str(tmp_path)]) == 0
    assert "lossless; not drop-in: noise_budget" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("head_kind", ["vanilla", "gated", "rnn"])
def test_a_long_life_stays_clean_for_the_builtins(head_kind: str) -> None:
    case = LIFE_CASE.with_changes(head_kind=head_kind, max_bs=12, replays=8 * MIN_REPLAYS)
    run = run_case(case, builtin_implementations(("reference", "fixed")))
    for checks in evaluate_run(run, require_observable=False).checks.values():
        assert not [c for c in checks if c.failed], [c.detail for c in checks if c.failed]


@pytest.mark.slow
@pytest.mark.parametrize("case", thorough_matrix()[len(standard_matrix()) :], ids=Case.label)
def test_the_thorough_shapes_pass_fixed_and_hold_the_ledger(case: Case) -> None:
    run = run_case(case, builtin_implementations(("reference", "fixed", "legacy")))
    verdict = evaluate_run(run, require_observable=True)
    assert verdict.ledger is not None and verdict.ledger.holds, verdict.ledger.problems
    failed = [c for c in verdict.checks["fixed"] if c.failed]
    assert not failed, [(c.name, c.detail) for c in failed]


@pytest.mark.e2e
def test_a_life_crosses_the_isolation_boundary_unchanged() -> None:
    implementations = builtin_implementations(("fixed",))
    here = run_case(LIFE_CASE, implementations).results["fixed"].life
    with make_executor(isolate=True) as executor:
        there = run_case(LIFE_CASE, implementations, executor=executor).results["fixed"].life
    assert here is not None and there is not None
    assert [r.step for r in there.replays] == [r.step for r in here.replays]
    for mine, theirs in zip(here.replays, there.replays, strict=True):
        assert mine.result.tokens is not None and theirs.result.tokens is not None
        assert torch.equal(mine.result.tokens, theirs.result.tokens)
