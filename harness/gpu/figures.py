"""GPU figures of the fix: legacy/fixed time ratios from CUDA events, and (from
``harness.gpu.kernel_bandwidth``) the step kernel's achieved memory bandwidth.

- **Sampler time** (``sampler_times``): legacy and fixed alternating in one process, each
  call bracketed by CUDA events on the current stream (the device synchronised before
  each start event, so one call's time never includes another's). Two modes, as in
  ``harness.measure.timing``: *walk-only* runs the real ``__call__`` on the
  ``PrecomputedBaseLogits`` drafter (the lm_head, which the fix does not touch, replaced
  by a lookup), so it times every walk, the corrected-logits copy, legacy's pass-1 view
  and the output writes; timing ``head.sample_block`` once against twice instead would
  only restate the walk count and miss what ``__call__`` does around the walks. *Whole
  call* keeps the lm_head. Each mode runs **eagerly** (Python launches every kernel) and
  as a **replay of a captured CUDA graph**, which is how production runs the sampler and
  leaves only device time.
- ``harness.render.gpu_figures``: both as one report section.

The command is ``harness.cli.gpu_figures`` (``--device cuda``); everything imports
without CUDA and the clock and the capture are parameters, so the timing path runs on
the CPU in tests (wall clock, ``harness.gpu.graphs.EagerReplay``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.case import Case, build_inputs, make_case
from harness.defaults import BUGGY_SIDE, FIXED_SIDE, PAIR_SIDES
from harness.gpu.clocks import CLOCK_LABELS, Clock, cuda_event_ms
from harness.gpu.graphs import RunnerFactory, cuda_graph_runner
from harness.gpu.shapes import (
    DEFAULT_REPEATS,
    FIGURE_BS,
    FIGURE_DTYPE,
    FIGURE_HIDDEN,
    KERNEL_VOCAB,
)
from harness.measure.timing import MODES, PairedTimes, make_samplers
from harness.pipeline.runner import same_rng_start
from harness.plugins.conventions import BuiltSampler
from harness.progress import Progress, no_progress

FIGURE_VOCAB = KERNEL_VOCAB
FIGURE_GAMMA = 7
FIGURE_RANK = 256
KERNEL_DTYPES = ("float32", "bfloat16")
EXECUTIONS = ("eager", "graph")


def figure_case(
    *,
    seed: int = 0,
    device: str = "cuda",
    bs: int = FIGURE_BS,
    vocab_size: int = FIGURE_VOCAB,
    hidden_size: int = FIGURE_HIDDEN,
    dtype: str = FIGURE_DTYPE,
) -> Case:
    """Folded sampling, every row sampled at T=1, vanilla head: the production shape
    bs=64, gamma=7, V=129280, r=256, H=4096 in bfloat16 unless told otherwise."""
    return make_case(
        bs=bs,
        gamma=FIGURE_GAMMA,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        markov_rank=FIGURE_RANK,
        dtype=dtype,
        seed=seed,
        device=device,
        name=(
            f"bs={bs} gamma={FIGURE_GAMMA} V={vocab_size} H={hidden_size} r={FIGURE_RANK} "
            f"{dtype} vanilla folded, all rows sampled"
        ),
    )


@dataclass(frozen=True)
class SamplerTimes:
    """Legacy and fixed per call, by execution (eager, graph) and mode."""

    case: Case
    repeats: int
    warmup: int
    clock: str  # what timed each call
    times: dict[str, dict[str, PairedTimes]]  # execution -> mode -> seconds per call

    def ratio(self, execution: str, mode: str) -> float:
        return self.times[execution][mode].summary()["ratio_median"]

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json_dict()["case"],
            "repeats": self.repeats,
            "warmup": self.warmup,
            "clock": self.clock,
            **{
                execution: {
                    mode: {
                        "legacy_s": list(t.legacy_s),
                        "fixed_s": list(t.fixed_s),
                        **t.summary(),
                    }
                    for mode, t in by_mode.items()
                }
                for execution, by_mode in self.times.items()
            },
        }


def sampler_times(
    case: Case,
    *,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = 2,
    clock: Clock = cuda_event_ms,
    runner_factory: RunnerFactory = cuda_graph_runner,
    progress: Progress = no_progress,
) -> SamplerTimes:
    """Time legacy and fixed alternately (the order flipped every repetition), walk-only and
    whole call, eagerly and as graph replays. The global RNG is left as it was."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    device = torch.device(case.device)
    inputs = build_inputs(case)
    ms: dict[tuple[str, str, str], list[float]] = {}
    with same_rng_start(device, case.seed), torch.inference_mode():
        samplers = make_samplers(case, inputs=inputs)
        calls: dict[tuple[str, str, str], Callable[[], object]] = {}
        for (mode, name), sampler in samplers.items():
            call = _bare_call(sampler, inputs.hidden_states, inputs.input_ids)
            runner = runner_factory(device)
            runner.capture(call)
            calls["eager", mode, name] = call
            calls["graph", mode, name] = runner.replay
        for _ in range(warmup):
            for warm in calls.values():
                warm()
        for key in calls:
            ms[key] = []
        for rep in range(repeats):
            order = PAIR_SIDES if rep % 2 == 0 else PAIR_SIDES[::-1]
            for execution in EXECUTIONS:
                for mode in MODES:
                    for name in order:
                        ms[execution, mode, name].append(clock(calls[execution, mode, name]))
            progress(
                f"[gpu timing {rep + 1}/{repeats}] "
                + ", ".join(
                    f"{execution} {mode}: "
                    + ", ".join(
                        f"{side} {ms[execution, mode, side][-1]:.3f} ms" for side in PAIR_SIDES
                    )
                    for execution in EXECUTIONS
                    for mode in MODES
                )
            )
    times = {
        execution: {
            mode: PairedTimes(
                tuple(t / 1e3 for t in ms[execution, mode, BUGGY_SIDE]),
                tuple(t / 1e3 for t in ms[execution, mode, FIXED_SIDE]),
            )
            for mode in MODES
        }
        for execution in EXECUTIONS
    }
    return SamplerTimes(case, repeats, warmup, CLOCK_LABELS.get(clock, "custom clock"), times)


def _bare_call(
    sampler: BuiltSampler, hidden_states: torch.Tensor, input_ids: torch.Tensor
) -> Callable[[], list[torch.Tensor]]:
    """The sampler's call as production captures it: no observers, and no static outputs
    besides the sampler's own buffers."""

    def call() -> list[torch.Tensor]:
        sampler(hidden_states, input_ids)
        return []

    return call
