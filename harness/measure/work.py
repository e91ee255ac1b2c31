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

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from harness.defaults import BUILTIN_NAMES, DEFAULT_PAIR, FIXED, LEGACY
from harness.measure.counters import CallCost, MeasuredWork, cost_of_call, measure_one_walk
from harness.measure.model import MODEL_COUNTERS, PredictedWork, predict_work
from harness.options import RunOptions
from harness.pipeline.case import Case, make_case
from harness.pipeline.isolation import isolated_cost
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
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


NO_MODEL = "counted only (no model)"


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
    problems: list[str]
    pair: tuple[str, str] = DEFAULT_PAIR

    @property
    def agrees(self) -> bool:
        return not self.problems

    def model_status(self, name: str) -> str:
        """``agrees``, ``DIFFERS`` (the model and the counts disagree) or ``NO_MODEL``."""
        if name not in self.predicted:
            return NO_MODEL
        return "DIFFERS" if any(p.startswith(f"{name}:") for p in self.problems) else "agrees"


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
    isolate: bool = False,
) -> CaseWork:
    """Count every implementation's work on the case (default: the modelled built-ins),
    hold the modelled ones against the model and compare the pair; with ``isolate``,
    each implementation's calls run in its worker."""
    chosen = (
        list(implementations)
        if implementations is not None
        else builtin_implementations(BUILTIN_NAMES)
    )
    run = run_case(case, chosen, options=RunOptions(record_noise=False, isolate=isolate))
    measured: dict[str, MeasuredWork] = {}
    for impl in chosen:
        result = run.results[impl.name]
        # A plug-in's failure is already recorded; calling it again could only hang.
        rerun = result.error is None or impl.name in BUILTIN_NAMES
        cost = (
            isolated_cost(impl, case=case)
            if rerun and isolate
            else cost_of_call(impl.sampler_class, case=case, inputs=run.inputs)
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


def _model_problems(
    case: Case,
    measured: dict[str, MeasuredWork],
    predicted: dict[str, PredictedWork],
    one_walk: CallCost,
) -> list[str]:
    problems: list[str] = []
    for name, model in predicted.items():
        got = measured[name]
        if got.error_type != model.raises:
            problems.append(
                f"{name}: model says {'raises ' + model.raises if model.raises else 'runs'}, "
                f"the call {'raised ' + str(got.error) if got.error else 'ran'}"
            )
            continue
        if model.raises:
            continue
        for key in MODEL_COUNTERS:
            if got.counter(key) != model.counter(key):
                problems.append(
                    f"{name}: {key} counted {got.counter(key)}, model {model.counter(key)}"
                )
    walk_model = predicted[FIXED].walk if FIXED in predicted else None
    if walk_model is not None and one_walk.gemm_flops != walk_model.gemm_flops:
        problems.append(
            f"one walk: GEMM FLOPs counted {one_walk.gemm_flops}, model {walk_model.gemm_flops}"
        )
    return problems


def surplus_held_exactly(pair: tuple[str, str]) -> bool:
    """Whether the pair's operator and byte surplus is held to the separately measured
    walk: only between modelled built-ins, since that walk runs the built-in step
    sampler and a plug-in's step sampler is its own (its slices, its casts)."""
    return all(name in BUILTIN_NAMES for name in pair)


def _surplus_problems(case: Case, comparison: WorkComparison, *, one_walk: CallCost) -> list[str]:
    surplus = " - ".join(comparison.pair)
    problems = []
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
    return problems


WORK_SHAPE: dict[str, int] = {"bs": 4, "gamma": 4, "vocab_size": 256, "markov_rank": 8}
HIDDEN_DIVISIBLE, HIDDEN_NOT_DIVISIBLE = 16, 18  # gamma = 4 divides 16, not 18
MIXED_GREEDY_ROWS = (False, True, False, False)  # one greedy row among sampled ones


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
        mode: str,
        hidden: int = HIDDEN_DIVISIBLE,
        confidence: bool = False,
    ) -> Case:
        folded = mode.startswith("folded")
        return make_case(
            **WORK_SHAPE,
            hidden_size=hidden,
            greedy_rows=MIXED_GREEDY_ROWS if mode == "folded-sampled" else (True,) * 4,
            head_kind=head,
            sample_from_anchor=anchor,
            folded_sampling=folded,
            fused_greedy=mode == "greedy-fused",
            confidence=confidence,
            dtype=dtype,
            device=device,
            seed=seed,
        )

    modes = ("folded-sampled", "folded-greedy", "greedy", "greedy-fused")
    if exhaustive:
        cases = [case(h, anchor=True, mode=m) for h in ("vanilla", "gated", "rnn") for m in modes]
        cases += [
            case(h, anchor=False, mode=m, hidden=hidden)
            for h in ("vanilla", "gated", "rnn")
            for m in modes
            for hidden in (HIDDEN_DIVISIBLE, HIDDEN_NOT_DIVISIBLE)
        ]
        return cases
    return [
        case("vanilla", anchor=True, mode="folded-sampled", confidence=True),
        case("vanilla", anchor=True, mode="folded-greedy"),
        case("vanilla", anchor=True, mode="greedy"),
        case("vanilla", anchor=True, mode="greedy-fused"),
        case("gated", anchor=False, mode="folded-sampled"),
        case("rnn", anchor=False, mode="greedy"),
        case("vanilla", anchor=False, mode="folded-sampled", hidden=HIDDEN_NOT_DIVISIBLE),
        case("vanilla", anchor=False, mode="folded-sampled"),
        case("gated", anchor=True, mode="folded-sampled"),
        case("rnn", anchor=True, mode="folded-sampled"),
        case("gated", anchor=True, mode="greedy-fused"),
    ]


def collect_work(
    *,
    seed: int,
    device: str = "cpu",
    progress: Progress = no_progress,
    implementations: Sequence[Implementation] | None = None,
    pair: tuple[str, str] = DEFAULT_PAIR,
    isolate: bool = False,
) -> list[CaseWork]:
    """``measure_work`` on every work case (default: the modelled built-ins)."""
    works = []
    cases = work_cases(seed=seed, device=device)
    for index, case in enumerate(cases, 1):
        progress(f"[work {index}/{len(cases)}] {case_kind(case)}")
        works.append(
            measure_work(case, implementations=implementations, pair=pair, isolate=isolate)
        )
    return works
