"""CUDA-graph capture and replay of draft samplers, and the host-synchronisation check.

In production the draft sampler runs inside a captured CUDA graph: static input and
output buffers allocated once at ``max_bs``, ``__call__`` captured once, then replayed
with new inputs copied into the static inputs; the in-graph ``exponential_`` advances
the device generator on every replay, so every replay draws fresh noise. This module
runs the implementations exactly that way and holds every replay to the harness:

- ``capture_and_replay``: per implementation, build the sampler at ``max_bs``, stage its
  parameters, warm up on a side stream, capture ``sampler(static_hidden, static_ids)``
  under the observers, then per replay copy that replay's seeded inputs into the static
  inputs, reseed the generator, replay and read the buffers out. Each replay becomes a
  ``CaseRun`` evaluated by ``harness.pipeline.compare.evaluate_run`` (self-checks, equality with
  the reference, the ledger). Two more replays on identical inputs, without reseeding,
  show that the graph redraws its noise.
- ``harness.render.graphs`` presents the results: the comparison sections over every
  replay and the redraw section.

The host-synchronisation check is ``harness.gpu.host_sync``; the command is
``harness.cli.graphs``.

What the observers see in a graph: no Python runs during a replay, so nothing can be
intercepted then. The capture runs the Python once, under the same observers as the
eager runner: the walks, fused calls and ``exponential_`` calls counted there are the
work of every replay, and each noise draw is kept by a clone that is captured into the
graph (a read of the noise buffer right after it is drawn; it changes no output), so
the noise-replay check runs on every replay too. The timed graphs of
``harness.gpu.figures`` are captured bare.

Everything imports without CUDA. What needs a device raises ``RuntimeError`` naming it.
The capture mechanism is a parameter: ``EagerReplay`` stands in for a CUDA graph on any
device (capture runs the call; a replay runs it again and rewrites the tensors the
capture produced, as a graph replay does), so the path from static buffers to verdicts
is tested in CI without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import torch

from harness.case import Case, CaseInputs, build_inputs, case_block
from harness.devices import synchronize
from harness.gpu.shapes import DEFAULT_REPLAYS
from harness.pipeline.call import (
    build_sampler,
    guarded_call,
    record_outputs,
    same_rng_start,
    work_counts,
)
from harness.pipeline.compare import CaseVerdict, case_record, evaluate_run
from harness.pipeline.observe import DispatchObserver
from harness.pipeline.records import CaseRecord
from harness.pipeline.results import ImplResult, RaisedError
from harness.pipeline.runner import CaseRun
from harness.plugins.conventions import BuiltSampler
from harness.plugins.implementations import (
    Implementation,
)
from harness.plugins.walks import HeadCounts

WARMUP_CALLS = 3  # side-stream calls before capture: compile Triton kernels, settle the allocator

StaticOutputsCall = Callable[[], list[torch.Tensor]]


def require_cuda(device: str | torch.device, *, what: str) -> torch.device:
    """``device`` as a ``torch.device``; ``RuntimeError`` unless it is a usable CUDA device."""
    parsed = torch.device(device)
    if parsed.type != "cuda":
        raise RuntimeError(f"{what} needs a CUDA device; got device {str(parsed)!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs a CUDA device, and this machine has none")
    return parsed


# -- capture mechanisms ------------------------------------------------------------------------
class GraphRunner(Protocol):
    """Captures one call and replays it.

    ``call`` returns the tensors it produced that a replay must rewrite (its static
    outputs); ``capture`` returns those of the captured call. ``replay`` is asynchronous
    on the current stream, like ``CUDAGraph.replay``.
    """

    def capture(self, call: StaticOutputsCall) -> list[torch.Tensor]: ...

    def replay(self) -> None: ...


class CudaGraphRunner:
    """A ``torch.cuda.CUDAGraph`` captured as the torch docs (CUDA Graphs) require:
    warm-up calls on a side stream, then ``with torch.cuda.graph(g): call()``."""

    def __init__(self, *, device: str | torch.device, warmup_calls: int = WARMUP_CALLS) -> None:
        self.device = require_cuda(device, what="CUDA-graph capture")
        self.warmup_calls = warmup_calls
        self.graph: torch.cuda.CUDAGraph | None = None

    def capture(self, call: StaticOutputsCall) -> list[torch.Tensor]:
        with torch.cuda.device(self.device):
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(self.warmup_calls):
                    call()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # The outer context restores the current stream even when a failed capture
            # leaves torch.cuda.graph's own stream context unexited.
            with torch.cuda.stream(torch.cuda.current_stream(self.device)), torch.cuda.graph(graph):
                outputs = call()
        self.graph = graph
        return outputs

    def replay(self) -> None:
        if self.graph is None:
            raise RuntimeError("replay before capture")
        self.graph.replay()


class EagerReplay:
    """Stands in for a CUDA graph on any device, to test the graph path without a GPU.

    ``capture`` runs the call once and keeps what it produced; ``replay`` runs it again
    and copies the new results into the captured tensors, as a graph replay rewrites its
    static outputs. It proves nothing about CUDA graphs themselves.
    """

    def __init__(self) -> None:
        self._call: StaticOutputsCall | None = None
        self._outputs: list[torch.Tensor] = []

    def capture(self, call: StaticOutputsCall) -> list[torch.Tensor]:
        self._call = call
        self._outputs = call()
        return self._outputs

    def replay(self) -> None:
        if self._call is None:
            raise RuntimeError("replay before capture")
        for static, fresh in zip(self._outputs, self._call(), strict=True):
            static.copy_(fresh)


RunnerFactory = Callable[[torch.device], GraphRunner]


def cuda_graph_runner(device: torch.device) -> GraphRunner:
    return CudaGraphRunner(device=device)


# -- static inputs -----------------------------------------------------------------------------
@dataclass(frozen=True)
class StaticInputs:
    """The graph's input buffers, allocated once at ``max_bs``; a call reads ``[:bs*Q]``."""

    hidden_states: torch.Tensor  # [max_bs*Q, H], model dtype
    input_ids: torch.Tensor  # [max_bs*Q] int64
    rows: int  # bs*Q: the rows the captured call reads

    @classmethod
    def allocate(cls, case: Case) -> StaticInputs:
        device = torch.device(case.device)
        max_rows = case.max_bs * case.query_rows
        return cls(
            hidden_states=torch.zeros(
                max_rows, case.hidden_size, dtype=case.torch_dtype, device=device
            ),
            input_ids=torch.zeros(max_rows, dtype=torch.int64, device=device),
            rows=case.bs * case.query_rows,
        )

    def load(self, inputs: CaseInputs) -> None:
        """Copy one call's inputs (already on the device) into the static buffers."""
        self.hidden_states[: self.rows].copy_(inputs.hidden_states)
        self.input_ids[: self.rows].copy_(inputs.input_ids)

    def call_arguments(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The views the captured call reads: ``[bs*Q, H]`` and ``[bs*Q]``."""
        return self.hidden_states[: self.rows], self.input_ids[: self.rows]


def replay_inputs(case: Case, *, base: CaseInputs, replay: int) -> CaseInputs:
    """The inputs of replay ``replay``: ``base`` (the case's own, same model) with the
    hidden states and input ids ``build_inputs`` generates on the CPU for the seed
    ``case.seed + replay``, then moves. Replay 0 is the case itself."""
    if replay == 0:
        return base
    fresh = build_inputs(case.with_changes(seed=case.seed + replay))
    return replace(base, hidden_states=fresh.hidden_states, input_ids=fresh.input_ids)


# -- one implementation in a graph -------------------------------------------------------------
@dataclass
class GraphedSampler:
    """One implementation's sampler, captured over the shared static inputs."""

    name: str
    sampler: BuiltSampler
    runner: GraphRunner
    head_counts: HeadCounts  # what the captured call did: the work of every replay
    dispatch: DispatchObserver


def capture_sampler(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    static: StaticInputs,
    runner: GraphRunner,
) -> GraphedSampler:
    """Build the sampler at ``max_bs``, stage its parameters (outside the graph, as
    upstream does) and capture one observed call over the static inputs, then wait for
    the device (an asynchronous failure is the capture's)."""
    sampler = build_sampler(implementation.sampler_class, case=case, inputs=inputs)
    hidden_states, input_ids = static.call_arguments()
    observed: list[tuple[HeadCounts, DispatchObserver]] = []

    def observed_call() -> list[torch.Tensor]:
        dispatch = DispatchObserver(record_noise=True)
        with sampler.observe_walks() as head_counts, dispatch:
            sampler(hidden_states, input_ids)
        observed.append((head_counts, dispatch))
        # Walk tokens and noise clones are static outputs too: replays rewrite them.
        return [*head_counts.walk_tokens, *dispatch.noise_draws]

    runner.capture(observed_call)
    head_counts, dispatch = observed[-1]  # the captured call (warm-up calls come before it)
    synchronize(torch.device(case.device))
    return GraphedSampler(implementation.name, sampler, runner, head_counts, dispatch)


def replay_result(
    graphed: GraphedSampler, *, case: Case, seed: int, device: torch.device
) -> ImplResult:
    """Poison the outputs, reseed the generator, replay once and read the buffers out."""
    result = ImplResult(name=graphed.name)

    def replay() -> None:
        graphed.sampler.poison()
        torch.manual_seed(seed)  # the replay's in-graph noise starts from this state
        graphed.runner.replay()
        synchronize(device)
        record_outputs(graphed.sampler.read(case), result)
        result.work = work_counts(graphed.head_counts, graphed.dispatch)
        result.noise_draws = [draw.clone() for draw in graphed.dispatch.noise_draws]
        result.walk_tokens = [tokens.clone() for tokens in graphed.head_counts.walk_tokens]

    result.error = guarded_call(replay).error  # the implementation's failure: record, go on
    return result


@dataclass(frozen=True)
class RedrawCheck:
    """Two replays on identical inputs without reseeding: fresh noise, same greedy rows.

    ``None`` where the property does not apply (no noise buffer, no sampled rows).
    """

    implementation: str
    noise_redrawn: bool | None  # the static noise buffer differs between the replays
    sampled_tokens_differ: bool | None  # some sampled-row token differs between the replays
    greedy_tokens_equal: bool | None  # every greedy-row token is the same in both
    error: RaisedError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and False not in (
            self.noise_redrawn,
            self.sampled_tokens_differ,
            self.greedy_tokens_equal,
        )

    def describe(self) -> str:
        if self.error is not None:
            return f"raised {self.error.summary()}"

        def word(value: bool | None, yes: str, no: str) -> str:
            return "n/a" if value is None else (yes if value else no)

        return (
            f"noise {word(self.noise_redrawn, 'redrawn', 'NOT redrawn')}; "
            f"sampled rows {word(self.sampled_tokens_differ, 'differ', 'IDENTICAL')}; "
            f"greedy rows {word(self.greedy_tokens_equal, 'identical', 'DIFFER')}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "implementation": self.implementation,
            "ok": self.ok,
            "noise_redrawn": self.noise_redrawn,
            "sampled_tokens_differ": self.sampled_tokens_differ,
            "greedy_tokens_equal": self.greedy_tokens_equal,
            "error": None if self.error is None else self.error.summary(),
        }


def redraw_check(
    graphed: GraphedSampler,
    *,
    case: Case,
    inputs: CaseInputs,
    static: StaticInputs,
    device: torch.device,
) -> RedrawCheck:
    """Replay twice on ``inputs`` and compare the tokens and the static noise buffer."""
    tokens: list[torch.Tensor] = []
    noise: list[torch.Tensor] = []

    def replay_twice() -> None:
        static.load(inputs)
        for _ in range(2):
            graphed.runner.replay()
            synchronize(device)
            tokens.append(graphed.sampler.read(case).tokens)
            buffer = getattr(graphed.sampler.sampler, "exp_noise", None)
            if case.folded_sampling and isinstance(buffer, torch.Tensor):
                noise.append(buffer[: case.bs].clone())

    failure = guarded_call(replay_twice).error
    if failure is not None:  # the implementation under test failed: record, go on
        return RedrawCheck(graphed.name, None, None, None, failure)
    greedy = torch.tensor(
        [greedy or not case.folded_sampling for greedy in case.greedy_rows],
        device=tokens[0].device,
    )  # [bs]: rows whose tokens cannot depend on the noise
    differ = tokens[0] != tokens[1]  # [bs, gamma]
    return RedrawCheck(
        implementation=graphed.name,
        noise_redrawn=bool((noise[0] != noise[1]).any()) if noise else None,
        sampled_tokens_differ=bool(differ[~greedy].any()) if case.has_sampled_rows else None,
        greedy_tokens_equal=not bool(differ[greedy].any()) if bool(greedy.any()) else None,
    )


# -- a case through the graph path -------------------------------------------------------------
@dataclass
class GraphCaseResult:
    """One case run through captured graphs: a verdict per replay, the redraw checks."""

    case: Case
    replays: list[CaseVerdict]
    redraws: list[RedrawCheck]

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json_dict()["case"],
            "replays": replay_records(self.replays),
            "redraws": [r.to_json() for r in self.redraws],
        }


def replay_records(replays: list[CaseVerdict]) -> list[CaseRecord]:
    """The replays' verdicts as report records, keyed by their replay label."""
    return [case_record(verdict, key=verdict.case.label()) for verdict in replays]


def replay_case(case: Case, replay: int) -> Case:
    """The case as labelled in the verdicts of replay ``replay``."""
    return case.with_changes(name=f"{case.label()} [graph replay {replay}]")


def capture_and_replay(
    case: Case,
    implementations: Sequence[Implementation],
    *,
    replays: int = DEFAULT_REPLAYS,
    runner_factory: RunnerFactory | None = None,
    require_observable: bool = True,
) -> GraphCaseResult:
    """Capture each implementation once at ``max_bs`` and hold every replay to the checks.

    Replay ``r`` runs on the inputs of seed ``case.seed + r`` from the generator seeded
    with ``case.seed + r``, the same for every implementation, so fixed and reference
    match and the ledger holds legacy to the documented bug. ``runner_factory`` defaults
    to a real CUDA graph (which needs a CUDA case); ``EagerReplay`` stands in for it on
    any device. The caller's RNG state is left as it was.
    """
    if replays < 1:
        raise ValueError(f"replays must be >= 1, got {replays}")
    device = torch.device(case.device)
    if runner_factory is None:
        require_cuda(device, what="capture_and_replay")
        runner_factory = cuda_graph_runner
    inputs = build_inputs(case)
    graphed: dict[str, GraphedSampler | RaisedError] = {}
    verdicts: list[CaseVerdict] = []
    redraws: list[RedrawCheck] = []
    with same_rng_start(device, case.seed), torch.inference_mode():
        static = StaticInputs.allocate(case)
        static.load(inputs)  # the warm-up and the capture run on real inputs
        for implementation in implementations:
            captured = guarded_call(
                partial(
                    capture_sampler,
                    implementation,
                    case=case,
                    inputs=inputs,
                    static=static,
                    runner=runner_factory(device),
                )
            )  # the implementation under test failed: record, go on
            graphed[implementation.name] = captured.error or captured.returned()
        for replay in range(replays):
            replay_in = replay_inputs(case, base=inputs, replay=replay)
            static.load(replay_in)
            results = {
                name: replay_result(g, case=case, seed=case.seed + replay, device=device)
                if isinstance(g, GraphedSampler)
                else ImplResult(name=name, error=g)
                for name, g in graphed.items()
            }
            run = CaseRun(
                case=replay_case(case, replay),
                inputs=replay_in,
                block=case_block(case, replay_in),
                results=results,
            )
            verdicts.append(evaluate_run(run, require_observable=require_observable))
        for g in graphed.values():
            if isinstance(g, GraphedSampler):
                redraws.append(
                    redraw_check(g, case=case, inputs=inputs, static=static, device=device)
                )
    return GraphCaseResult(case, verdicts, redraws)


def redraws_hold(results: Sequence[GraphCaseResult]) -> bool:
    """Every graph checked redraws its noise on replay (and at least one was checked)."""
    checks = [check for result in results for check in result.redraws]
    return bool(checks) and all(check.ok for check in checks)
