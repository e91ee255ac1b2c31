"""The work sections: how the eliminated work is shown. The tables of counted vs
modelled work (and, with plug-ins, every implementation's counted work), the JSON of
each case, and the "eliminated work" section of the measured case works
(``harness.measure.work.collect_work``); the "time ratio" section is
``harness.render.timing``. The pair (default legacy, fixed) names the columns of every
BUGGY vs FIXED table."""

from __future__ import annotations

from typing import Any

from harness.case import Case
from harness.defaults import DEFAULT_PAIR
from harness.judgement import WorkVerdict
from harness.measure.model import MODEL_COUNTERS, lm_head_cost, production_shape, walk_cost
from harness.measure.work import (
    COUNTERS,
    HIDDEN_DIVISIBLE,
    HIDDEN_NOT_DIVISIBLE,
    CaseWork,
    CounterComparison,
    ModelStatus,
    WorkComparison,
    plugins_measured,
    surplus_held_exactly,
)
from harness.pipeline.runner import WorkCounts
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
    buggy, fixed = (work.measured.get(name) for name in work.pair)
    if buggy is None or fixed is None:
        return "-"
    bv = "raises" if buggy.error else _number(buggy.counter(key))
    fv = "raises" if fixed.error else _number(fixed.counter(key))
    return f"{bv} | {fv}"


def overview_table(works: list[CaseWork]) -> Table:
    """One row per case kind: BUGGY | FIXED for the headline counters, model agreement."""
    short = {
        "walks": "walks",
        "sampler_calls": "sampler calls",
        "noise_elements": "noise elements",
        "aten_ops": "ATen ops",
        "gemm_flops": "GEMM FLOPs",
        "allocated_bytes": "bytes allocated",
    }
    rows = [
        [
            work.kind,
            *(_pair(work, k) for k in short),
            (ModelStatus.AGREES if work.agrees else ModelStatus.DIFFERS).value,
        ]
        for work in works
    ]
    buggy, fixed = works[0].pair if works else DEFAULT_PAIR
    header = [f"case kind ({buggy} | {fixed})", *short.values(), "model"]
    return Table.of(header, rows, align=["left", *right_aligned(len(short)), "left"])


def comparison_tables(comparison: WorkComparison) -> tuple[Table, Table]:
    """BUGGY / FIXED / BUGGY - FIXED / BUGGY / FIXED for every counter, then the
    operators that differ against the separately measured walk."""
    numbers: list[Alignment] = ["left", "right", "right", "right", "right"]
    buggy, fixed = comparison.pair
    counters = Table.of(
        ["counter", buggy, fixed, f"{buggy} - {fixed}", f"{buggy} / {fixed}"],
        [
            [c.label, _number(c.legacy), _number(c.fixed), _number(c.diff), _ratio(c)]
            for c in comparison.counters
        ],
        align=numbers,
    )
    ops = Table.of(
        ["ATen operator", buggy, fixed, f"{buggy} - {fixed}", "one walk (+view)"],
        [[d.op, d.legacy, d.fixed, d.diff, d.one_walk] for d in comparison.op_differences],
        align=numbers,
    )
    return counters, ops


def rng_text(counts: WorkCounts) -> str:
    """Random draws by phase and op, ``op calls x elements``: the call's bare, the
    other phases named (a sampler may pre-stage its noise)."""
    parts = [
        f"{'' if phase == 'call' else phase + ' '}{op} {calls}x {elements:,}"
        for phase, ops in counts.rng.items()
        for op, (calls, elements) in ops.items()
    ]
    return "; ".join(parts) or "none"


def counted_work_rows(works: list[CaseWork]) -> list[dict[str, Any]]:
    """Every implementation's counted work per call on every case, as plain data."""
    rows = []
    for work in works:
        for name, m in work.measured.items():
            rows.append(
                {
                    "kind": work.kind,
                    "implementation": name,
                    "error": m.error,
                    "walks": m.counts.walks,
                    "fused_calls": m.counts.fused_calls,
                    "sampler_calls": m.counts.sampler_calls,
                    "rng": m.counts.rng,
                    "aten_ops": m.counts.total_ops,
                    "model": work.model_status(name).value,
                }
            )
    return rows


