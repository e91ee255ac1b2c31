"""The support scan: on degenerate rows exactly one token may be drafted at each (row,
step); the harness owns the noise counter, so a hit replays from its counter alone.

Fast tests scan about 10^5-10^6 triples per implementation (each says its bound); the
``slow`` test scans 10^8 in all, over every head kind, two dtypes and both patterns.
"""

from __future__ import annotations

import json

import pytest
import torch

from harness.cli import main
from harness.pipeline.support_scan import (
    NonfiniteRule,
    RowPattern,
    ScanPlan,
    ScanPoint,
    full_plan,
    nonfinite_behaviour,
    pattern_logits,
    scan_point,
    top_tokens,
)
from harness.plugins.implementations import (
    Implementation,
    builtin_implementations,
    parse_impl_spec,
)
from reference import HEAD_KINDS
from tests.plugins.alternative_samplers import MultinomialSampler, PrestagedNoiseSampler
from tests.plugins.support_defects import HalfUniformGumbelSampler, NanAsMaskedSampler

upstream = pytest.mark.upstream
FIXED = builtin_implementations(("fixed",))[0]
AFTER_FIX = "after=tests/plugins/upstream/dspark_after_fix.py"
HALF_UNIFORM = Implementation("half-uniform", HalfUniformGumbelSampler, "test:half-uniform")
NAN_AS_MASKED = Implementation("nan-as-masked", NanAsMaskedSampler, "test:nan-as-masked")
CORRECT = {
    "fixed": FIXED,
    "multinomial": Implementation("multinomial", MultinomialSampler, "test:multinomial"),
    "prestaged-noise": Implementation("prestaged", PrestagedNoiseSampler, "test:prestaged"),
}


def small_point(pattern: RowPattern, **changes: object) -> ScanPoint:
    fields: dict[str, object] = dict(
        head_kind="vanilla", dtype="float32", pattern=pattern, bs=1024, gamma=4, vocab_size=4
    )
    fields.update(changes, calls=changes.get("calls", 8))
    return ScanPoint(**fields)  # type: ignore[arg-type]


def test_the_patterns_allow_exactly_the_top_token() -> None:
    point = small_point(RowPattern.FAR_APART, bs=2, gamma=2)
    logits = pattern_logits(point, device=torch.device("cpu")).view(2, 2, 4)
    assert top_tokens(point, device=torch.device("cpu")).tolist() == [[0, 1], [1, 2]]
    inf = float("inf")
    assert logits[0, 0].tolist() == [0.0, -1e4, -inf, -inf]
    assert logits[1, 1].tolist() == [-inf, -inf, 0.0, -1e4]
    lone = pattern_logits(small_point(RowPattern.LONE_FINITE, bs=1, gamma=1), device="cpu")
    assert lone.tolist() == [[0.0, -inf, -inf, -inf]]


def test_a_plan_gives_every_point_its_own_counters() -> None:
    plan = ScanPlan(
        head_kinds=HEAD_KINDS,
        dtypes=("float32", "bfloat16"),
        patterns=tuple(RowPattern),
        bs=16,
        gamma=4,
        vocab_size=4,
        triples_per_point=640,
    )
    points = list(plan.points())
    assert len(points) == 12 and all(p.calls == 10 for p in points)
    ranges = [set(range(p.first_counter, p.first_counter + p.calls)) for p in points]
    assert set.union(*ranges) == set(range(120))  # disjoint and together every counter
    assert plan.triples == 12 * 640


@pytest.mark.parametrize("pattern", list(RowPattern))
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_samplers_never_draft_outside_the_support(name: str, pattern: RowPattern) -> None:
    for head_kind, dtype in (("vanilla", "float32"), ("rnn", "bfloat16")):
        result = scan_point(
            CORRECT[name], small_point(pattern, head_kind=head_kind, dtype=dtype, bs=4096)
        )
        assert result.error is None and result.hit_count == 0, result.hits
        assert result.triples == 4096 * 4 * 8  # the bound this test states: 1.3e5 per point


@pytest.mark.parametrize("pattern", list(RowPattern))
def test_a_rounded_uniform_is_caught_drafting_outside_the_support(pattern: RowPattern) -> None:
    result = scan_point(HALF_UNIFORM, small_point(pattern))
    assert result.error is None and result.hit_count > 0
    hit = result.hits[0]
    assert hit.token != hit.allowed
    top = top_tokens(result.point, device=torch.device("cpu"))
    assert hit.allowed == int(top[hit.row, hit.step])


