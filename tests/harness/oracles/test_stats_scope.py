"""The oracle's scope: what one implementation's decode runs when its convention (or its
verifier) declares a cut, and when some head kinds are outside its contract.

A convention of our own that declares itself as an interpreted one does (vLLM 0.33's
under Triton's interpreter: the far target only, 250 rows per head, 12 rounds, the
vanilla head alone inside its contract) stands in here, so the scope is seen on our own
samplers in a second: the result's rows and bounds are the cut's, the heads outside are
reported not run (never a pass), and at the cut the double walk (legacy) is still
rejected while the fixed sampler passes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import torch

from harness.oracle_cut import ORACLE_LAWS, OUR_LAW, VLLM_LAW, OracleCut
from harness.oracles import scope as oracle_scope
from harness.oracles import stats
from harness.oracles.problem import DEFAULT_CONFIG, FAR
from harness.plugins.construct import bind_constructor
from harness.plugins.conventions import ConstructorConvention, ConventionName
from harness.plugins.implementations import builtin_implementations
from harness.render.statistics import cut_lines, results_table
from reference.streams import VerifierNoise
from reference.verifier import CHAIN_VERIFIER, VerifyStep

CUT = OracleCut(rows=250, rounds=12, targets=("far",), by="a test convention (as interpreted)")
VERIFIER_CUT = OracleCut(rows=600, by="a slow test verifier")
FIXED, LEGACY = builtin_implementations(("fixed", "legacy"))


class CutConvention(ConstructorConvention):
    """Our constructor convention, declaring a cut and the vanilla head as its contract."""

    @property
    def oracle_cut(self) -> OracleCut | None:
        return CUT

    def outside_contract(self, case: Any, *, sampler_class: Any) -> str | None:
        if case.head_kind == "vanilla":
            return None
        return f"the {case.head_kind} head is not in this test's contract"


class SlowChain:
    """Our chain verifier, declared slow (a row cut of its own)."""

    name = "slow-chain"
    oracle_cut: OracleCut | None = VERIFIER_CUT
    reads_truncation = True  # our chain's target law: each request's

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        return CHAIN_VERIFIER.start(noise=noise, device=device)


@pytest.fixture
def cut_convention(monkeypatch: pytest.MonkeyPatch) -> None:
    def declared(sampler_class: type) -> CutConvention:
        return CutConvention(ConventionName(bind_constructor(sampler_class).convention))

    monkeypatch.setattr(oracle_scope, "convention_of", declared)  # where scope_under reads it


def test_the_conventions_cut_and_contract_make_the_scope(cut_convention: None) -> None:
    scope = stats.scope_under(DEFAULT_CONFIG, verifier=CHAIN_VERIFIER, implementation=FIXED)
    assert scope.config == replace(
        DEFAULT_CONFIG, rows=250, rounds=12, targets=(FAR,), head_kinds=("vanilla",)
    )
    assert scope.cuts == (CUT,)
    assert [kind for kind, _ in scope.heads_not_run] == ["gated", "rnn"]
    # the verifier's cut and the convention's, one mechanism: the smaller rows win
    both = stats.scope_under(DEFAULT_CONFIG, verifier=SlowChain(), implementation=FIXED)
    assert both.config == scope.config and both.cuts == (VERIFIER_CUT, CUT)
    # without an implementation only the verifier cuts, every head stays
    alone = stats.scope_under(DEFAULT_CONFIG, verifier=SlowChain())
    assert alone.config == replace(DEFAULT_CONFIG, rows=600) and not alone.heads_not_run
    assert stats.scope_label(scope).startswith("1 target x 1 head, rows per head far 250, 12 ")
    assert stats.scope_label(alone).startswith("3 targets x 3 heads, rows per head far 600, ")


def test_a_scope_is_its_cuts_and_the_heads_left_out(cut_convention: None) -> None:
    for verifier in (CHAIN_VERIFIER, SlowChain()):
        scope = stats.scope_under(DEFAULT_CONFIG, verifier=verifier, implementation=FIXED)
        again = stats.scope_of(DEFAULT_CONFIG, cuts=scope.cuts, heads_not_run=scope.heads_not_run)
        assert again == scope  # what an implementation's worker answers rebuilds it


@pytest.mark.e2e
def test_under_isolate_the_scope_of_a_worker_only_plug_in_is_its_workers() -> None:
    from harness.oracles.scope import scope_in_domain
    from harness.pipeline.isolation import make_executor
    from harness.pipeline.worker_only import worker_only

    spec = "u=tests/plugins/alternative_samplers.py:UniformGumbelSampler"
    with make_executor(isolate=True) as executor:
        plug_in = worker_only(spec, executor=executor)
        for verifier in (CHAIN_VERIFIER, SlowChain()):
            asked = scope_in_domain(
                DEFAULT_CONFIG, verifier=verifier, implementation=plug_in, executor=executor
            )
            assert asked == stats.scope_under(DEFAULT_CONFIG, verifier=verifier)  # ours: no cut
    assert asked.cuts == (VERIFIER_CUT,)


def test_a_cut_that_keeps_no_target_of_the_config_is_refused(cut_convention: None) -> None:
    mid_only = replace(DEFAULT_CONFIG, targets=DEFAULT_CONFIG.targets[1:2])
    with pytest.raises(stats.StatsError, match="keeps the targets \\['far'\\]"):
        stats.scope_under(mid_only, verifier=CHAIN_VERIFIER, implementation=FIXED)


def test_at_the_cut_the_double_walk_is_rejected_and_the_fix_passes(cut_convention: None) -> None:
    oracle = stats.run_oracle(DEFAULT_CONFIG, implementations=[FIXED, LEGACY])
    fixed, legacy = oracle.results["fixed"], oracle.results["legacy"]
    for result in (fixed, legacy):
        assert (
            result.rows == {"far": 250} and result.family_size == 56
        )  # 7 tests x 8 groups (4 temperatures, 4 truncated sets), one head
        assert [kind for kind, _ in result.heads_not_run] == ["gated", "rnn"]
        assert all(b.rows <= 250 * 12 for b in result.bounds)
        assert {s.head for s in result.statistics} == {"vanilla"}
    assert fixed.passed
    assert legacy.rejected and not legacy.rejected_at_position(0)
    assert stats.meets_expectation(fixed) and stats.meets_expectation(legacy)

    stated = fixed.statistical()
    assert stated.ran and not stated.failed and stated.not_ruled_out.startswith("not ruled out")
    assert "gated head not run (the gated head is not in this test's contract)" in stated.scope
    assert (
        "cut by a test convention (as interpreted): far target only, at most 250 rows per head, "
        "12 rounds per row; ran far 250 rows per head"
    ) in stated.scope
    assert stated.scope in stated.describe()
    assert cut_lines(oracle)[0].startswith(
        "fixed under chain: rows per head far 250, 12 rounds, heads vanilla (cut by a test "
        "convention (as interpreted); gated head not run:"
    )
    notes = results_table(oracle.every_result())
    assert "fixed (chain): gated head not run" in notes and "not ruled out" in notes
    assert not oracle.decoded  # nothing decoded at the first verifier's problems


def test_no_head_inside_the_contract_is_not_run_and_never_a_pass(cut_convention: None) -> None:
    gated = replace(DEFAULT_CONFIG, head_kinds=("gated",))
    result = stats.run_oracle(gated, implementations=[FIXED]).results["fixed"]
    assert not result.ran and not result.passed and not result.statistics
    stated = result.statistical()
    assert not stated.ran and not stated.failed  # checks only: the oracle says nothing
    assert stated.describe() == (
        "statistical oracle not run [gated head not run (the gated head is not in this "
        "test's contract)]"
    )
    assert not stats.meets_expectation(result)  # fixed must pass: a result not run does not


def test_the_oracles_text_shows_a_cut_result_at_what_it_ran(cut_convention: None) -> None:
    from harness.judgement import OracleVerdict
    from harness.oracles.part import statistical_coverage, statistical_verdicts
    from harness.render.statistics import oracle_text, stats_section

    oracle = stats.run_oracle(
        replace(DEFAULT_CONFIG, rows=300), implementations=[FIXED], verifiers=(CHAIN_VERIFIER,)
    )
    text = oracle_text(oracle)  # the config has three targets and heads; the result one each
    judged = OracleVerdict.of(oracle, roles=stats.DEFAULT_ROLES)
    assert judged.ok == stats.expectations_hold(oracle.results)
    section = stats_section(judged)  # as compare and report build it, from the judged run
    assert section.ok and text in section.text
    assert "fixed passes (p=" in section.verdict and "[of 56 tests: its scope]" in section.verdict
    assert statistical_coverage(oracle) is None  # nothing ran at the full config
    assert "gated head not run" in statistical_verdicts(oracle)["fixed"].scope
    assert "fixed under chain: p-values per head and group" in text
    cells = {tuple(line.split()[:2]) for line in text.splitlines()}
    assert ("far", "vanilla") in cells
    assert not cells & {("far", "gated"), ("far", "rnn"), ("mid", "vanilla"), ("near", "vanilla")}


def test_a_cut_sets_the_sequential_stages_where_it_names_them() -> None:
    shallow = OracleCut(rows=200, by="an interpreted part", stage_rows=(200,))
    assert oracle_scope.cut_config(DEFAULT_CONFIG, shallow).stage_rows == (200,)
    kept = oracle_scope.cut_config(DEFAULT_CONFIG, OracleCut(rows=200, by="a slow verifier"))
    assert kept.stage_rows == DEFAULT_CONFIG.stage_rows != (200,)
    with pytest.raises(ValueError, match="stage_rows"):
        OracleCut(rows=200, by="x", stage_rows=(0,))


def test_a_cut_keeps_the_heads_it_names_and_refuses_to_keep_none() -> None:
    vanilla = OracleCut(rows=200, by="an interpreted part", heads=("vanilla",))
    assert oracle_scope.cut_config(DEFAULT_CONFIG, vanilla).head_kinds == ("vanilla",)
    every = oracle_scope.cut_config(DEFAULT_CONFIG, OracleCut(rows=200, by="a slow verifier"))
    assert every.head_kinds == DEFAULT_CONFIG.head_kinds != ("vanilla",)
    with pytest.raises(stats.StatsError, match="keeps the heads \\['vanilla'\\]"):
        oracle_scope.cut_config(replace(DEFAULT_CONFIG, head_kinds=("rnn",)), vanilla)
    with pytest.raises(ValueError, match=r"OracleCut\.heads"):
        OracleCut(rows=200, by="x", heads=())


class OnItsLaw:
    """Our chain verifier, declaring another server's law as its own: the oracle's exact
    laws follow the law it names (``JudgedOnItsLaw``)."""

    name = "on-its-law"
    oracle_law = VLLM_LAW
    reads_truncation = True

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        return CHAIN_VERIFIER.start(noise=noise, device=device)


def test_a_verifier_that_names_its_law_is_judged_against_it_and_the_result_says_so() -> None:
    config = replace(DEFAULT_CONFIG, head_kinds=("vanilla",))
    under_it = stats.scope_under(config, verifier=OnItsLaw())
    assert under_it.config == replace(config, law=VLLM_LAW) and under_it.cuts == ()
    assert stats.scope_under(config, verifier=CHAIN_VERIFIER).config == config  # ours
    result = stats.StatsResult(
        name="x",
        rows={},
        alpha=0.1,
        family_size=0,
        statistics=(),
        marginals=(),
        mean_accepted_length={},
        law=VLLM_LAW,
    )
    assert result.randomness() == f"judged against {ORACLE_LAWS[VLLM_LAW]}"
    assert replace(result, law=OUR_LAW).randomness() == ""


def test_a_law_the_oracle_does_not_know_is_refused_naming_the_laws() -> None:
    with pytest.raises(stats.StatsError, match="law must be one of \\['ours', 'vllm'\\]"):
        replace(DEFAULT_CONFIG, law="sglang")
