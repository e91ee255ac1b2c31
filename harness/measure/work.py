"""Work the fix eliminates: every implementation's counted work on one case, held
against the analytic model where there is one, and the pair (default legacy vs
fixed) side by side.

Three layers, each checkable against the next:

- **the model** (``harness.measure.model``): walks, head steps, step-sampler calls,
  noise draws and GEMM FLOPs of one call, from the case's shape and kind alone;
- **the counters** (the runner's exact counts, plus ``harness.measure.counters``:
  GEMM FLOPs, allocated bytes and, on CUDA, the allocator's peak, from a second
  identical call);
- **the comparison** (``WorkComparison``): BUGGY, FIXED, BUGGY - FIXED and
  BUGGY / FIXED per counter for the pair (default legacy, fixed), and the structural
  check that the buggy side's surplus is exactly one Markov walk (measured on its
  own) plus the view legacy's first pass takes.

A plug-in (``--impl``) has no model: its work is counted only, and a plug-in that
raises on a case is a recorded result of that case.

The cases covering every ledger kind (``work_cases``) live here too; the tables and
the report section are in ``harness.render.work``. See ``docs/design.md``
("The work model").
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from harness.case import Case, make_case
from harness.defaults import BUILTIN_NAMES, DEFAULT_PAIR, DEFAULT_TIME_LIMIT_S, FIXED, LEGACY
from harness.executor import IN_PROCESS, Executor, TimeLimited, WorkerFailure, for_domain
from harness.measure.counters import CallCost, MeasuredWork, cost_task, measure_one_walk
from harness.measure.model import MODEL_COUNTERS, PredictedWork, predict_work
from harness.options import RunOptions
from harness.pipeline.runner import run_case
from harness.plugins.implementations import (
    BUILTIN_IMPLEMENTATIONS,
    Implementation,
    builtin_implementations,
)
from harness.progress import Progress, no_progress

PASS1_VIEW_OP = "aten.view"  # legacy's hidden_states.view(bs, gamma, -1) before pass 1

# Counters reported per call, in report order: (key, label).
COUNTERS: tuple[tuple[str, str], ...] = (
    ("walks", "Markov walks (sample_block)"),
    ("fused_calls", "fused greedy calls"),
    ("head_steps", "head steps (step_bias)"),
    ("sampler_calls", "step-sampler calls"),
    ("noise_calls", "exponential_ calls"),
    ("noise_elements", "noise elements drawn"),
    ("aten_ops", "ATen operators"),
    ("gemm_flops", "GEMM FLOPs"),
    ("allocated_bytes", "bytes allocated"),
    ("peak_bytes", "CUDA peak bytes"),
)


class ModelStatus(enum.Enum):
    """How an implementation's counted work stands against the model on one case."""

    AGREES = "agrees"
    DIFFERS = "DIFFERS"  # the model and the counts disagree
    NO_MODEL = "counted only (no model)"  # a plug-in: its work is counted only


@dataclass(frozen=True)
class WorkProblem:
    """A disagreement on one case: a modelled implementation's counts against its model
    (``implementation`` names it), or the pair's surplus against one walk."""

    detail: str
    implementation: str | None = None

    def __str__(self) -> str:
        return (
            self.detail if self.implementation is None else f"{self.implementation}: {self.detail}"
        )


@dataclass(frozen=True)
class CounterComparison:
    """One counter of the pair: ``legacy`` is the buggy side's value, ``fixed`` the
    fixed side's (legacy and fixed by default), then their difference and ratio."""

    key: str
    label: str
    legacy: int
    fixed: int

    @property
    def diff(self) -> int:
        return self.legacy - self.fixed

    @property
    def ratio(self) -> float | None:
        return self.legacy / self.fixed if self.fixed else None


@dataclass(frozen=True)
class OpDifference:
    """An ATen operator whose count differs between the pair (buggy side in ``legacy``)."""

    op: str
    legacy: int
    fixed: int
    one_walk: int  # the separately measured walk (+1 view for legacy's pass 1)

    @property
    def diff(self) -> int:
        return self.legacy - self.fixed


