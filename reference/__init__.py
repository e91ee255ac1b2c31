"""Ground truth shared by every sampler: heads, step samplers, the toy drafter, oracles.

Every piece of math lives here once; ``legacy`` and ``fixed`` import it, so a
difference between them is the bug and nothing else.
"""

from reference.block import BlockInputs, prepare_block, previous_tokens
from reference.confidence import LinearProbeConfidence
from reference.draft_model import (
    LmHead,
    PrecomputedBaseLogits,
    ToyDraftModel,
    drop_anchor_row,
    make_toy_draft_model,
    query_rows_per_request,
)
from reference.heads import (
    HEAD_KINDS,
    GatedMarkovHead,
    MarkovHead,
    RnnMarkovHead,
    VanillaMarkovHead,
    make_markov_head,
)
from reference.oracle import ReferenceDraftSampler, teacher_forced_logits
from reference.request_law import Truncation, top_k_mask, truncated_probs, truncation_mask
from reference.sampler_base import DraftSamplerBase
from reference.sampling_params import (
    MIN_TEMPERATURE,
    NO_TOP_K,
    SamplingInfo,
    check_sampling_info,
    stage_sampling_params,
)
from reference.step_samplers import (
    exponential_race,
    exponential_race_torch,
    folded_race_sampler,
    greedy_step,
)

__all__ = [
    "HEAD_KINDS",
    "MIN_TEMPERATURE",
    "NO_TOP_K",
    "BlockInputs",
    "DraftSamplerBase",
    "GatedMarkovHead",
    "LinearProbeConfidence",
    "LmHead",
    "MarkovHead",
    "PrecomputedBaseLogits",
    "ReferenceDraftSampler",
    "RnnMarkovHead",
    "SamplingInfo",
    "ToyDraftModel",
    "Truncation",
    "VanillaMarkovHead",
    "check_sampling_info",
    "drop_anchor_row",
    "exponential_race",
    "exponential_race_torch",
    "folded_race_sampler",
    "greedy_step",
    "make_markov_head",
    "make_toy_draft_model",
    "prepare_block",
    "previous_tokens",
    "query_rows_per_request",
    "stage_sampling_params",
    "teacher_forced_logits",
    "top_k_mask",
    "truncated_probs",
    "truncation_mask",
]
