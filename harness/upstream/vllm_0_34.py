"""vLLM 0.34's calling convention: 0.33's speculator seam, with what 0.34's code adds
(docs/releases.md, "vLLM 0.34").

- The draft logits cache is the package's own ``DraftLogitsCache`` in its replicated
  form (``row_mapping`` ``None``: one process has no tensor parallelism, so
  ``_sample_sequential_sharded``, which runs only when ``load_model`` finds one, is not
  run): the speculator's ``_sample_logits`` writes its ``values``, and
  ``vllm-rejection`` hands the release's ``rejection_sample`` one holding the kept
  logits (``vllm_loader.replicated_cache``).
- ``_fuse_markov_bias``: ``load_model`` sets it where the server keeps a cache and the
  drafter has no reduced vocabulary, watermarker, acceptance estimator or output
  transform; then ``_sample_markov_chain`` hands the bias to ``_sample_logits``, whose
  Gumbel kernel adds it. ``build`` sets it as ``load_model`` would (``load_model``
  itself loads a real model); the ``unfused`` path (``vllm_loader.VllmPath``) sets it
  off, as ``load_model`` does for a drafter it cannot fuse, and the bias is added
  before the kernel. Both are paths of the same release.
- ``_markov_step``: a model with ``has_recurrent_markov_head`` walks its Markov head
  with ``markov_step(prev, draft_hidden, state)``, which returns the step's embedding
  (what ``markov_bias`` projects) and the state carried to the next step, ``None`` at
  the start of a block. ``RecurrentDrafter`` carries the case's rnn head (embedding
  ``tanh(o)``, its gated recurrence the state) and the gated head (embedding ``g * e``,
  no state) through that hook, by the head's own ``step_embedding``; with a confidence
  head those cases are outside the contract: the speculator hands ``compute_confidence``
  the step's embedding, where the case's probe reads ``W1[prev]``.

Its noise is keyed as 0.33's (``spec_step_seed``, the salt): the plumbing and the key
check are 0.33's, read from the same functions of 0.34's own Gumbel module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.conventions import BuiltSampler, read_tensor
from harness.upstream.loaders.vllm_loader import (
    FUSED_BIAS_ATTRIBUTE,
    replicated_cache,
    speaks_vllm_0_33,
)
from harness.upstream.vllm_convention import (
    VllmConvention,
    VllmSampler,
    outside_contract,
)
from harness.upstream.vllm_drafter import VllmDrafter

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs

HEADS = ("vanilla", "gated", "rnn")  # what markov_embed and markov_step carry


class RecurrentDrafter(VllmDrafter):
    """vLLM's model hooks over the case's toy drafter, with 0.34's ``markov_step`` for
    a head that reads the step's hidden state (module doc)."""

    def __init__(self, *, model: Any, confidence_fn: Any) -> None:
        super().__init__(model=model, confidence_fn=confidence_fn)
        self.has_recurrent_markov_head = self.head.needs_hidden_states

    def markov_step(
        self, prev: torch.Tensor, draft_hidden: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if state is None:  # the start of a block: the head's own initial state
            state = self.head.initial_state(prev.shape[0], like=draft_hidden)
        return self.head.step_embedding(self.markov_embed(prev), draft_hidden, state)


class MarkovChainSampler(VllmSampler):
    """0.34's speculator: its cache a ``DraftLogitsCache`` (module doc)."""

    convention = "vllm-0.34"

    def cache(self) -> torch.Tensor | None:
        return read_tensor(self.sampler.draft_logits, "values")


class MarkovChainConvention(VllmConvention):
    """Builds 0.34's speculator as its model runner and ``load_model`` leave it."""

    name = "vllm-0.34"
    sampler_type = MarkovChainSampler
    drafter_type = RecurrentDrafter

    def outside_contract(self, case: Case, *, sampler_class: type[Any]) -> str | None:
        if case.head_kind != "vanilla" and case.confidence:
            return (
                f"vLLM 0.34's confidence head reads the {case.head_kind} head's step "
                "embedding (markov_step's), the case's probe W1[prev]: not expressible"
            )
        return outside_contract(case, sampler_class=sampler_class, heads=HEADS)

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
        assert isinstance(built, MarkovChainSampler)
        speculator = built.sampler
        tensor = speculator.draft_logits
        if tensor is not None:  # replicated: every request's row, indexed by its slot
            speculator.draft_logits = replicated_cache(tensor)
        speculator._sharded_sequential_comm = None  # no tensor parallelism in one process
        # what load_model sets: the bias fused where nothing stands between it and the kernel
        speculator._fuse_markov_bias = getattr(sampler_class, FUSED_BIAS_ATTRIBUTE, True) and (
            tensor is not None
            and speculator._d2t_scatter_index is None
            and speculator.draft_watermarker is None
            and speculator.acceptance_estimator is None
            and not hasattr(built.model, "apply_output_logit_transform")
        )
        return built


VLLM_0_34 = MarkovChainConvention()


def speaks_vllm_0_34(sampler_class: type[Any]) -> bool:
    """The package's speculator (or a subclass) of a 0.34 package: one that walks its
    Markov chain through ``_markov_step`` (the registry's predicate)."""
    return speaks_vllm_0_33(sampler_class) and hasattr(sampler_class, "_markov_step")
