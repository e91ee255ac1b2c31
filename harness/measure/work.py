"""Work the fix eliminates (SPEC 3.4): exact counters per call, the analytic work model,
and legacy vs fixed side by side.

Three layers, each checkable against the next:

- **the model** (``predict_work``): from ``bs, gamma, V, r, H``, the head kind, the
  layout and the sampling mode alone, how many Markov walks, fused greedy calls,
  head steps, step-sampler calls and ``exponential_`` draws (calls and elements) a
  call of ``legacy``, ``fixed`` or ``reference`` makes, whether legacy raises, and the
  GEMM FLOPs and compulsory bytes of one walk and of the lm_head;
- **the counters** (``measure_work``): the runner's exact counts (walks, draws, ATen
  operators by name) plus, from a second identical call, GEMM FLOPs
  (``torch.utils.flop_counter``), bytes of the tensors the call allocated (a dispatch
  mode: exact and deterministic on any device) and, on CUDA, the allocator's peak;
- **the comparison** (``WorkComparison``): legacy, fixed, legacy - fixed and
  legacy / fixed per counter, and the structural check that legacy's surplus is
  exactly one Markov walk (measured on its own) plus the view legacy's first pass takes.

``report_section`` turns this into the main report's "eliminated work" section;
``add_arguments`` / ``command`` are ``python -m harness work``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from harness.pipeline.case import Case, CaseInputs, case_block, make_case
from harness.pipeline.observe import DispatchObserver
from harness.pipeline.runner import WorkCounts, build_sampler, run_case, same_rng_start
from harness.plugins.implementations import BUILTIN_IMPLEMENTATIONS, builtin_implementations
from harness.render.progress import Progress, no_progress, progress_printer
from harness.render.sections import Section

IMPLEMENTATIONS = ("reference", "fixed", "legacy")
INDEX_BYTES = 8  # int64 token ids
NOISE_BYTES = 4  # the noise buffer is float32 whatever the model dtype
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
MODEL_COUNTERS = (
    "walks",
    "fused_calls",
    "head_steps",
    "sampler_calls",
    "noise_calls",
    "noise_elements",
    "gemm_flops",
)


# -- the analytic model ---------------------------------------------------------------------
@dataclass(frozen=True)
class KernelCost:
    """GEMM FLOPs (exact: what ``torch.utils.flop_counter`` counts) and compulsory bytes
    (an estimate: every operand read once and every result written once, unfused)."""

    gemm_flops: int
    bytes: int

    def times(self, n: int) -> KernelCost:
        return KernelCost(self.gemm_flops * n, self.bytes * n)


def head_step_cost(
    *, bs: int, vocab_size: int, markov_rank: int, hidden_size: int, head_kind: str, itemsize: int
) -> KernelCost:
    """One ``step_bias`` for ``bs`` rows: ``W2 . W1[prev]`` plus the kind's gate/recurrence.

    vanilla: ``2 bs r V``; gated adds ``gate = Linear(H + r, r)``: ``2 bs (H + r) r``;
    rnn adds ``joint = Linear(2r + H, 3r)``: ``2 bs (2r + H) 3r``.
    """
    v, r, h = vocab_size, markov_rank, hidden_size
    flops = 2 * bs * r * v
    weights = r * v + bs * r  # W2 and the gathered W1 rows
    activations = bs * v  # the bias written
    if head_kind == "gated":
        flops += 2 * bs * (h + r) * r
        weights += (h + r) * r + r
        activations += bs * h
    elif head_kind == "rnn":
        flops += 2 * bs * (2 * r + h) * 3 * r
        weights += (2 * r + h) * 3 * r + 3 * r
        activations += bs * (h + 2 * r)
    return KernelCost(flops, (weights + activations) * itemsize)


def walk_cost(case: Case, *, folded: bool, collect_corrected: bool) -> KernelCost:
    """One Markov walk over the block (``gamma`` steps), sampler included.

    Per step: the head's bias, ``step = base[:, k] + bias`` (read base, write step),
    the corrected-logits copy when collected, and the step sampler: greedy reads
    the step logits; the race writes and reads ``[bs, V]`` float32 noise and reads the
    step logits. The race and argmax do no GEMM, so FLOPs are the head's alone.
    """
    bs, v, item = case.bs, case.vocab_size, case.torch_dtype.itemsize
    step = head_step_cost(
        bs=bs,
        vocab_size=v,
        markov_rank=case.markov_rank,
        hidden_size=case.hidden_size,
        head_kind=case.head_kind,
        itemsize=item,
    )
    logits_bytes = bs * v * item
    step_bytes = step.bytes + 2 * logits_bytes + bs * INDEX_BYTES
    step_bytes += logits_bytes if collect_corrected else 0
    step_bytes += logits_bytes + (2 * bs * v * NOISE_BYTES if folded else 0)
    return KernelCost(step.gemm_flops, step_bytes).times(case.gamma)


def fused_greedy_cost(case: Case) -> KernelCost:
    """The vanilla head's fused greedy walk: one fp32 ``addmm`` ``[bs, r] x [r, V]`` per step."""
    bs, v, r = case.bs, case.vocab_size, case.markov_rank
    step_bytes = (r * v + bs * r) * case.torch_dtype.itemsize + 2 * bs * v * 4 + bs * INDEX_BYTES
    return KernelCost(2 * bs * r * v, step_bytes).times(case.gamma)


