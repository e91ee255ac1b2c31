"""Clocks of the GPU figures: CUDA events around one call, the host wall clock (for the
CPU and tests), and device time per call from one captured graph replayed many times."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from harness.devices import synchronize
from harness.gpu.graphs import RunnerFactory, cuda_graph_runner

Clock = Callable[[Callable[[], object]], float]  # milliseconds one call takes


def cuda_event_ms(call: Callable[[], object]) -> float:
    """Milliseconds of one call between two CUDA events on the current stream; the device
    is synchronised first, so earlier work does not count."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    synchronize("cuda")  # the current CUDA device
    start.record()
    call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def wall_ms(call: Callable[[], object]) -> float:
    """Milliseconds of one call on the host clock (for the CPU; tests)."""
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1e3


CLOCK_LABELS: dict[Clock, str] = {
    cuda_event_ms: "CUDA events on the current stream, device synchronised before each",
    wall_ms: "host wall clock",
}


def graph_device_ms(
    calls: Sequence[Callable[[], Any]],
    *,
    device: torch.device,
    replays: int = 10,
    runner_factory: RunnerFactory = cuda_graph_runner,
    clock: Clock = cuda_event_ms,
) -> float:
    """Device milliseconds per call: every call captured in one graph, the graph replayed
    ``replays`` times between two events, divided by the number of calls made."""

    def all_calls() -> list[torch.Tensor]:
        for call in calls:
            call()
        return []

    runner = runner_factory(device)
    runner.capture(all_calls)
    runner.replay()  # first replay uploads the graph

    def replayed() -> None:
        for _ in range(replays):
            runner.replay()

    return clock(replayed) / (replays * len(calls))