@dataclass(frozen=True)
class WorkComparison:
    """The pair on one case (default legacy vs fixed): every counter, and the operators
    that differ."""

    counters: tuple[CounterComparison, ...]
    op_differences: tuple[OpDifference, ...]
    pair: tuple[str, str] = DEFAULT_PAIR

    @classmethod
    def of(
        cls,
        legacy: MeasuredWork,
        fixed: MeasuredWork,
        *,
        one_walk: CallCost,
        pass1_views: int,
        pair: tuple[str, str] = DEFAULT_PAIR,
    ) -> WorkComparison:
        counters = []
        for key, label in COUNTERS:
            lv, fv = legacy.counter(key), fixed.counter(key)
            if lv is not None and fv is not None:
                counters.append(CounterComparison(key, label, lv, fv))
        explained = Counter(one_walk.op_counts)
        explained[PASS1_VIEW_OP] += pass1_views
        legacy_ops, fixed_ops = legacy.counts.op_counts, fixed.counts.op_counts
        differences = [
            OpDifference(op, legacy_ops.get(op, 0), fixed_ops.get(op, 0), explained.get(op, 0))
            for op in sorted(set(legacy_ops) | set(fixed_ops) | set(explained))
            if legacy_ops.get(op, 0) != fixed_ops.get(op, 0) or explained.get(op, 0)
        ]
        return cls(tuple(counters), tuple(differences), pair)

    def counter(self, key: str) -> CounterComparison | None:
        return next((c for c in self.counters if c.key == key), None)


@dataclass
class CaseWork:
    """Measured work of every implementation on one case, predicted work of the
    modelled ones (a plug-in has none), and the pair's comparison."""

    case: Case
    kind: str
    measured: dict[str, MeasuredWork]
    predicted: dict[str, PredictedWork]
    one_walk: CallCost
    comparison: WorkComparison | None
    problems: list[WorkProblem]
    pair: tuple[str, str] = DEFAULT_PAIR

    @property
    def agrees(self) -> bool:
        return not self.problems

    def model_status(self, name: str) -> ModelStatus:
        """Whether ``name``'s counts agree with its model (a plug-in has none)."""
        if name not in self.predicted:
            return ModelStatus.NO_MODEL
        if any(p.implementation == name for p in self.problems):
            return ModelStatus.DIFFERS
        return ModelStatus.AGREES


def case_kind(case: Case) -> str:
    """The ledger case kind in words (``docs/design.md``, "The ledger"), with head and layout."""
    if case.folded_sampling:
        mode = "folded, sampled rows" if case.sampled_rows else "folded, all greedy"
    elif case.fused_greedy:
        mode = "greedy fold, fused on" + ("" if case.fused_path_available else " (no fused path)")
    else:
        mode = "greedy fold, fused off"
    layout = "anchor" if case.sample_from_anchor else "no-anchor"
    divides = (
        ""
        if case.sample_from_anchor
        else (", g|H" if not case.hidden_size % case.gamma else ", g∤H")
    )
    return f"{mode} [{case.head_kind}/{layout}{divides}]"


def measure_work(
    case: Case,
    *,
    implementations: Sequence[Implementation] | None = None,
    pair: tuple[str, str] = DEFAULT_PAIR,
    executor: Executor = IN_PROCESS,
) -> CaseWork:
    """Count every implementation's work on the case (default: the modelled built-ins),
    hold the modelled ones against the model and compare the pair; each
    implementation's calls run on ``executor`` in its trust domain."""
    chosen = (
        list(implementations)
        if implementations is not None
        else builtin_implementations(BUILTIN_NAMES)
    )
    run = run_case(case, chosen, options=RunOptions(record_noise=False), executor=executor)
    measured: dict[str, MeasuredWork] = {}
    for impl in chosen:
        result = run.results[impl.name]
        # A plug-in's failure is already recorded; calling it again could only hang.
        rerun = result.error is None or impl.name in BUILTIN_NAMES
        cost = (
            cost_in_domain(impl, case=case, executor=executor)
            if rerun
            else CallCost(0, 0, None, error=result.error.type if result.error else None)
        )
        measured[impl.name] = MeasuredWork(
            implementation=impl.name,
            error=result.error.summary() if result.error else None,
            error_type=result.error.type if result.error else None,
            counts=result.work,
            cost=cost,
        )
    modelled = [i.name for i in chosen if i.name in BUILTIN_NAMES]
    predicted = {name: predict_work(case, name) for name in modelled}
    one_walk = measure_one_walk(case, inputs=run.inputs)
    problems = _model_problems(case, measured, predicted, one_walk)
    comparison = None
    buggy, fixed = (measured.get(name) for name in pair)
    if buggy is not None and fixed is not None and not buggy.error and not fixed.error:
        # The bug's shape (one more walk, over the view pass 1 takes) is legacy's model.
        pass1_views = predict_work(case, LEGACY).pass1_views
        comparison = WorkComparison.of(
            buggy, fixed, one_walk=one_walk, pass1_views=pass1_views, pair=pair
        )
        problems += _surplus_problems(case, comparison, one_walk=one_walk)
    return CaseWork(
        case, case_kind(case), measured, predicted, one_walk, comparison, problems, pair
    )