def lm_head_cost(case: Case) -> KernelCost:
    """``base = hidden[bs*gamma, H] @ W[V_padded, H].T``: ``2 bs gamma H V_padded`` FLOPs.

    In both layouts the lm_head sees ``bs * gamma`` rows (the no-anchor layout drops
    the anchor row first).
    """
    rows, h = case.bs * case.gamma, case.hidden_size
    v_padded = case.vocab_size + case.vocab_padding
    item = case.torch_dtype.itemsize
    return KernelCost(2 * rows * h * v_padded, (v_padded * h + rows * h + rows * v_padded) * item)


def legacy_pass1_error(case: Case) -> str | None:
    """The exception legacy's pass 1 raises on this case, or ``None``.

    Pass 1 runs unless the fused path produced tokens, and is given
    ``hidden_states.view(bs, gamma, -1)``. In the no-anchor layout the buffer has
    ``bs (gamma + 1) H`` elements: the view itself fails (``RuntimeError``) unless
    ``gamma`` divides ``H``; when it succeeds its rows are ``(gamma + 1) H / gamma``
    wide, which a hidden-state head rejects (``ValueError``) and a vanilla head ignores.
    """
    if case.sample_from_anchor or case.fused_path_available:
        return None
    if case.hidden_size % case.gamma:
        return "RuntimeError"
    return None if case.head_kind == "vanilla" else "ValueError"


@dataclass(frozen=True)
class PredictedWork:
    """What the model says one call of an implementation does on a case."""

    implementation: str
    raises: str | None  # exception type name, when the call must raise
    walks: int = 0
    fused_calls: int = 0
    head_steps: int = 0
    sampler_calls: int = 0
    noise_calls: int = 0
    noise_elements: int = 0
    pass1_views: int = 0  # legacy only: the hidden_states.view of pass 1
    gemm_flops: int = 0
    walk: KernelCost = KernelCost(0, 0)  # one sampling walk as this case runs it
    lm_head: KernelCost = KernelCost(0, 0)

    def counter(self, key: str) -> int:
        return int(getattr(self, key))


