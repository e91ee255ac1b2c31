"""What a verdict says it covered is what ran: the matrix's coverage read from the case
records (a recorded life included), the oracle's from its run, and its detection bound
computed by the power machinery, never hard-coded; a defect below the bound passes as
"not ruled out", never as shown absent. Fixed seeds throughout."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.judgement import OracleVerdict
from harness.options import Roles, RunOptions
from harness.oracles import part, stats
from harness.oracles.decode import life_batches
from harness.oracles.fits import CountTable, position_name
from harness.oracles.gof import pearson_fit
from harness.oracles.power import TARGET_POWER, detection_fraction
from harness.oracles.problem import DEFAULT_CONFIG, group_label, row_sets
from harness.pipeline.compare import compare
from harness.pipeline.coverage import MatrixCoverage, StatisticalCoverage
from harness.pipeline.matrix import standard_matrix
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.coverage import matrix_rows
from harness.render.verdicts import comparison_sections
from tests.helpers import judged_records
from tests.plugins.stats_defects import RareArgmaxLastTokenSampler

SMALL = replace(DEFAULT_CONFIG, rows=1_000, head_kinds=("vanilla",))


def _records_of(cases: list) -> list[dict]:
    return [{"case": case.to_json_dict()["case"]} for case in cases]


# -- the matrix -----------------------------------------------------------------------------------
def test_matrix_coverage_is_read_from_the_cases_that_ran() -> None:
    cases = standard_matrix()
    coverage = MatrixCoverage.of_records(_records_of(cases))
    assert coverage.cases == len(cases)
    assert set(coverage.heads) == {c.head_kind for c in cases}
    assert set(coverage.dtypes) == {c.dtype for c in cases}
    assert coverage.layouts == ("anchor", "no-anchor")
    assert coverage.bs == (min(c.bs for c in cases), max(c.bs for c in cases))
    assert coverage.gamma == (min(c.gamma for c in cases), max(c.gamma for c in cases))
    assert coverage.vocab_size[1] == max(c.vocab_size for c in cases)
    # the heads the fused flag was on for: what the matrix ran, not more
    assert set(coverage.flags["fused_greedy"]) == {c.head_kind for c in cases if c.fused_greedy}
    lived = [c for c in cases if c.replays]
    calls = [c.replays if c.replays else (2 if c.has_sampled_rows else 1) for c in cases]
    assert coverage.calls_per_instance == (min(calls), max(calls))
    assert coverage.restagings_per_instance == (0, max(c.replays for c in lived) - 1)
    assert coverage.lives == len(lived) > 0
    assert (
        f"{len(lived)} of {len(cases)} cases live"
        in dict(matrix_rows(coverage))["calls per instance"]
    )


def test_without_a_life_the_coverage_says_one_call_and_a_second_when_sampled() -> None:
    records = _records_of([c for c in standard_matrix() if not c.replays])
    for record in records:
        record["case"].pop("replays", None)
    coverage = MatrixCoverage.of_records(records)
    assert coverage.calls_per_instance == (1, 2) and coverage.restagings_per_instance == (0, 0)
    assert coverage.lives == 0
    assert "no case lives a server's life" in dict(matrix_rows(coverage))["calls per instance"]


def test_a_recorded_life_is_what_the_coverage_reports() -> None:
    records = _records_of([c for c in standard_matrix() if not c.replays][:3])
    records[1]["case"] = {**records[1]["case"], "replays": 12}
    coverage = MatrixCoverage.of_records(records)
    assert coverage.calls_per_instance == (2, 12)
    assert coverage.restagings_per_instance == (0, 11)
    assert coverage.lives == 1
    assert "1 of 3 cases live a server's life" in dict(matrix_rows(coverage))["calls per instance"]


# -- the detection bound --------------------------------------------------------------------------
def _table(rows_per_stratum: int) -> CountTable:
    generator = torch.Generator().manual_seed(11)
    probs = torch.softmax(torch.randn(8, 8, generator=generator, dtype=torch.float64), dim=-1)
    observed = torch.full((8, 8), rows_per_stratum / 8, dtype=torch.float64)
    return CountTable("T=1", position_name(1), observed, probs)


def _rejection_rate(table: CountTable, *, fraction: float, level: float, trials: int) -> float:
    """Monte Carlo: a fraction of each stratum's rows commits its most likely token."""
    rng = np.random.default_rng(5)
    probs = table.expected_probs.numpy()
    n = int(table.observed[0].sum())
    law = (1 - fraction) * probs + fraction * np.eye(8)[probs.argmax(axis=1)]
    rejected = 0
    for _ in range(trials):
        counts = np.stack([rng.multinomial(n, row) for row in law])
        fit = pearson_fit(torch.from_numpy(counts).double(), expected_probs=table.expected_probs)
        rejected += fit.p_value < level
    return rejected / trials


