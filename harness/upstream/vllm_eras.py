"""vLLM's DSpark eras before 0.31, each driven as 0.33's convention drives its speculator,
with what the era's own code differs in (docs/releases.md, "vLLM before 0.31").

- 0.28-0.30 (``VLLM_0_28``): the speculator, its ``_sample_logits`` and its top-k path
  are 0.31's; the Gumbel noise is Triton's Philox keyed by the request's seed and
  position (``harness.upstream.vllm_keying``), the kernel calls libdevice's ``log1p``
  (given its body under the interpreter while the release is judged,
  ``interpreter_libdevice``), 0.28 has no ``is_drafting`` flag and no salt, and 0.28-0.29
  switch the confidence head with ``enable_adaptive_verification`` (0.30:
  ``use_confidence_head``, which 0.33's convention sets).

Which convention a speculator class speaks is read from its package, never from a
version table: a Gumbel module without ``murmur3_hash32`` is of 0.28-0.30, any other of
0.31-0.33. 0.25-0.27 are not driven (``SEQUENTIAL_ERA_REASON``): the release sweep
says why and loads none of them.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.conventions import BuiltSampler, Convention, ConventionName
from harness.upstream.vllm_convention import VLLM_0_33, VllmConvention, VllmSampler
from harness.upstream.vllm_keying import PHILOX, keying_of
from harness.upstream.vllm_loader import GUMBEL_MODULE

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

    name = ConventionName.VLLM_0_28

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


def vllm_convention_of(sampler_class: type[Any]) -> Convention:
    """The convention of the package's ``DSparkSpeculator`` (or a subclass of it), read
    from the package it was imported from (module doc)."""
    del sampler_class  # one package a process: its Gumbel module says the era
    gumbel = importlib.import_module(GUMBEL_MODULE)
    return VLLM_0_28 if keying_of(gumbel) is PHILOX else VLLM_0_33