def predict_work(case: Case, implementation: str) -> PredictedWork:
    """The analytic work model of one call (SPEC 2.2 control flow, in numbers).

    - The fused greedy path runs (and counts) when sampling is not folded, the flag is
      on and the head has one (vanilla); other heads return ``None`` without work.
    - ``fixed`` walks once unless the fused path produced tokens; ``legacy`` walks
      once more, unconditionally; ``reference`` runs its own step loop: no
      ``sample_block`` walk and no step-sampler call, but ``gamma`` head steps and,
      folded, ``gamma`` noise draws.
    - Each folded walk step draws one ``[bs, V]`` noise tensor.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"no work model for {implementation!r}; expected one of {IMPLEMENTATIONS}")
    walk = walk_cost(case, folded=case.folded_sampling, collect_corrected=case.folded_sampling)
    lm_head = lm_head_cost(case)
    if implementation == "legacy" and (error := legacy_pass1_error(case)) is not None:
        return PredictedWork(implementation, raises=error, walk=walk, lm_head=lm_head)
    gamma, fused_tokens = case.gamma, case.fused_path_available
    fused_calls = int(fused_tokens)
    own_steps = 0
    if implementation == "reference":
        walks, own_steps = 0, (0 if fused_tokens else gamma)
    elif implementation == "fixed":
        walks = 0 if fused_tokens else 1
    else:
        walks = 1 if fused_tokens else 2
    head_steps = walks * gamma + own_steps
    noise_calls = head_steps if case.folded_sampling else 0
    step_flops = head_step_cost(
        bs=case.bs,
        vocab_size=case.vocab_size,
        markov_rank=case.markov_rank,
        hidden_size=case.hidden_size,
        head_kind=case.head_kind,
        itemsize=case.torch_dtype.itemsize,
    ).gemm_flops
    fused_flops = fused_greedy_cost(case).gemm_flops if fused_tokens else 0
    return PredictedWork(
        implementation,
        raises=None,
        walks=walks,
        fused_calls=fused_calls,
        head_steps=head_steps,
        sampler_calls=walks * gamma,
        noise_calls=noise_calls,
        noise_elements=noise_calls * case.bs * case.vocab_size,
        pass1_views=int(implementation == "legacy" and not fused_tokens),
        gemm_flops=lm_head.gemm_flops + head_steps * step_flops + fused_calls * fused_flops,
        walk=walk,
        lm_head=lm_head,
    )


# -- the counters ---------------------------------------------------------------------------
class AllocationCounter(TorchDispatchMode):
    """Bytes of the tensors the dispatched operators allocate.

    An output counts when its schema says it does not alias an input and its
    storage is none of the inputs' storages; its storage's bytes are added. Exact
    and deterministic on any device (unlike allocator statistics on the CPU).
    """

    def __init__(self) -> None:
        super().__init__()
        self.allocated_bytes = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        result = func(*args, **(kwargs or {}))
        inputs = [*args, *(kwargs or {}).values()]
        input_storages = {_storage_ptr(t) for t in _tensors(inputs)}
        returns = func._schema.returns
        outputs = (result,) if len(returns) == 1 else tuple(result)
        seen: set[int] = set()
        for ret, out in zip(returns, outputs, strict=True):
            if ret.alias_info is not None:
                continue
            for tensor in _tensors([out]):
                ptr = _storage_ptr(tensor)
                if ptr in input_storages or ptr in seen:
                    continue
                seen.add(ptr)
                self.allocated_bytes += tensor.untyped_storage().nbytes()
        return result


def _tensors(values: list[Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _storage_ptr(tensor: torch.Tensor) -> int:
    return int(tensor.untyped_storage().data_ptr())


@dataclass(frozen=True)
class CallCost:
    """GEMM FLOPs, allocated bytes and (CUDA) peak bytes of one instrumented call."""

    gemm_flops: int
    allocated_bytes: int
    peak_bytes: int | None
    op_counts: dict[str, int] = field(default_factory=dict)
    error: str | None = None  # exception type name


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def instrumented_call(call: Callable[[], object], *, device: torch.device) -> CallCost:
    """Run ``call`` once under the FLOP counter, the allocation counter and (CUDA) the
    allocator's peak statistics."""
    flops = FlopCounterMode(display=False)
    allocations = AllocationCounter()
    error: str | None = None
    peak: int | None = None
    if device.type == "cuda":
        _synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
    with flops, allocations:
        try:
            call()
        except Exception as exc:  # the implementation under test failed: recorded
            error = type(exc).__name__
    if device.type == "cuda":
        _synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - baseline
    return CallCost(int(flops.get_total_flops()), allocations.allocated_bytes, peak, error=error)


@dataclass(frozen=True)
class MeasuredWork:
    """Counted work of one call of one implementation."""

    implementation: str
    error: str | None  # "Type: message" when the call raised
    error_type: str | None
    counts: WorkCounts
    cost: CallCost

    def counter(self, key: str) -> int | None:
        if key == "aten_ops":
            return self.counts.total_ops
        if key in ("gemm_flops", "allocated_bytes", "peak_bytes"):
            value = getattr(self.cost, key)
            return None if value is None else int(value)
        return int(getattr(self.counts, key))