def test_the_detection_bound_is_where_the_test_reaches_the_stated_power() -> None:
    table, level = _table(400), 1e-4
    bound = detection_fraction(table, level=level, power=TARGET_POWER)
    assert bound is not None and 0 < bound < 1
    assert _rejection_rate(table, fraction=bound, level=level, trials=400) >= 0.97
    assert _rejection_rate(table, fraction=bound / 2, level=level, trials=400) <= 0.7
    # more rows, a smaller bound; too few, none
    larger = detection_fraction(_table(1600), level=level, power=TARGET_POWER)
    assert larger is not None and larger < bound
    assert detection_fraction(_table(8), level=level, power=TARGET_POWER) is None


@pytest.fixture(scope="module")
def oracle() -> stats.OracleRun:
    return stats.run_oracle(SMALL, implementations=builtin_implementations(("fixed",)))


def test_the_oracle_coverage_is_computed_from_its_run(oracle: stats.OracleRun) -> None:
    coverage = part.statistical_coverage(oracle)
    assert coverage is not None and coverage.implementation == "fixed"
    problem = oracle.problem
    rounds = oracle.decoded["fixed"]["far"]["vanilla"].rounds
    assert coverage.rounds == rounds >= 3
    calls = [b for r in range(rounds) for b in life_batches(problem, r)]
    assert coverage.calls_per_instance == len(calls) > rounds
    assert coverage.restagings_per_instance >= 2
    assert coverage.batch_sizes[0] == 1 and coverage.batch_sizes[-1] == SMALL.rows
    for p in oracle.problems:  # the far target's truncated sets take fewer rows than the rest
        taken = Counter(group_label(s) for s in row_sets(p.config))
        assert coverage.rows_per_group[p.target.name] == dict(taken)
    assert set(coverage.rows_per_group["far"]) == {group_label(g) for g in SMALL.groups}
    result = oracle.results["fixed"]
    assert coverage.bounds == stats.best_bounds(result.bounds)
    assert [b.position for b in coverage.bounds] == list(range(SMALL.gamma + 1))
    # one staging for the whole life: as many calls as rounds, none restaged
    one_staging = stats.run_oracle(
        replace(SMALL, restage=False), implementations=builtin_implementations(("fixed",))
    )
    flat = part.statistical_coverage(one_staging)
    assert flat is not None
    assert flat.calls_per_instance == flat.rounds and flat.restagings_per_instance == 0


def test_a_defect_below_the_bound_is_not_ruled_out_never_shown_absent() -> None:
    planted = 1 / RareArgmaxLastTokenSampler.EVERY
    impl = Implementation("rare", RareArgmaxLastTokenSampler, "test:rare")
    result = stats.run_stats(impl)
    assert result.passed, result.carrier_names()
    last_draft = next(b for b in stats.best_bounds(result.bounds) if b.position == 3)
    assert last_draft.fraction is None or last_draft.fraction > planted
    part = result.statistical()
    assert part.not_ruled_out.startswith("not ruled out")
    assert "not ruled out" in part.describe()
    # the same defect in every slot is above the bound: rejected, so nothing left open
    every_row = type("EveryRow", (RareArgmaxLastTokenSampler,), {"EVERY": 1})
    full = stats.run_stats(Implementation("every-row", every_row, "test:every-row"))
    assert full.rejected and not full.statistical().not_ruled_out


def test_the_coverage_is_in_the_text_markdown_and_json_verdicts(oracle: stats.OracleRun) -> None:
    cases = standard_matrix()[:2]
    records = compare(cases, builtin_implementations(("reference", "fixed")), options=RunOptions())
    coverage = part.statistical_coverage(oracle)
    roles = Roles(pair=("reference", "fixed"))
    judged = replace(
        OracleVerdict.of(oracle, roles=roles), coverage=coverage, statisticals={}
    )  # the oracle's coverage alone, as the judge holds it
    judgement = judged_records(records, roles=roles, oracle=judged)
    sections = comparison_sections(judgement)
    block = next(s for s in sections if s.title == "Coverage")
    assert "calls per instance" in block.text and "detection bound" in block.text
    assert "not ruled out" in block.text
    markdown = block.markdown()
    assert re.search(r"^\| position +\| +every head and group +\|", markdown, re.M), markdown
    assert re.search(r"^\| pos 0 +\|", markdown, re.M)
    body = judgement.to_json()
    json.dumps(body, allow_nan=False)
    assert body["coverage"]["matrix"]["cases"] == 2
    assert isinstance(coverage, StatisticalCoverage)
    assert body["coverage"]["statistical"]["bounds"][0]["fraction"] == coverage.bounds[0].fraction
    no_oracle = comparison_sections(judged_records(records, roles=roles))
    assert "not run" in next(s for s in no_oracle if s.title == "Coverage").text