def counted_work_table(works: list[CaseWork]) -> Table:
    """One row per case kind and implementation: walks, fused calls, step-sampler
    calls, random draws by op, the ATen operator total and the model's word."""
    rows = []
    for work in works:
        for name, m in work.measured.items():
            counts = m.counts
            counted = (
                [f"raises {m.error_type}", "", "", "", ""]
                if m.error
                else [
                    _number(counts.walks),
                    _number(counts.fused_calls),
                    _number(counts.sampler_calls),
                    rng_text(counts),
                    _number(counts.total_ops),
                ]
            )
            rows.append([work.kind, name, *counted, work.model_status(name).value])
    header = [
        "case kind",
        "implementation",
        "walks",
        "fused calls",
        "sampler calls",
        "random draws (op calls x elements)",
        "ATen ops",
        "model",
    ]
    return Table.of(
        header, rows, align=["left", "left", *right_aligned(3), "left", "right", "left"]
    )


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
    """Plain data of one case's measured and predicted work; the pair's comparison is
    keyed ``BUGGY_vs_FIXED`` (``legacy_vs_fixed`` by default) by the pair's names."""
    comparison = work.comparison
    buggy, fixed = work.pair
    return {
        "kind": work.kind,
        "case": work.case.to_json_dict()["case"],
        "agrees": work.agrees,
        "problems": [str(problem) for problem in work.problems],
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
        f"{buggy}_vs_{fixed}": None
        if comparison is None
        else {
            c.key: {buggy: c.legacy, fixed: c.fixed, "diff": c.diff, "ratio": c.ratio}
            for c in comparison.counters
        },
        "op_differences": None
        if comparison is None
        else [
            {
                "op": d.op,
                buggy: d.legacy,
                fixed: d.fixed,
                "diff": d.diff,
                "one_walk": d.one_walk,
            }
            for d in comparison.op_differences
        ],
    }


def work_section(judged: WorkVerdict) -> Section:
    """The 'eliminated work' section of a judged measurement (the pair's comparison;
    every implementation's counted work when plug-ins took part)."""
    works = list(judged.works)
    buggy, fixed = works[0].pair if works else DEFAULT_PAIR
    agreeing, ok = judged.agreeing, judged.ok
    plugins = plugins_measured(works)
    data: dict[str, Any] = {"cases": [work_json(w) for w in works]}
    if plugins:
        data["counted_work"] = counted_work_rows(works)
    headline = next(
        (w for w in works if w.comparison is not None and w.case.has_sampled_rows), None
    )
    if headline is None or headline.comparison is None:
        verdict = (
            f"no case with sampled rows where both {buggy} and {fixed} ran: nothing to compare"
        )
        blocks: list[Block] = [verdict]
        if plugins:
            blocks += ["counted work per call, every implementation", counted_work_table(works)]
        return Section(title=WORK_TITLE, ok=ok, verdict=verdict, blocks=tuple(blocks), data=data)
    noise = headline.comparison.counter("noise_elements")
    noise_text = f"{noise.legacy:,}:{noise.fixed:,}" if noise else "?"
    verdict = (
        f"{buggy} does exactly one extra Markov walk per call (and gamma extra [bs, V] noise "
        f"draws when folded: {noise_text} elements); counts match the work model in "
        f"{agreeing}/{len(works)} case kinds"
        if agreeing == len(works)
        else f"work model DISAGREES with the counts in {len(works) - agreeing}/{len(works)} "
        "case kinds"
    )
    if plugins:
        verdict += f"; {', '.join(plugins)}: {ModelStatus.NO_MODEL.value}"
    if judged.unmeasured:  # a plug-in outside the pair has no model: a raise is not a measurement
        verdict += "; NOT measured: " + ", ".join(
            f"{name} raised on {count}/{len(works)} case kinds" for name, count in judged.unmeasured
        )
    shape = headline.case
    stated = (
        f"per call, {buggy} | {fixed} (counts exact); shapes bs={shape.bs} gamma={shape.gamma} "
        f"V={shape.vocab_size} r={shape.markov_rank} H={HIDDEN_DIVISIBLE} "
        f"(no-anchor g∤H: H={HIDDEN_NOT_DIVISIBLE}), {shape.dtype}, {shape.device}"
    )
    counters, operators = comparison_tables(headline.comparison)
    headline_line = f"{headline.kind}: {buggy} vs {fixed}"
    blocks = [
        stated,
        overview_table(works),
        headline_line,
        counters,
        operators,
        "work model: " + format_model(headline.case),
    ]
    if not surplus_held_exactly(headline.comparison.pair):
        blocks.insert(
            -1,
            f"{buggy}'s surplus is held to one walk by walks, head steps, step-sampler calls, "
            "GEMM FLOPs and (folded) 2:1 noise; its operators and bytes are shown against "
            "the built-in walk, not held (a plug-in's step sampler is its own)",
        )
    if plugins:
        blocks += [
            "counted work per call, every implementation (plug-ins: "
            f"{ModelStatus.NO_MODEL.value}; a plug-in that raises is a result of its case)",
            counted_work_table(works),
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
        data=data,
        brief=(headline_line, counters),
    )
