"""Counters of one call: bytes the dispatched operators allocate (a dispatch mode),
GEMM FLOPs (``torch.utils.flop_counter``), the CUDA allocator's peak, and one Markov
walk measured on its own (what legacy's surplus must equal).

Walk, step, noise and operator counts come from the runner's observer
(``harness.pipeline.observe``); this module adds what needs a second, instrumented
call from the same RNG start.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.utils.flop_counter import flop_registry

from harness.case import Case, CaseInputs, build_inputs, case_block
from harness.defaults import FIXED
from harness.devices import synchronize
from harness.pipeline.call import build_sampler, guarded_call, same_rng_start
from harness.pipeline.observe import DispatchObserver, EagerDispatchMode
from harness.pipeline.results import WorkCounts
from harness.plugins.implementations import BUILTIN_IMPLEMENTATIONS, Implementation
from harness.plugins.protocol import DraftSampler
from harness.wire import answer_types


class FlopCounter(EagerDispatchMode):
    """GEMM FLOPs by torch's own formulas (``torch.utils.flop_counter.flop_registry``),
    counted as its ``FlopCounterMode`` counts them (an operator is decomposed where it
    can be, so ``aten.linear`` under inference mode counts as its ``addmm``), without
    that mode's import of ``torch._dynamo``."""

    def __init__(self) -> None:
        super().__init__()
        self.gemm_flops = 0

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is not torch.ops.prim.device.default:
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        result = func(*args, **kwargs)
        count = flop_registry.get(func.overloadpacket)
        if count is not None:
            self.gemm_flops += int(count(*args, **kwargs, out_val=result))
        return result


class AllocationCounter(EagerDispatchMode):
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


def instrumented_call(call: Callable[[], object], *, device: torch.device) -> CallCost:
    """Run ``call`` once under the FLOP counter, the allocation counter and (CUDA) the
    allocator's peak statistics."""
    flops = FlopCounter()
    allocations = AllocationCounter()
    peak: int | None = None
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        baseline = torch.cuda.memory_allocated(device)
    with flops, allocations:
        failure = guarded_call(call).error  # the implementation under test failed: recorded
    error = None if failure is None else failure.type
    if device.type == "cuda":
        synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - baseline
    return CallCost(flops.gemm_flops, allocations.allocated_bytes, peak, error=error)


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


def cost_of_call(sampler_class: type[DraftSampler], *, case: Case, inputs: CaseInputs) -> CallCost:
    """FLOPs and bytes of one more call, from the same RNG start as the runner's; a
    sampler that cannot be built costs nothing and records why."""
    device = torch.device(case.device)
    owner = sampler_class.__qualname__
    built = guarded_call(
        partial(build_sampler, sampler_class, case=case, inputs=inputs), owner=owner
    )
    if built.error is not None:  # the implementation under test failed: recorded
        return CallCost(0, 0, None, error=built.error.type)
    sampler = built.returned()
    with same_rng_start(device, case.seed), torch.inference_mode():
        return instrumented_call(
            lambda: sampler(inputs.hidden_states, inputs.input_ids), device=device
        )


def cost_task(implementation: Implementation, *, case: Case) -> CallCost:
    """A task: ``cost_of_call`` of the implementation on inputs built from the case's seed
    where it runs."""
    return cost_of_call(implementation.sampler_class, case=case, inputs=build_inputs(case))


answer_types(CallCost)


def measure_one_walk(case: Case, *, inputs: CaseInputs) -> CallCost:
    """One ``sample_block`` walk on its own, exactly as legacy's extra pass runs it:
    the case's step sampler (built outside the measurement, as ``__call__`` builds it
    once for both passes), ``collect_corrected=True`` (the default pass 2 uses)."""
    device = torch.device(case.device)
    block = case_block(case, inputs)
    with torch.inference_mode():
        step_sampler = build_sampler(
            BUILTIN_IMPLEMENTATIONS[FIXED], case=case, inputs=inputs
        ).sampler.step_sampler(block.bs)
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
