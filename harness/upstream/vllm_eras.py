"""vLLM's DSpark eras before 0.31, each driven as 0.33's convention drives its speculator,
with what the era's own code differs in (docs/releases.md, "vLLM before 0.31").

- 0.25-0.27 (``VLLM_0_25``): 0.28's convention, and the speculator samples each step
  inline in ``_sample_sequential`` (no ``_sample_logits``): its walks are counted where
  a step's token is made (``observe_inline_walks``); its ``gumbel_sample`` keeps the
  temperature-applied logits in the cache (``output_processed_logits``), which its own
  rejection sampler reads as they are. So the checks and the verifiers read the logits
  each draw was handed, before temperature, once the cache is held to be exactly those
  divided by the slot's temperature (``SequentialSampler.kept_step_logits``), and
  ``vllm-rejection`` hands the release's verifier the cache as it keeps it
  (``release_cache``); it has no confidence head.
- 0.28-0.30 (``VLLM_0_28``): the speculator, its ``_sample_logits`` and its top-k path
  are 0.31's; the Gumbel noise is Triton's Philox keyed by the request's seed and
  position (``harness.upstream.vllm_keying``), the kernel calls libdevice's ``log1p``
  (given its body under the interpreter while the release is judged,
  ``interpreter_libdevice``), 0.28 has no ``is_drafting`` flag and no salt, and 0.28-0.29
  switch the confidence head with ``enable_adaptive_verification`` (0.30:
  ``use_confidence_head``, which 0.33's convention sets).

Which convention a speculator class speaks is read from its package, never from a
version table: a speculator without ``_sample_logits`` is of 0.25-0.27, a Gumbel module
without ``murmur3_hash32`` of 0.28-0.30, any other of 0.31-0.33.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.conventions import (
    BuiltSampler,
    Convention,
    OutputError,
)
from harness.plugins.walks import HeadCounts
from harness.upstream.loaders.vllm_loader import (
    GUMBEL_MODULE,
    SPECULATOR_MODULE,
    speaks_vllm_0_33,
)
from harness.upstream.vllm_convention import VLLM_0_33, VllmConvention, VllmSampler
from harness.upstream.vllm_drafter import VllmDrafter
from harness.upstream.vllm_keying import PHILOX, keying_of
from reference.verifier import DraftBlock

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs


def keywords_taken(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` called with only the keywords its signature takes: the harness's
    replay passes 0.33's ``is_drafting``, which 0.28's ``gumbel_sample`` does not take
    (it keys a draft draw as the verifier's; ``vllm_keying``)."""
    taken = inspect.signature(function).parameters

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **{k: v for k, v in kwargs.items() if k in taken})

    return call


