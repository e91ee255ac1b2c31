"""What a call asked of the Markov head: ``observe_head`` wraps the head's entry points on
the instance for the duration of a call, counting walks, fused greedy calls, head steps
and step-sampler calls, and keeping the tokens each walk returned (``HeadCounts``). It
is what a convention's ``BuiltSampler.observe_walks`` gives by default; the runner reads
it beside the operators and draws of ``harness.pipeline.observe``."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from reference import MarkovHead
from reference.step_samplers import StepSampler


@dataclass
class HeadCounts:
    """What the Markov head was asked to do during one call."""

    walks: int = 0
    fused_calls: int = 0  # fused greedy calls that produced tokens
    head_steps: int = 0
    sampler_calls: int = 0
    walk_tokens: list[torch.Tensor] = field(default_factory=list)


@contextmanager
def observe_head(head: MarkovHead, *, step: str = "step_bias") -> Iterator[HeadCounts]:
    """Count the head's walks, fused calls (where it has a fused path), steps (calls of
    its method ``step``, once a step) and step-sampler calls (the wrappers live on the
    instance: ``wrapped_on_instance``)."""
    counts = HeadCounts()
    sample_block, fused, step_bias = (
        head.sample_block,
        getattr(head, "sample_block_greedy_fused", None),
        getattr(head, step),
    )

    def counting_sample_block(*args: Any, sampler: StepSampler, **kwargs: Any) -> Any:
        def counting_sampler(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            counts.sampler_calls += 1
            return sampler(step_logits, step_idx)

        counts.walks += 1
        tokens, corrected = sample_block(*args, sampler=counting_sampler, **kwargs)
        counts.walk_tokens.append(tokens)  # fresh per walk; no copy, so no counted op
        return tokens, corrected

    def counting_fused(*args: Any, **kwargs: Any) -> Any:
        assert fused is not None  # wrapped only where the head has it
        tokens = fused(*args, **kwargs)
        counts.fused_calls += tokens is not None  # a head without a fused path did no work
        return tokens

    def counting_step_bias(*args: Any, **kwargs: Any) -> Any:
        counts.head_steps += 1
        return step_bias(*args, **kwargs)

    patches = {"sample_block": counting_sample_block, step: counting_step_bias}
    if fused is not None:  # sglang 0.5.16-0.5.18's heads have no fused path
        patches["sample_block_greedy_fused"] = counting_fused
    with wrapped_on_instance(head, patches):
        yield counts


@contextmanager
def wrapped_on_instance(
    owner: object, wrappers: Mapping[str, Callable[..., Any]]
) -> Iterator[None]:
    """``owner``'s attributes named in ``wrappers`` replaced by them on the instance for
    the block and removed on exit, so the class and any other instance are untouched."""
    for name, wrapper in wrappers.items():
        object.__setattr__(owner, name, wrapper)
    try:
        yield
    finally:
        for name in wrappers:
            object.__delattr__(owner, name)