def _cost_of_call(name: str, *, case: Case, inputs: CaseInputs) -> CallCost:
    """FLOPs and bytes of one more call, from the same RNG start as the runner's."""
    sampler = build_sampler(BUILTIN_IMPLEMENTATIONS[name], case=case, inputs=inputs)
    device = torch.device(case.device)
    with same_rng_start(device, case.seed), torch.inference_mode():
        return instrumented_call(
            lambda: sampler(inputs.hidden_states, inputs.input_ids), device=device
        )


def measure_one_walk(case: Case, *, inputs: CaseInputs) -> CallCost:
    """One ``sample_block`` walk on its own, exactly as legacy's extra pass runs it:
    the case's step sampler (built outside the measurement, as ``__call__`` builds it
    once for both passes), ``collect_corrected=True`` (the default pass 2 uses)."""
    device = torch.device(case.device)
    block = case_block(case, inputs)
    with torch.inference_mode():
        step_sampler = build_sampler(
            BUILTIN_IMPLEMENTATIONS["fixed"], case=case, inputs=inputs
        ).step_sampler(block.bs)
        ops = DispatchObserver(record_noise=False)  # the runner's operator counter

        def walk() -> None:
            with ops:
                inputs.model.markov_head.sample_block(
                    block.base_logits,
                    first_prev_tokens=block.anchor_tokens,
                    hidden_states=block.sample_hidden,
                    sampler=step_sampler,
                )

        with same_rng_start(device, case.seed):
            cost = instrumented_call(walk, device=device)
    return CallCost(
        cost.gemm_flops, cost.allocated_bytes, cost.peak_bytes, dict(ops.op_counts), cost.error
    )


@dataclass(frozen=True)
class CounterComparison:
    """One counter: legacy, fixed, legacy - fixed, legacy / fixed."""

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
    """An ATen operator whose count differs between legacy and fixed."""

    op: str
    legacy: int
    fixed: int
    one_walk: int  # the separately measured walk (+1 view for legacy's pass 1)

    @property
    def diff(self) -> int:
        return self.legacy - self.fixed


