"""Counting the walks of today's released sglang sampler: the package head's walks,
steps and each walk's tokens, observed by wrapping the head and its ``tp_sync`` on the
instance for one call (``harness.upstream.sglang_convention`` reads them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from harness.plugins.walks import HeadCounts, wrapped_on_instance


@contextmanager
def observe_package_walks(head: Any, tp_sync: Any) -> Iterator[HeadCounts]:
    """Count the package head's walks (``init_state``), steps (``step_bias`` or the fused
    one-row greedy GEMV) and each walk's tokens (what the walk hands ``tp_sync``)."""
    counts = HeadCounts()
    steps: list[list[torch.Tensor]] = []
    init_state, step_bias, greedy_w2, sync = (
        head.init_state,
        head.step_bias,
        head.greedy_w2_weight,
        tp_sync.sync,
    )

    def counting_init_state(*args: Any, **kwargs: Any) -> Any:
        counts.walks += 1
        steps.append([])
        return init_state(*args, **kwargs)

    def counting_step_bias(*args: Any, **kwargs: Any) -> Any:
        counts.head_steps += 1
        return step_bias(*args, **kwargs)

    def counting_greedy_w2(*args: Any, **kwargs: Any) -> Any:
        weight = greedy_w2(*args, **kwargs)
        counts.head_steps += weight is not None  # the fused GEMV + argmax step
        return weight

    def recording_sync(site: Any, values: torch.Tensor) -> torch.Tensor:
        counts.sampler_calls += 1
        synced = sync(site, values)
        if steps:
            steps[-1].append(synced)
        return synced

    head_patches = {
        "init_state": counting_init_state,
        "step_bias": counting_step_bias,
        "greedy_w2_weight": counting_greedy_w2,
    }
    try:
        with (
            wrapped_on_instance(head, head_patches),
            wrapped_on_instance(tp_sync, {"sync": recording_sync}),
        ):
            yield counts
    finally:
        counts.walk_tokens = [torch.stack(walk, dim=1) for walk in steps if walk]