def test_a_hit_is_written_and_replays_bit_for_bit(tmp_path, capsys) -> None:
    code = main(
        ["scan", "--impl", "half=tests/plugins/support_defects.py:HalfUniformGumbelSampler",
         "--only", "fixed", "--heads", "vanilla", "--dtypes", "float32", "--patterns",
         "lone-finite", "--bs", "1024", "--triples", "32768", "--quiet", "--json",
         "--out-dir", str(tmp_path)]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # a hit is a lossless failure
    section = report["sections"][0]["data"]
    assert section["plan"]["triples_per_implementation"] == 32768
    repro = tmp_path / "scan-repro-half.json"
    assert section["repros"] == {"half": str(repro)}
    assert "fixed" not in section["repros"]
    assert main(["repro", str(repro), "--json", "--out-dir", str(tmp_path / "r")]) == 1
    replay = json.loads(capsys.readouterr().out)
    assert replay["identical"] and replay["hit_count"] >= 1
    recorded = json.loads(repro.read_text())["hit"]
    assert replay["hit"] == recorded
    # the same call of a correct sampler: a different draw, inside the support
    fixed = ["--impl", "builtin:fixed", "--json", "--out-dir", str(tmp_path / "f")]
    assert main(["repro", str(repro), *fixed]) == 0
    assert not json.loads(capsys.readouterr().out)["identical"]


def test_expect_fail_turns_a_hit_into_the_expected_result(tmp_path) -> None:
    args = [
        "scan", "--impl", "half=tests/plugins/support_defects.py:HalfUniformGumbelSampler",
        "--heads", "vanilla", "--dtypes", "float32", "--patterns", "far-apart",
        "--bs", "1024", "--triples", "32768", "--quiet", "--out-dir", str(tmp_path),
    ]  # fmt: skip
    assert main([*args, "--expect-fail", "half"]) == 0
    assert main([*args, "--expect-fail", "fixed"]) == 1  # fixed does not hit; half does


@pytest.mark.parametrize(
    "bad",
    [["--vocab", "1"], ["--patterns", "nope"], ["--heads", "lstm"], ["--triples", "0"],
     ["--device", "cuda"], ["--expect-fail", "ghost"]],
)  # fmt: skip
def test_bad_scan_options_are_bad_usage(bad: list[str], tmp_path, capsys) -> None:
    assert main(["scan", *bad, "--quiet", "--out-dir", str(tmp_path)]) == 2
    assert "error" in capsys.readouterr().err


def test_fixed_and_the_after_fix_module_meet_the_nonfinite_rule() -> None:
    for impl in (FIXED, parse_impl_spec(AFTER_FIX)):
        outcomes = nonfinite_behaviour(impl, bs=256)
        assert [o.rule for o in outcomes] == list(NonfiniteRule)
        assert all(o.holds for o in outcomes), outcomes


def test_reading_nan_as_masked_breaks_the_first_nan_rule() -> None:
    outcomes = {o.rule: o for o in nonfinite_behaviour(NAN_AS_MASKED, bs=256)}
    assert not outcomes[NonfiniteRule.FIRST_NAN].holds
    assert outcomes[NonfiniteRule.FIRST_NAN].violations == 256 * 4 * 4
    assert outcomes[NonfiniteRule.NEG_INF_NEVER].holds


# -- the released sampler -----------------------------------------------------------------------
@upstream
def test_the_released_sampler_drafts_a_masked_token_and_the_repro_replays(tmp_path, capsys) -> None:
    """Seed 0: the Philox word of (row 13705, step 1, counter 3) rounds its uniform to 1."""
    code = main(
        ["scan", "--impl", "sg=sglang", "--heads", "vanilla", "--dtypes", "float32",
         "--patterns", "lone-finite", "--bs", "16384", "--triples", "262144", "--json",
         "--quiet", "--out-dir", str(tmp_path)]
    )  # fmt: skip
    section = json.loads(capsys.readouterr().out)["sections"][0]["data"]
    assert code == 1
    hits = [h for r in section["results"] if r["implementation"] == "sg" for h in r["hits"]]
    assert {"counter": 3, "row": 13705, "step": 1, "token": 0, "allowed": 2} in hits
    assert all(r["hit_count"] == 0 for r in section["results"] if r["implementation"] == "fixed")
    assert main(["repro", section["repros"]["sg"], "--out-dir", str(tmp_path / "r")]) == 1
    assert "IDENTICAL" in capsys.readouterr().out


@upstream
def test_the_released_sampler_meets_the_nonfinite_rule_on_a_small_probe() -> None:
    outcomes = nonfinite_behaviour(parse_impl_spec("sg=sglang"), bs=256)
    assert all(o.holds for o in outcomes), outcomes


@pytest.mark.slow
@upstream
def test_a_hundred_million_triples_find_only_the_released_samplers_hits() -> None:
    """10^8 triples in all: the released sampler 4.7e7, fixed and the after-fix module
    2.6e7 each, every head kind x {float32, bfloat16} x both patterns."""
    budgets = {"sg=sglang": 1 << 22, "builtin:fixed": 1 << 21, AFTER_FIX: 1 << 21}
    covered = 0
    for spec, per_point in budgets.items():
        impl = FIXED if spec == "builtin:fixed" else parse_impl_spec(spec)
        results = [scan_point(impl, p) for p in full_plan(triples_per_point=per_point).points()]
        covered += sum(r.triples for r in results)
        assert all(r.error is None for r in results)
        hits = sum(r.hit_count for r in results)
        if impl.name == "sg":
            assert hits >= 1
        else:
            assert hits == 0, [r.hits for r in results if r.hits]
    assert covered >= 10**8