def cost_in_domain(implementation: Implementation, *, case: Case, executor: Executor) -> CallCost:
    """``cost_task`` on ``executor`` in the implementation's trust domain; a task that
    gives no answer is the implementation's failure."""
    future = for_domain(executor, implementation.trust_domain).submit(
        TimeLimited(cost_task, DEFAULT_TIME_LIMIT_S), implementation, case=case
    )
    try:
        answer = future.result()
    except WorkerFailure as failure:
        return CallCost(0, 0, None, error=failure.type)
    return answer if isinstance(answer, CallCost) else CallCost(0, 0, None, error="BadAnswer")


def _model_problems(
    case: Case,
    measured: dict[str, MeasuredWork],
    predicted: dict[str, PredictedWork],
    one_walk: CallCost,
) -> list[WorkProblem]:
    problems: list[WorkProblem] = []
    for name, model in predicted.items():
        got = measured[name]
        if got.error_type != model.raises:
            said = f"raises {model.raises}" if model.raises else "runs"
            did = f"raised {got.error}" if got.error else "ran"
            problems.append(WorkProblem(f"model says {said}, the call {did}", name))
            continue
        if model.raises:
            continue
        for key in MODEL_COUNTERS:
            if got.counter(key) != model.counter(key):
                detail = f"{key} counted {got.counter(key)}, model {model.counter(key)}"
                problems.append(WorkProblem(detail, name))
    walk_model = predicted[FIXED].walk if FIXED in predicted else None
    if walk_model is not None and one_walk.gemm_flops != walk_model.gemm_flops:
        problems.append(
            WorkProblem(
                f"one walk: GEMM FLOPs counted {one_walk.gemm_flops}, model {walk_model.gemm_flops}"
            )
        )
    return problems


def surplus_held_exactly(pair: tuple[str, str]) -> bool:
    """Whether the pair's operator and byte surplus is held to the separately measured
    walk: only between modelled built-ins, since that walk runs the built-in step
    sampler and a plug-in's step sampler is its own (its slices, its casts)."""
    return all(name in BUILTIN_NAMES for name in pair)


def _surplus_problems(
    case: Case, comparison: WorkComparison, *, one_walk: CallCost
) -> list[WorkProblem]:
    surplus = " - ".join(comparison.pair)
    problems: list[str] = []
    if surplus_held_exactly(comparison.pair):
        problems += [
            f"{d.op}: {surplus} = {d.diff}, one walk (+ pass-1 view) = {d.one_walk}"
            for d in comparison.op_differences
            if d.diff != d.one_walk
        ]
        allocated = comparison.counter("allocated_bytes")
        if allocated is None or allocated.diff != one_walk.allocated_bytes:
            problems.append(
                f"{surplus} allocated bytes = {allocated.diff if allocated else '?'}, "
                f"one walk allocates {one_walk.allocated_bytes}"
            )
    else:  # the walk's structure, which no step sampler changes
        expected = {
            "head_steps": case.gamma,
            "sampler_calls": case.gamma,
            "gemm_flops": one_walk.gemm_flops,
        }
        for key, value in expected.items():
            got = comparison.counter(key)
            if got is None or got.diff != value:
                problems.append(
                    f"{surplus} {key} = {got.diff if got else '?'}, one walk has {value}"
                )
    walks = comparison.counter("walks")
    if walks is None or walks.diff != 1:
        problems.append(f"{surplus} walks = {walks.diff if walks else '?'}, expected 1")
    noise = comparison.counter("noise_elements")
    if case.folded_sampling and (noise is None or noise.legacy != 2 * noise.fixed):
        problems.append("folded: noise elements drawn are not exactly 2:1")
    return [WorkProblem(text) for text in problems]  # the pair's, no model's


WORK_SHAPE: dict[str, int] = {"bs": 4, "gamma": 4, "vocab_size": 256, "markov_rank": 8}
HIDDEN_DIVISIBLE, HIDDEN_NOT_DIVISIBLE = 16, 18  # gamma = 4 divides 16, not 18
MIXED_GREEDY_ROWS = (False, True, False, False)  # one greedy row among sampled ones