@dataclass(frozen=True)
class WorkComparison:
    """legacy vs fixed on one case: every counter, and the operators that differ."""

    counters: tuple[CounterComparison, ...]
    op_differences: tuple[OpDifference, ...]

    @classmethod
    def of(
        cls,
        legacy: MeasuredWork,
        fixed: MeasuredWork,
        *,
        one_walk: CallCost,
        pass1_views: int,
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
        return cls(tuple(counters), tuple(differences))

    def counter(self, key: str) -> CounterComparison | None:
        return next((c for c in self.counters if c.key == key), None)

    @property
    def surplus_is_one_walk(self) -> bool:
        return all(d.diff == d.one_walk for d in self.op_differences)


@dataclass
class CaseWork:
    """Measured and predicted work of every implementation on one case."""

    case: Case
    kind: str
    measured: dict[str, MeasuredWork]
    predicted: dict[str, PredictedWork]
    one_walk: CallCost
    comparison: WorkComparison | None
    problems: list[str]

    @property
    def agrees(self) -> bool:
        return not self.problems


def case_kind(case: Case) -> str:
    """The ledger case kind in words (SPEC 3.2 table), with head and layout."""
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


def measure_work(case: Case, *, implementations: tuple[str, ...] = IMPLEMENTATIONS) -> CaseWork:
    """Count every implementation's work on the case and hold it against the model."""
    run = run_case(case, builtin_implementations(implementations), record_noise=False)
    measured: dict[str, MeasuredWork] = {}
    for name, result in run.results.items():
        cost = _cost_of_call(name, case=case, inputs=run.inputs)
        measured[name] = MeasuredWork(
            implementation=name,
            error=result.error.summary() if result.error else None,
            error_type=result.error.type if result.error else None,
            counts=result.work,
            cost=cost,
        )
    predicted = {name: predict_work(case, name) for name in implementations}
    one_walk = measure_one_walk(case, inputs=run.inputs)
    problems = _model_problems(case, measured, predicted, one_walk)
    comparison = None
    legacy, fixed = measured.get("legacy"), measured.get("fixed")
    if legacy is not None and fixed is not None and not legacy.error and not fixed.error:
        comparison = WorkComparison.of(
            legacy, fixed, one_walk=one_walk, pass1_views=predicted["legacy"].pass1_views
        )
        problems += _surplus_problems(case, comparison, one_walk=one_walk)
    return CaseWork(case, case_kind(case), measured, predicted, one_walk, comparison, problems)


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
    walk_model = predicted["fixed"].walk if "fixed" in predicted else None
    if walk_model is not None and one_walk.gemm_flops != walk_model.gemm_flops:
        problems.append(
            f"one walk: GEMM FLOPs counted {one_walk.gemm_flops}, model {walk_model.gemm_flops}"
        )
    return problems


def _surplus_problems(case: Case, comparison: WorkComparison, *, one_walk: CallCost) -> list[str]:
    problems = [
        f"{d.op}: legacy - fixed = {d.diff}, one walk (+ pass-1 view) = {d.one_walk}"
        for d in comparison.op_differences
        if d.diff != d.one_walk
    ]
    allocated = comparison.counter("allocated_bytes")
    if allocated is None or allocated.diff != one_walk.allocated_bytes:
        problems.append(
            f"legacy - fixed allocated bytes = {allocated.diff if allocated else '?'}, "
            f"one walk allocates {one_walk.allocated_bytes}"
        )
    walks = comparison.counter("walks")
    if walks is None or walks.diff != 1:
        problems.append(f"legacy - fixed walks = {walks.diff if walks else '?'}, expected 1")
    noise = comparison.counter("noise_elements")
    if case.folded_sampling and (noise is None or noise.legacy != 2 * noise.fixed):
        problems.append("folded: noise elements drawn are not exactly 2:1")
    return problems


# -- the report section and the command -----------------------------------------------------
WORK_SHAPE: dict[str, int] = {"bs": 4, "gamma": 4, "vocab_size": 256, "markov_rank": 8}
HIDDEN_DIVISIBLE, HIDDEN_NOT_DIVISIBLE = 16, 18  # gamma = 4 divides 16, not 18
MIXED_GREEDY_ROWS = (False, True, False, False)  # one greedy row among sampled ones


def work_cases(
    *, seed: int, device: str = "cpu", exhaustive: bool = False, dtype: str = "float32"
) -> list[Case]:
    """Small cases covering every ledger case kind.

    Default: the seven SPEC 3.2 kinds plus the gated and rnn heads on the anchor
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


def _table(rows: list[list[str]], *, right: set[int] | None = None) -> str:
    """Rows of cells, columns aligned (``right``: right-aligned column indices)."""
    right = right or set()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def format_overview(works: list[CaseWork]) -> str:
    """One row per case kind: legacy | fixed for the headline counters, model agreement."""
    short = {
        "walks": "walks",
        "sampler_calls": "sampler calls",
        "noise_elements": "noise elements",
        "aten_ops": "ATen ops",
        "gemm_flops": "GEMM FLOPs",
        "allocated_bytes": "bytes allocated",
    }
    keys = tuple(short)
    header = ["case kind (legacy | fixed)", *short.values(), "model"]
    rows = [header]
    for work in works:
        rows.append(
            [work.kind, *(_pair(work, k) for k in keys), "agrees" if work.agrees else "DIFFERS"]
        )
    return _table(rows, right=set(range(1, len(keys) + 1)))


def format_comparison(comparison: WorkComparison) -> str:
    """legacy / fixed / legacy - fixed / legacy / fixed for every counter, then the
    operators that differ against the separately measured walk."""
    rows = [["counter", "legacy", "fixed", "legacy - fixed", "legacy / fixed"]]
    for c in comparison.counters:
        rows.append([c.label, _number(c.legacy), _number(c.fixed), _number(c.diff), _ratio(c)])
    ops = [["ATen operator", "legacy", "fixed", "legacy - fixed", "one walk (+view)"]]
    for d in comparison.op_differences:
        ops.append([d.op, str(d.legacy), str(d.fixed), str(d.diff), str(d.one_walk)])
    return _table(rows, right={1, 2, 3, 4}) + "\n\n" + _table(ops, right={1, 2, 3, 4})


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


def production_shape(case: Case, *, hidden_size: int = 4096) -> Case:
    """The case's mode at a production shape (DeepSeek V3 vocabulary, gamma 7, r 256,
    bs 8, a production draft hidden size) for the model's projection only."""
    return make_case(
        bs=8,
        gamma=7,
        vocab_size=129280,
        hidden_size=hidden_size,
        markov_rank=256,
        head_kind=case.head_kind,
        folded_sampling=case.folded_sampling,
        dtype=case.dtype,
    )


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