class PhiloxEraConvention(VllmConvention):
    """vLLM 0.28-0.30's speculator: 0.33's convention, the era's names (module doc)."""

    name = "vllm-0.28"

    def build(
        self,
        sampler_class: type[Any],
        *,
        case: Case,
        inputs: CaseInputs,
        model: Any = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        built = super().build(sampler_class, case=case, inputs=inputs, model=model, out=out)
        assert isinstance(built, VllmSampler)
        built.convention = self.name
        # 0.28-0.29's switch of the confidence head (0.30 reads use_confidence_head)
        built.sampler.enable_adaptive_verification = case.confidence
        built.loaded = replace(
            built.loaded, gumbel_sample=keywords_taken(built.loaded.gumbel_sample)
        )
        return built


VLLM_0_28 = PhiloxEraConvention()


@contextmanager
def observe_inline_walks(drafter: VllmDrafter, *, gamma: int) -> Iterator[HeadCounts]:
    """Count the walks of a speculator that samples inline: a step's token is made by
    the speculator module's ``gumbel_sample`` (sampled) or the drafter's
    ``map_draft_to_target`` of the argmax (a greedy fold), each after the step's
    ``markov_embed``; the step whose embed is a multiple of ``gamma`` starts a walk."""
    counts = HeadCounts()
    walks: list[list[torch.Tensor]] = []
    module: Any = importlib.import_module(SPECULATOR_MODULE)
    sample, embed, to_target = (
        module.gumbel_sample,
        drafter.markov_embed,
        drafter.map_draft_to_target,
    )

    def step_made(tokens: torch.Tensor) -> torch.Tensor:
        counts.sampler_calls += 1
        if (counts.head_steps - 1) % gamma == 0 or not walks:
            counts.walks += 1
            walks.append([])
        walks[-1].append(tokens)
        return tokens

    def counting_embed(token_ids: torch.Tensor) -> torch.Tensor:
        counts.head_steps += 1
        return embed(token_ids)

    def greedy_step(draft_ids: torch.Tensor) -> torch.Tensor:
        return step_made(to_target(draft_ids))

    module.gumbel_sample = lambda *args, **kwargs: step_made(sample(*args, **kwargs))
    drafter.markov_embed = counting_embed  # type: ignore[method-assign]
    drafter.map_draft_to_target = greedy_step  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        module.gumbel_sample = sample
        del drafter.markov_embed, drafter.map_draft_to_target
        counts.walk_tokens = [torch.stack(walk, dim=1) for walk in walks if walk]


class SequentialSampler(VllmSampler):
    """A 0.25-0.27 speculator and the logits each of its draws was handed (module doc)."""

    handed: torch.Tensor | None = None  # [max_bs, gamma, V]: the last call's, by slot

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        cache = self.sampler.draft_logits
        if cache is None:  # a greedy fold: no draw, no cache
            super().__call__(hidden_states, input_ids)
            return
        handed = torch.full_like(cache, float("nan"))
        module: Any = importlib.import_module(SPECULATOR_MODULE)
        sample = module.gumbel_sample

        def keeping(logits: torch.Tensor, slots: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            live = slots >= 0
            step = int(kwargs["output_processed_logits_col"])
            handed[slots[live], step] = logits[live].to(handed.dtype)
            return sample(logits, slots, *args, **kwargs)

        module.gumbel_sample = keeping
        try:
            super().__call__(hidden_states, input_ids)
        finally:
            module.gumbel_sample = sample
        self.handed = handed

    def kept_step_logits(self, cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The logits each draw was handed, before temperature, once the cache is held
        to hold exactly those divided by the slot's temperature in float32 (as the
        kernel divides; a greedy slot's as they are): else ``OutputError``."""
        if self.handed is None:
            raise OutputError("no draw of the call was seen: nothing to read the cache against")
        handed = self.handed[slots]
        temperature = self.sampler.temperature[slots].view(-1, 1, 1)
        divisor = torch.where(temperature == 0, 1.0, temperature)
        tempered = (handed.float() / divisor).to(cache.dtype)
        kept = cache[slots]
        same = (tempered == kept) | (tempered.isnan() & kept.isnan())
        if not bool(same.all()):
            raise OutputError(
                "draft_logits must hold the logits each draw was handed, divided by the "
                f"slot's temperature: {int((~same).sum())} entries differ"
            )
        return handed.clone()

    def draft_block(self, rows: int) -> DraftBlock:
        """The logits each draw was handed, before temperature (``kept_step_logits``)."""
        block = super().draft_block(rows)
        return replace(
            block, step_logits=self.kept_step_logits(self.sampler.draft_logits, self.slots(rows))
        )

    def observe_walks(self) -> AbstractContextManager[HeadCounts]:
        return observe_inline_walks(self.model, gamma=self.gamma)


class SequentialEraConvention(PhiloxEraConvention):
    """vLLM 0.25-0.27's speculator (module doc)."""

    name = "vllm-0.25"
    sampler_type = SequentialSampler

    def outside_contract(self, case: Case, *, sampler_class: type[Any]) -> str | None:
        if case.confidence:
            return "vLLM 0.25-0.27's speculator has no confidence head"
        return super().outside_contract(case, sampler_class=sampler_class)


VLLM_0_25 = SequentialEraConvention()


def release_cache(step_logits: torch.Tensor, *, temperatures: torch.Tensor) -> torch.Tensor:
    """``[bs, gamma, V]``: the draft logits cache as the loaded release keeps it, from
    the kept logits before temperature and each row's temperature (1 on a greedy row):
    0.25-0.27 keep them divided by the temperature in float32, as their kernel divides
    (their ``gumbel_sample`` takes ``output_processed_logits``), later releases as they
    are."""
    gumbel = importlib.import_module(GUMBEL_MODULE)
    if "output_processed_logits" not in inspect.signature(gumbel.gumbel_sample).parameters:
        return step_logits
    return (step_logits.float() / temperatures.float().view(-1, 1, 1)).to(step_logits.dtype)


def vllm_convention_of(sampler_class: type[Any]) -> Convention:
    """The convention of the package's ``DSparkSpeculator`` (or a subclass of it), read
    from the package it was imported from (module doc)."""
    if not hasattr(sampler_class, "_sample_logits"):
        return VLLM_0_25
    gumbel = importlib.import_module(GUMBEL_MODULE)
    return VLLM_0_28 if keying_of(gumbel) is PHILOX else VLLM_0_33


def speaks_vllm_0_25(sampler_class: type[Any]) -> bool:
    """The package's speculator (or a subclass) of a 0.25-0.27 package (the registry's
    predicate, ``harness.upstream.releases.eras``)."""
    return speaks_vllm_0_33(sampler_class) and vllm_convention_of(sampler_class) is VLLM_0_25


def speaks_vllm_0_28(sampler_class: type[Any]) -> bool:
    """The package's speculator (or a subclass) of a 0.28-0.30 package."""
    return speaks_vllm_0_33(sampler_class) and vllm_convention_of(sampler_class) is VLLM_0_28


def speaks_vllm_0_31(sampler_class: type[Any]) -> bool:
    """The package's speculator (or a subclass) of a 0.31-0.33 package (0.34's walks
    its Markov chain through ``_markov_step``)."""
    return (
        speaks_vllm_0_33(sampler_class)
        and vllm_convention_of(sampler_class) is VLLM_0_33
        and not hasattr(sampler_class, "_markov_step")
    )
