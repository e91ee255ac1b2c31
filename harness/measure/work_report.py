"""How the eliminated work is shown: the tables of counted vs modelled work, the JSON
of each case, the main report's "eliminated work" section, and the "time ratio"
section of ``python -m harness work --timing``."""

from __future__ import annotations

import subprocess
from typing import Any

from harness.measure.callgrind import (
    callgrind_blocks,
    callgrind_case,
    callgrind_instructions,
    valgrind_path,
)
from harness.measure.model import MODEL_COUNTERS, lm_head_cost, production_shape, walk_cost
from harness.measure.timing import (
    PRODUCTION_HIDDEN,
    WALK_RATIO_RANGE,
    ab_timing,
    production_like_case,
    timing_blocks,
)
from harness.measure.work import (
    COUNTERS,
    HIDDEN_DIVISIBLE,
    HIDDEN_NOT_DIVISIBLE,
    CaseWork,
    CounterComparison,
    WorkComparison,
    collect_work,
)
from harness.pipeline.case import Case
from harness.render.progress import Progress, no_progress
from harness.render.sections import Block, Section, Table, right_aligned
from harness.render.tables import Alignment

WORK_TITLE = "Eliminated work"


def _number(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return f"{value:,}"


def _pair(work: CaseWork, key: str) -> str:
    legacy, fixed = work.measured.get("legacy"), work.measured.get("fixed")
    if legacy is None or fixed is None:
        return "-"
    lv = "raises" if legacy.error else _number(legacy.counter(key))
    return f"{lv} | {_number(fixed.counter(key))}"


def overview_table(works: list[CaseWork]) -> Table:
    """One row per case kind: legacy | fixed for the headline counters, model agreement."""
    short = {
        "walks": "walks",
        "sampler_calls": "sampler calls",
        "noise_elements": "noise elements",
        "aten_ops": "ATen ops",
        "gemm_flops": "GEMM FLOPs",
        "allocated_bytes": "bytes allocated",
    }
    rows = [
        [work.kind, *(_pair(work, k) for k in short), "agrees" if work.agrees else "DIFFERS"]
        for work in works
    ]
    header = ["case kind (legacy | fixed)", *short.values(), "model"]
    return Table.of(header, rows, align=["left", *right_aligned(len(short)), "left"])


def comparison_tables(comparison: WorkComparison) -> tuple[Table, Table]:
    """legacy / fixed / legacy - fixed / legacy / fixed for every counter, then the
    operators that differ against the separately measured walk."""
    numbers: list[Alignment] = ["left", "right", "right", "right", "right"]
    counters = Table.of(
        ["counter", "legacy", "fixed", "legacy - fixed", "legacy / fixed"],
        [
            [c.label, _number(c.legacy), _number(c.fixed), _number(c.diff), _ratio(c)]
            for c in comparison.counters
        ],
        align=numbers,
    )
    ops = Table.of(
        ["ATen operator", "legacy", "fixed", "legacy - fixed", "one walk (+view)"],
        [[d.op, d.legacy, d.fixed, d.diff, d.one_walk] for d in comparison.op_differences],
        align=numbers,
    )
    return counters, ops


def _ratio(c: CounterComparison) -> str:
    if c.ratio is None:
        return "inf" if c.legacy else "-"
    return f"{c.ratio:.3f}"


def format_model(case: Case) -> str:
    """The analytic costs of the case's shape and of the production-like shape."""
    lines = []
    for label, shape in (("this shape", case), ("production-like", production_shape(case))):
        walk = walk_cost(shape, folded=shape.folded_sampling, collect_corrected=True)
        lm = lm_head_cost(shape)
        lines.append(
            f"{label} (bs={shape.bs} gamma={shape.gamma} V={shape.vocab_size} "
            f"r={shape.markov_rank} H={shape.hidden_size} {shape.head_kind} {shape.dtype}): "
            f"one walk {walk.gemm_flops:,} GEMM FLOPs, ~{walk.bytes:,} bytes; "
            f"lm_head {lm.gemm_flops:,} FLOPs, ~{lm.bytes:,} bytes; "
            f"whole-call GEMM FLOPs legacy/fixed = "
            f"{(lm.gemm_flops + 2 * walk.gemm_flops) / (lm.gemm_flops + walk.gemm_flops):.3f}"
        )
    return "\n".join(lines)


def work_json(work: CaseWork) -> dict[str, Any]:
    """Plain data of one case's measured and predicted work."""
    comparison = work.comparison
    return {
        "kind": work.kind,
        "case": work.case.to_json_dict()["case"],
        "agrees": work.agrees,
        "problems": work.problems,
        "measured": {
            name: {
                "error": m.error,
                **{k: m.counter(k) for k, _ in COUNTERS},
                "op_counts": m.counts.op_counts,
            }
            for name, m in work.measured.items()
        },
        "predicted": {
            name: {
                "raises": p.raises,
                **{k: p.counter(k) for k in MODEL_COUNTERS},
                "walk_gemm_flops": p.walk.gemm_flops,
                "walk_bytes": p.walk.bytes,
                "lm_head_gemm_flops": p.lm_head.gemm_flops,
                "lm_head_bytes": p.lm_head.bytes,
            }
            for name, p in work.predicted.items()
        },
        "one_walk": {
            "gemm_flops": work.one_walk.gemm_flops,
            "allocated_bytes": work.one_walk.allocated_bytes,
            "op_counts": work.one_walk.op_counts,
        },
        "legacy_vs_fixed": None
        if comparison is None
        else {
            c.key: {"legacy": c.legacy, "fixed": c.fixed, "diff": c.diff, "ratio": c.ratio}
            for c in comparison.counters
        },
        "op_differences": None
        if comparison is None
        else [
            {
                "op": d.op,
                "legacy": d.legacy,
                "fixed": d.fixed,
                "diff": d.diff,
                "one_walk": d.one_walk,
            }
            for d in comparison.op_differences
        ],
    }


def work_section(works: list[CaseWork]) -> Section:
    """The 'eliminated work' section from measured case works."""
    headline = next(w for w in works if w.comparison is not None and w.case.has_sampled_rows)
    agreeing = sum(w.agrees for w in works)
    ok = agreeing == len(works)
    assert headline.comparison is not None
    noise = headline.comparison.counter("noise_elements")
    noise_text = f"{noise.legacy:,}:{noise.fixed:,}" if noise else "?"
    verdict = (
        f"legacy does exactly one extra Markov walk per call (and gamma extra [bs, V] noise "
        f"draws when folded: {noise_text} elements); counts match the work model in "
        f"{agreeing}/{len(works)} case kinds"
        if ok
        else f"work model DISAGREES with the counts in {len(works) - agreeing}/{len(works)} "
        "case kinds"
    )
    shape = headline.case
    blocks: list[Block] = [
        f"per call, legacy | fixed (counts exact); shapes bs={shape.bs} gamma={shape.gamma} "
        f"V={shape.vocab_size} r={shape.markov_rank} H={HIDDEN_DIVISIBLE} "
        f"(no-anchor g∤H: H={HIDDEN_NOT_DIVISIBLE}), {shape.dtype}, {shape.device}",
        overview_table(works),
        f"{headline.kind}: legacy vs fixed",
        *comparison_tables(headline.comparison),
        "work model: " + format_model(headline.case),
    ]
    problems = [f"{w.kind}: {p}" for w in works for p in w.problems]
    if problems:
        blocks.append("model disagreements:\n" + "\n".join(f"  {p}" for p in problems))
    blocks.append(
        "timing: `python -m harness work --timing` (A/B ratio); `python -m harness sweep`"
    )
    return Section(
        title=WORK_TITLE,
        ok=ok,
        verdict=verdict,
        blocks=tuple(blocks),
        data={"cases": [work_json(w) for w in works]},
    )


def report_section(*, seed: int, progress: Progress) -> Section:
    """The main report's 'eliminated work' section (small shapes; a few seconds)."""
    return work_section(collect_work(seed=seed, progress=progress))


def timing_section(
    *,
    seed: int,
    device: str,
    repeats: int,
    hidden_size: int = PRODUCTION_HIDDEN,
    callgrind: bool = True,
    progress: Progress = no_progress,
) -> Section:
    """A/B timing at the production-like shape (+ callgrind where valgrind exists);
    ok iff the median walk-only ratio lies in ``WALK_RATIO_RANGE``."""
    case = production_like_case(seed=seed, device=device, hidden_size=hidden_size)
    progress(f"timing: {case.label()} ({repeats} alternating repetitions)")
    timing = ab_timing(case, repeats=repeats, progress=progress)
    walk = timing.times["walk_only"]["wall"].summary()
    whole = timing.times["whole_call"]["wall"].summary()
    low, high = WALK_RATIO_RANGE
    ok = low <= walk["ratio_median"] <= high
    blocks: list[Block] = [*timing_blocks(timing)]
    data: dict[str, Any] = {"ab": timing.to_json(), "callgrind": None}
    if not callgrind:
        blocks.append("callgrind: skipped (--no-callgrind)")
    elif device != "cpu":
        blocks.append("callgrind: skipped (counts CPU instructions; the device is not the CPU)")
    elif valgrind_path() is None:
        blocks.append("callgrind: skipped (valgrind is not on PATH)")
    else:
        try:
            counts = callgrind_instructions(callgrind_case(seed=seed), progress=progress)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            blocks.append(f"callgrind: failed ({error})")
        else:
            blocks.extend(callgrind_blocks(counts))
            data["callgrind"] = counts.to_json()
    verdict = (
        f"legacy/fixed wall time: walk-only median {walk['ratio_median']:.3f} "
        f"(min {walk['ratio_min']:.3f}, max {walk['ratio_max']:.3f}; expected "
        f"{low}-{high}), whole call median {whole['ratio_median']:.3f} at H={hidden_size}"
    )
    return Section(title="time ratio", ok=ok, verdict=verdict, blocks=tuple(blocks), data=data)