def collect_work(
    *, seed: int, device: str = "cpu", progress: Progress = no_progress
) -> list[CaseWork]:
    works = []
    cases = work_cases(seed=seed, device=device)
    for index, case in enumerate(cases, 1):
        progress(f"[work {index}/{len(cases)}] {case_kind(case)}")
        works.append(measure_work(case))
    return works


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
    parts = [
        f"per call, legacy | fixed (counts exact); shapes bs={shape.bs} gamma={shape.gamma} "
        f"V={shape.vocab_size} r={shape.markov_rank} H={HIDDEN_DIVISIBLE} "
        f"(no-anchor g∤H: H={HIDDEN_NOT_DIVISIBLE}), {shape.dtype}, {shape.device}",
        format_overview(works),
        f"\n{headline.kind}: legacy vs fixed",
        format_comparison(headline.comparison),
        "\nwork model: " + format_model(headline.case),
    ]
    problems = [f"{w.kind}: {p}" for w in works for p in w.problems]
    if problems:
        parts.append("\nmodel disagreements:\n" + "\n".join(f"  {p}" for p in problems))
    parts.append("timing: `python -m harness work --timing` (A/B ratio); `python -m harness sweep`")
    return Section(
        title="Eliminated work (SPEC 3.4)",
        ok=ok,
        verdict=verdict,
        text="\n".join(parts),
        data={"cases": [work_json(w) for w in works]},
    )


def report_section(*, seed: int, progress: Callable[[str], None]) -> Section:
    """The main report's 'eliminated work' section (small shapes; a few seconds)."""
    return work_section(collect_work(seed=seed, progress=progress))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m harness work`` (global --seed, --device, --json come from the CLI)."""
    parser.add_argument(
        "--timing",
        action="store_true",
        help="add the A/B legacy/fixed time ratio at the production-like shape "
        "(and callgrind instruction counts where valgrind exists)",
    )
    parser.add_argument("--repeats", type=int, default=7, help="A/B timing repetitions (default 7)")
    parser.add_argument(
        "--hidden-size",
        type=int,
        default=None,
        help="hidden size of the timing shape (default 256: small, so the lm_head "
        "does not swamp the walk)",
    )
    parser.add_argument(
        "--no-callgrind", action="store_true", help="skip the callgrind instruction counts"
    )


def command(args: argparse.Namespace) -> int:
    """``python -m harness work``: 0 when the counts match the model and legacy's surplus
    is exactly one walk (and, with --timing, the walk-only ratio is in [1.9, 2.1])."""
    from harness.measure import timing

    seed, device = int(getattr(args, "seed", 0)), str(getattr(args, "device", "cpu"))
    progress = progress_printer(quiet=bool(getattr(args, "quiet", False)))

    if args.repeats < 1:
        print(f"error: --repeats must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    if args.hidden_size is not None and args.hidden_size < 1:
        print(f"error: --hidden-size must be >= 1, got {args.hidden_size}", file=sys.stderr)
        return 2
    section = work_section(collect_work(seed=seed, device=device, progress=progress))
    sections = [section]
    if args.timing:
        sections.append(
            timing.timing_section(
                seed=seed,
                device=device,
                repeats=args.repeats,
                hidden_size=args.hidden_size or timing.PRODUCTION_HIDDEN,
                callgrind=not args.no_callgrind,
                progress=progress,
            )
        )
    ok = all(s.ok for s in sections)
    if getattr(args, "json", False):
        payload = {
            "ok": ok,
            "sections": [
                {"title": s.title, "ok": s.ok, "verdict": s.verdict, "data": s.data}
                for s in sections
            ],
        }
        print(json.dumps(payload, indent=2))
    else:
        for s in sections:
            print(f"== {s.title}: {'OK' if s.ok else 'FAIL'} ==\n{s.verdict}\n\n{s.text}\n")
    return 0 if ok else 1