class WorkMode(enum.Enum):
    """How a work case samples: folded (sampled rows, or all greedy) or a greedy fold
    (the fused flag off or on)."""

    FOLDED_SAMPLED = enum.auto()
    FOLDED_GREEDY = enum.auto()
    GREEDY = enum.auto()
    GREEDY_FUSED = enum.auto()

    @property
    def folded(self) -> bool:
        return self in (WorkMode.FOLDED_SAMPLED, WorkMode.FOLDED_GREEDY)


def work_cases(
    *, seed: int, device: str = "cpu", exhaustive: bool = False, dtype: str = "float32"
) -> list[Case]:
    """Small cases covering every ledger case kind.

    Default: the seven ledger case kinds plus the gated and rnn heads on the anchor
    layout and a fused flag without a fused path (11 cases). ``exhaustive``: every
    head kind x layout x sampling mode, with ``gamma`` dividing ``H`` and not.
    """

    def case(
        head: str,
        *,
        anchor: bool,
        mode: WorkMode,
        hidden: int = HIDDEN_DIVISIBLE,
        confidence: bool = False,
    ) -> Case:
        return make_case(
            **WORK_SHAPE,
            hidden_size=hidden,
            greedy_rows=MIXED_GREEDY_ROWS if mode is WorkMode.FOLDED_SAMPLED else (True,) * 4,
            head_kind=head,
            sample_from_anchor=anchor,
            folded_sampling=mode.folded,
            fused_greedy=mode is WorkMode.GREEDY_FUSED,
            confidence=confidence,
            dtype=dtype,
            device=device,
            seed=seed,
        )

    if exhaustive:
        cases = [
            case(h, anchor=True, mode=m) for h in ("vanilla", "gated", "rnn") for m in WorkMode
        ]
        cases += [
            case(h, anchor=False, mode=m, hidden=hidden)
            for h in ("vanilla", "gated", "rnn")
            for m in WorkMode
            for hidden in (HIDDEN_DIVISIBLE, HIDDEN_NOT_DIVISIBLE)
        ]
        return cases
    sampled, greedy, fused = WorkMode.FOLDED_SAMPLED, WorkMode.GREEDY, WorkMode.GREEDY_FUSED
    return [
        case("vanilla", anchor=True, mode=sampled, confidence=True),
        case("vanilla", anchor=True, mode=WorkMode.FOLDED_GREEDY),
        case("vanilla", anchor=True, mode=greedy),
        case("vanilla", anchor=True, mode=fused),
        case("gated", anchor=False, mode=sampled),
        case("rnn", anchor=False, mode=greedy),
        case("vanilla", anchor=False, mode=sampled, hidden=HIDDEN_NOT_DIVISIBLE),
        case("vanilla", anchor=False, mode=sampled),
        case("gated", anchor=True, mode=sampled),
        case("rnn", anchor=True, mode=sampled),
        case("gated", anchor=True, mode=fused),
    ]


def collect_work(
    *,
    seed: int,
    device: str = "cpu",
    progress: Progress = no_progress,
    implementations: Sequence[Implementation] | None = None,
    pair: tuple[str, str] = DEFAULT_PAIR,
    executor: Executor = IN_PROCESS,
) -> list[CaseWork]:
    """``measure_work`` on every work case (default: the modelled built-ins)."""
    works = []
    cases = work_cases(seed=seed, device=device)
    for index, case in enumerate(cases, 1):
        progress(f"[work {index}/{len(cases)}] {case_kind(case)}")
        works.append(
            measure_work(case, implementations=implementations, pair=pair, executor=executor)
        )
    return works


def plugins_measured(works: Sequence[CaseWork]) -> list[str]:
    """The implementations measured that are not built-ins, in the order they ran."""
    return list(
        dict.fromkeys(n for w in works for n in w.measured if n not in BUILTIN_IMPLEMENTATIONS)
    )


def unmeasured_plugins(
    works: Sequence[CaseWork], *, expect_fail: frozenset[str]
) -> list[tuple[str, int]]:
    """``(name, case kinds it raised on)`` for every plug-in outside the pair, and not
    expected to fail, that raised: the pair's raises are held to the work model, and a
    plug-in's raise is not a measurement."""
    counts = [
        (name, sum(w.measured[name].error is not None for w in works if name in w.measured))
        for name in plugins_measured(works)
        if name not in expect_fail and all(name not in w.pair for w in works)
    ]
    return [(name, count) for name, count in counts if count]
