"""A release's row carries its life across the junction (docs/releases.md, "What a
release's row holds"): the states that ran and their rows and bounds, the depth its era
sets, what stands in; a finding of the life names the state that exposed it and its
repro replays the life alone (``--life-only``)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

from harness.oracles.junction import HARNESS_BATCH_BUILDING, RequestState
from harness.oracles.junction_judge import JUNCTION_ROWS, judge_junction
from harness.plugins.implementations import builtin_implementations
from harness.releases import sweep
from harness.releases.life import life_depth, life_findings
from harness.releases.sweep import ReleaseTask
from harness.render.releases import life_cell, life_lines
from harness.upstream.releases.eras import ERAS
from tests.harness.oracles.test_junction import SMALL, StaleDraftProbs


def _life_row(tmp_path: Path, name: str, *, rows: int | None = None) -> sweep.ReleaseRow:
    (implementation,) = builtin_implementations((name,))
    task = ReleaseTask(
        package="impl",
        version=name,
        cache=str(tmp_path),
        offline=True,
        life_only=True,
        life_rows=rows,
    )
    return sweep._judged_row(
        task,
        era="-",
        implementation=implementation,
        verifier="chain",
        not_covered=[],
        started=time.perf_counter(),
    )


def test_a_life_only_row_states_every_state_its_rows_and_what_stands_in(tmp_path: Path) -> None:
    row = _life_row(tmp_path, "fixed")
    life = row["life"]
    assert life is not None and row["lossless"] is True and life["lossless"] is True
    assert set(life["states"]) == {state.value for state in RequestState}
    assert all(said["rows"] >= JUNCTION_ROWS for said in life["states"].values())
    assert all(said["bound"] is not None for said in life["states"].values())
    assert life["steps"] >= 8 and HARNESS_BATCH_BUILDING in life["stands_in"]
    assert row["not_covered"] == [
        "the matrix, the statistical oracle, the support scan and its verify target "
        "against its sampler (--life-only)"
    ]
    shown = life_cell(row) + life_lines([row])
    assert all(f"{state} {said['rows']}" in shown for state, said in life["states"].items())


def test_a_life_finding_replays_the_life_alone(tmp_path: Path) -> None:
    row = _life_row(tmp_path, "legacy")
    assert row["lossless"] is False
    finding = next(f for f in row["findings"] if f["class"] == "teacher_forcing")
    assert finding["evidence"].startswith("the life across the junction, a drafter call")
    words = shlex.split(finding["repro"])
    assert words[-1] == "--life-only" and words[words.index("--impl") + 1] == "legacy"


def test_a_junction_finding_names_the_state_that_exposed_it() -> None:
    from fixed import DsparkDraftSampler as Fixed

    verdict = judge_junction(Fixed, rows=SMALL, server_class=StaleDraftProbs)
    found = dict(life_findings(verdict))
    state = dict(verdict.exposed_in)["junction_leftovers"]
    assert state in {RequestState.REUSED.value, RequestState.RESUMED.value}
    assert found["junction_leftovers"].startswith(f"the life across the junction, {state}: ")


def test_each_vllm_era_states_its_cut_depth_and_sglangs_run_full() -> None:
    for era in ERAS:
        rows, said = life_depth(era)
        if era.package == "vllm":
            assert rows < JUNCTION_ROWS and "within the row's time bound" in said, era.name
        else:
            assert (rows, said) == (JUNCTION_ROWS, f"full: {JUNCTION_ROWS:,} rows a state asked")


def test_a_row_lives_the_depth_life_rows_asks_and_says_so(tmp_path: Path) -> None:
    row = _life_row(tmp_path, "fixed", rows=SMALL)
    life = row["life"]
    assert life is not None and life["lossless"] is True
    assert life["depth"] == f"{SMALL:,} rows a state asked (--life-rows) (full depth is 2,000)"
    assert all(said["rows"] >= SMALL for said in life["states"].values())
    vllm_era = next(era for era in ERAS if era.package == "vllm")
    assert life_depth(vllm_era, asked=JUNCTION_ROWS) == (
        JUNCTION_ROWS,
        f"{JUNCTION_ROWS:,} rows a state asked (--life-rows)",
    )
