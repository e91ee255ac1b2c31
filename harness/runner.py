"""Run implementations side by side on one case, from the same RNG state.

For each implementation the runner builds a sampler over the case's shared
inputs, stages the sampling parameters, forks the device RNG, seeds it with the
case seed, runs one call under the observers and copies the output buffers out.
The caller's RNG state is restored afterwards. An implementation that raises is
a recorded result, never a crash of the harness.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from harness.case import Case, CaseInputs, build_inputs
from harness.implementations import Implementation
from harness.observe import DispatchObserver, HeadCounts, observe_head
from reference import BlockInputs, prepare_block


@dataclass(frozen=True)
class RaisedError:
    """An exception an implementation raised: class, message and where."""

    type: str
    message: str
    where: str

    def summary(self) -> str:
        return f"{self.type}: {self.message}"


@dataclass
class WorkCounts:
    """Work of one call, counted exactly."""

    walks: int = 0
    fused_calls: int = 0  # fused greedy calls that produced tokens
    head_steps: int = 0
    sampler_calls: int = 0
    noise_calls: int = 0
    noise_elements: int = 0
    op_counts: dict[str, int] = field(default_factory=dict)

    @property
    def total_ops(self) -> int:
        return sum(self.op_counts.values())


@dataclass
class ImplResult:
    """What one implementation produced on one case."""

    name: str
    tokens: torch.Tensor | None = None  # [bs, gamma] int64
    corrected: torch.Tensor | None = None  # [bs, gamma, V], folded sampling only
    confidence: torch.Tensor | None = None  # [bs, gamma]
    error: RaisedError | None = None
    noise_draws: list[torch.Tensor] = field(default_factory=list)  # each [bs, V]
    walk_tokens: list[torch.Tensor] = field(default_factory=list)  # tokens of each walk
    work: WorkCounts = field(default_factory=WorkCounts)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class CaseRun:
    """All implementations' results on one case, plus the shared inputs."""

    case: Case
    inputs: CaseInputs
    block: BlockInputs
    results: dict[str, ImplResult]


@contextmanager
def same_rng_start(device: torch.device, seed: int) -> Iterator[None]:
    """Seed the RNG of ``device`` (and the CPU) with ``seed``; restore both on exit."""
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices, device_type="cuda"):
        torch.manual_seed(seed)
        yield


def _raised(error: BaseException) -> RaisedError:
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return RaisedError(type=type(error).__name__, message=str(error), where=where)


def _read_buffer(sampler: object, name: str) -> torch.Tensor | None:
    value = getattr(sampler, name, None)
    return value if isinstance(value, torch.Tensor) else None


def run_implementation(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    record_noise: bool = True,
) -> ImplResult:
    """One call of one implementation on the case, observed."""
    result = ImplResult(name=implementation.name)
    head = inputs.model.markov_head
    device = torch.device(case.device)
    try:
        sampler = implementation.sampler_class(
            model=inputs.model,
            gamma=case.gamma,
            max_bs=case.max_bs,
            device=device,
            confidence_fn=inputs.confidence_fn,
            folded_sampling=case.folded_sampling,
            fused_greedy=case.fused_greedy,
        )
        sampler.stage_sampling_params(bs=case.bs, sampling_info=inputs.sampling_info)
        dispatch = DispatchObserver(record_noise=record_noise)
        head_counts = HeadCounts()
        with same_rng_start(device, case.seed), torch.inference_mode():
            try:
                with observe_head(head) as head_counts, dispatch:
                    sampler(inputs.hidden_states, inputs.input_ids)
            finally:
                result.work = _work_counts(head_counts, dispatch)
                result.noise_draws = dispatch.noise_draws
                result.walk_tokens = head_counts.walk_tokens
        rows = case.bs * case.gamma
        out = _read_buffer(sampler, "out")
        if out is None:
            raise AttributeError("sampler has no tensor attribute 'out'")
        result.tokens = out[:rows].view(case.bs, case.gamma).clone()
        corrected = _read_buffer(sampler, "corrected_out")
        if case.folded_sampling and corrected is not None:
            result.corrected = corrected[:rows].view(case.bs, case.gamma, -1).clone()
        confidence = _read_buffer(sampler, "confidence_out")
        if case.confidence and confidence is not None:
            result.confidence = confidence[: case.bs].clone()
    except Exception as error:  # the implementation under test failed: record, go on
        result.error = _raised(error)
    return result


def _work_counts(head_counts: HeadCounts, dispatch: DispatchObserver) -> WorkCounts:
    return WorkCounts(
        walks=head_counts.walks,
        fused_calls=head_counts.fused_calls,
        head_steps=head_counts.head_steps,
        sampler_calls=head_counts.sampler_calls,
        noise_calls=dispatch.noise_calls,
        noise_elements=dispatch.noise_elements,
        op_counts=dict(sorted(dispatch.op_counts.items())),
    )


def run_case(
    case: Case,
    implementations: list[Implementation],
    *,
    record_noise: bool = True,
) -> CaseRun:
    """Run every implementation on the case from the same RNG start."""
    inputs = build_inputs(case)
    with torch.inference_mode():
        block = prepare_block(
            model=inputs.model,
            gamma=case.gamma,
            max_bs=case.max_bs,
            hidden_states=inputs.hidden_states,
            input_ids=inputs.input_ids,
        )
    results = {
        impl.name: run_implementation(impl, case=case, inputs=inputs, record_noise=record_noise)
        for impl in implementations
    }
    return CaseRun(case=case, inputs=inputs, block=block, results=results)
