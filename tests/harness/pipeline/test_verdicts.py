"""The two verdicts: each new lossless check fails exactly on its planted defect, correct
samplers of other designs are lossless and not drop-in (with the reason), and the
built-in fixed sampler is drop-in clean."""

from __future__ import annotations

from typing import Any

import pytest

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import Case
from harness.options import Roles
from harness.pipeline import runner
from harness.pipeline.check_result import Skip
from harness.pipeline.checks import CHECK_TIERS, tier_of
from harness.pipeline.compare import case_record, evaluate_run
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.records import CaseRecord
from harness.pipeline.runner import run_case
from harness.pipeline.verdicts import implementation_verdict
from harness.plugins.construct import bind_constructor
from harness.plugins.conventions import ConstructorConvention, ConventionName
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.verdicts import comparison_sections
from harness.upstream.dispatch import convention_of
from tests.helpers import DefaultReport, judged_records, small_case
from tests.plugins import alternative_samplers, planted_defects_verdicts

SAMPLED = small_case(seed=21, vocab_size=64, hidden_size=16, temperature=0.8, max_bs=5)


def _plugin(module: object, name: str) -> Implementation:
    return Implementation(name, getattr(module, name), f"tests:{name}")


def _failed(case: Case, implementation: Implementation) -> dict[str, str]:
    run = run_case(case, [*builtin_implementations(("reference",)), implementation])
    verdict = evaluate_run(run, require_observable=False)
    return {c.name: tier_of(c.name) for c in verdict.checks[implementation.name] if c.failed}


def _lossless_failures(case: Case, implementation: Implementation) -> set[str]:
    return {name for name, tier in _failed(case, implementation).items() if tier == "lossless"}


@pytest.mark.parametrize(
    ("sampler", "check"),
    [
        ("OutPastBatchSampler", "no_writes_outside_batch"),
        ("CorrectedPastBatchSampler", "no_writes_outside_batch"),
        ("ConfidencePastBatchSampler", "no_writes_outside_batch"),
        ("FrozenNoiseSampler", "fresh_noise"),
        ("InputMutatingSampler", "inputs_unchanged"),
        ("WrongTemperatureSampler", "noise_replay"),
    ],
)
def test_each_planted_defect_fails_exactly_its_lossless_check(sampler: str, check: str) -> None:
    planted = _plugin(planted_defects_verdicts, sampler)
    assert _lossless_failures(SAMPLED, planted) == {check}


def test_writes_past_the_batch_pass_where_there_are_no_rows_past_it() -> None:
    planted = _plugin(planted_defects_verdicts, "OutPastBatchSampler")
    assert _lossless_failures(SAMPLED.with_changes(max_bs=SAMPLED.bs), planted) == set()


def test_a_mutated_input_is_restored_for_the_next_implementation() -> None:
    mutating = _plugin(planted_defects_verdicts, "InputMutatingSampler")
    run = run_case(SAMPLED, [mutating, *builtin_implementations(("reference", "fixed"))])
    verdict = evaluate_run(run, require_observable=False)
    assert run.results["InputMutatingSampler"].mutated_inputs == ["hidden_states"]
    assert not verdict.failed_checks("fixed")


@pytest.mark.parametrize(
    ("sampler", "reason"),
    [
        ("PrestagedNoiseSampler", "exponential_ [3, 4, 64] (staging)"),
        ("UniformGumbelSampler", "uniform_ [3, 64] (call)"),
        ("MultinomialSampler", "multinomial [3, 1] (call)"),
    ],
)
def test_correct_other_designs_are_lossless_not_drop_in(sampler: str, reason: str) -> None:
    failed = _failed(SAMPLED, _plugin(alternative_samplers, sampler))
    assert failed and set(failed.values()) == {"drop_in"}
    run = run_case(SAMPLED, [_plugin(alternative_samplers, sampler)])
    checks = evaluate_run(run, require_observable=False).checks[sampler]
    budget = next(c for c in checks if c.name == "noise_budget")
    assert budget.failed and reason in budget.detail


def test_non_replayable_draws_skip_noise_replay_and_say_who_decides() -> None:
    run = run_case(SAMPLED, [_plugin(alternative_samplers, "UniformGumbelSampler")])
    checks = evaluate_run(run, require_observable=False).checks["UniformGumbelSampler"]
    replay = next(c for c in checks if c.name == "noise_replay")
    assert replay.status == "skip" and replay.skip is Skip.NOT_VISIBLE
    assert replay.detail.startswith("draws not visible / not replayable (4 x uniform_ ")
    assert "the statistical oracle carries the lossless verdict" in replay.detail


