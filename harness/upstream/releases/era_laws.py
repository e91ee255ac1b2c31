"""Where each era's two laws of a request live in its wheel (``ReleaseEra.laws``): its
server's non-speculative sampler and the target its speculative verify reads, held
against each other on the release's row (``harness.releases.laws``)."""

from __future__ import annotations

from harness.upstream.releases.era_parts import ServerLaws

_SAMPLER_LAW = "sglang.srt.layers.sampler.top_k_top_p_min_p_sampling_from_probs_torch"
_ACCEPT_BRANCH = "dspark_accept.py _accept_sampling_core"
_VERIFY_TARGETS = "sglang.srt.speculative.dflash_utils"
# sglang 0.5.16-0.5.21: the DFlash verify's target builder, which DSpark's accept calls
DFLASH_LAWS = ServerLaws(
    sampler=_SAMPLER_LAW,
    verify_target=f"{_VERIFY_TARGETS}.build_dflash_verify_target_probs",
    branch=_ACCEPT_BRANCH,
)
# sglang 0.5.22-0.5.23: the speculative verify's own target builder
SPECULATIVE_LAWS = ServerLaws(
    sampler=_SAMPLER_LAW,
    verify_target=f"{_VERIFY_TARGETS}.build_speculative_verify_target_probs",
    branch=_ACCEPT_BRANCH,
)
_VLLM_SAMPLER = "vllm.v1.worker.gpu.sample.sampler.Sampler"
# every vLLM era: the verify hands rejection_sample what its sampler's
# apply_sampling_params returns, for every batch (harness.upstream.vllm_laws)
VLLM_LAWS = ServerLaws(
    sampler=f"{_VLLM_SAMPLER}.sample",
    verify_target=f"{_VLLM_SAMPLER}.apply_sampling_params",
    branch="rejection_sampler.py RejectionSampler._verify, every batch",
    temperatures_otherwise=False,
)