def test_prestaged_noise_is_replayed_from_the_staging_draw() -> None:
    run = run_case(SAMPLED, [_plugin(alternative_samplers, "PrestagedNoiseSampler")])
    checks = evaluate_run(run, require_observable=False).checks["PrestagedNoiseSampler"]
    statuses = {c.name: c.status for c in checks}
    assert statuses["noise_replay"] == "pass"
    assert statuses["fresh_noise"] == "pass"


def test_fixed_is_drop_in_clean_on_the_standard_matrix(default_report: DefaultReport) -> None:
    records = default_report.json()["cases"]
    assert [r["case"] for r in records] == [c.to_json_dict()["case"] for c in standard_matrix()]
    for record in records:
        fixed = record["implementations"]["fixed"]
        failed = [c["name"] for c in fixed["checks"] if c["status"] == "fail"]
        assert fixed["error"] is None and not failed, (record["label"], failed)
        assert fixed["drop_in"] is True, record["label"]


def test_standard_matrix_has_rows_past_the_batch_in_both_layouts() -> None:
    past = [c for c in standard_matrix() if c.max_bs > c.bs]
    assert sum(c.sample_from_anchor for c in past) >= 3
    assert sum(not c.sample_from_anchor for c in past) >= 3
    assert any(c.confidence for c in past) and any(c.folded_sampling for c in past)


def test_every_check_has_a_tier() -> None:
    run = run_case(SAMPLED, builtin_implementations())
    verdict = evaluate_run(run, require_observable=False)
    names = {c.name for checks in verdict.checks.values() for c in checks}
    assert names <= set(CHECK_TIERS)
    assert {CHECK_TIERS[n] for n in names} == {"lossless", "drop_in"}


class VanillaOnlyConvention(ConstructorConvention):
    """Our constructor convention with only the vanilla head inside its contract (as
    vLLM's hooks, which take no hidden state)."""

    def outside_contract(self, case: Case, *, sampler_class: Any) -> str | None:
        return None if case.head_kind == "vanilla" else f"no {case.head_kind} head here"


def _records_under_vanilla_only(
    monkeypatch: pytest.MonkeyPatch, head_kinds: tuple[str, ...]
) -> list[CaseRecord]:
    def declared(sampler_class: type) -> ConstructorConvention:
        if sampler_class is FixedSampler:
            return VanillaOnlyConvention(ConventionName(bind_constructor(sampler_class).convention))
        return convention_of(sampler_class)

    monkeypatch.setattr(runner, "convention_of", declared)
    implementations = builtin_implementations(("fixed", "reference"))
    records = []
    for i, head_kind in enumerate(head_kinds):
        verdict = evaluate_run(
            run_case(small_case(seed=i, head_kind=head_kind), implementations),
            require_observable=False,
        )
        records.append(case_record(verdict, key=str(i)))
    return records


def test_cases_outside_a_contract_are_counted_as_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records_under_vanilla_only(monkeypatch, ("vanilla", "gated", "rnn"))
    verdict = implementation_verdict(records, "fixed")
    assert (verdict.cases, verdict.outside_contract, verdict.judged) == (3, 2, 1)
    assert verdict.lossless and verdict.drop_in
    assert verdict.summary().endswith("(2 of 3 cases not run: outside its contract)")
    line = comparison_sections(judged_records(records))[0].verdict
    assert line.startswith("fixed: clean on 1/3 cases (2 not run: outside its contract)")
    assert implementation_verdict(records, "reference").outside_contract == 0


def test_a_verdict_on_no_case_that_ran_claims_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    records = _records_under_vanilla_only(monkeypatch, ("gated", "rnn"))
    verdict = implementation_verdict(records, "fixed")
    assert verdict.judged == 0 and not verdict.lossless and not verdict.drop_in
    assert verdict.summary() == "not run: all 2 cases are outside its contract"
    section = comparison_sections(judged_records(records))[0]
    assert not section.ok and section.verdict.startswith("fixed: not run: all 2 cases")
    expected_to_fail = comparison_sections(
        judged_records(records, roles=Roles(expect_fail=("fixed",)))
    )[0]
    assert not expected_to_fail.ok  # nothing ran shows no failure either
