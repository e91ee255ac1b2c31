"""An sglang release's two laws of a request, each from its wheel, held against each other.

Speculative decoding is lossless when a request's committed tokens follow the law its
own server samples from without speculation (docs/sampling-params.md). A rejection
verifier commits tokens from the target law it is handed, whatever the drafter did; so
the release's verify target must be that law. ``compare_laws`` holds the two against
each other on every row of each batch of the parameter grid, both run from the
release's files (``harness.upstream.loaders.wheel_functions``, nothing of the package
imported):

- the server's law: the weights the release's non-speculative sampler
  (``top_k_top_p_min_p_sampling_from_probs_torch``, its CPU path) hands
  ``torch.multinomial`` for ``softmax(logits / T)``, as its ``Sampler`` hands it;
- the verify target: for a batch that needs top-k or top-p sampling, what the release's
  ``build_*_verify_target_probs`` returns, the branch its DSpark accept takes
  (``_accept_sampling_core``); for any other batch ``softmax(logits / T)``, which is all
  that branch (``SoftmaxTemp``, and 0.5.23's block-wise rejection) reads.

The batches are each parameter set of the grid alone, then all of them mixed in one
batch, as sglang stages them: ``top_k`` -1 as ``TOP_K_ALL``, a greedy request at
temperature 1 with ``top_k`` 1, and the batch's ``need_*_sampling`` flags. Every set
runs on every row of the logits it is given (float32): a release row gives the oracle's
far target, one context a row (``harness.releases.laws``). Rows are held against each
other as ``harness.upstream.law_comparison.compare_rows`` holds them. A branch whose
function cannot run on a CPU (0.5.16-0.5.17 call sgl_kernel's top-p renormalisation,
``None`` off CUDA) is not run, and said so.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.case import TOP_K_ALL  # sglang's staged top-k for none (sampling_params.py)
from harness.upstream.law_comparison import (
    LawComparison,
    ParameterSet,
    SetComparison,
    compare_rows,
)
from harness.upstream.loaders.wheel_functions import UnresolvedName, WheelFunctions
from harness.upstream.releases.era_parts import ServerLaws


def _off_this_platform() -> bool:
    return False  # the CPU this runs on is none of CUDA, HIP, NPU and MUSA


# Names the release's files bind by code the loader does not run, as that code binds them
# on a CPU: the renormalisation kernels are None off CUDA, HIP, NPU and MUSA (every release
# since 0.5.16), and the platform probes say no.
CPU_ANSWERS: dict[str, Any] = {
    "top_k_renorm_prob": None,
    "top_p_renorm_prob": None,
    **{probe: _off_this_platform for probe in ("is_cuda", "is_hip", "is_npu", "is_musa")},
}


def _seeded_path(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(
        "the sampler's seeded path (multinomial_with_seed) ran; the harness stages no "
        "per-request sampling seed"
    )


# The sampler's own answers: its seeded draw (a Triton hash kernel) is bound, never called.
SAMPLER_ANSWERS: dict[str, Any] = {**CPU_ANSWERS, "multinomial_with_seed": _seeded_path}


@dataclass(frozen=True)
class StagedBatch:
    """The fields of sglang's ``SamplingBatchInfo`` that its samplers read, as it stages
    one request per row (``srt/sampling/sampling_batch_info.py``)."""

    temperatures: torch.Tensor  # [bs, 1] float32
    top_ks: torch.Tensor  # [bs] int32, TOP_K_ALL for none
    top_ps: torch.Tensor  # [bs] float32
    min_ps: torch.Tensor  # [bs] float32
    need_top_k_sampling: bool
    need_top_p_sampling: bool
    need_min_p_sampling: bool

    @classmethod
    def of(cls, sets: Sequence[ParameterSet]) -> StagedBatch:
        top_ks = [s.top_k or TOP_K_ALL for s in sets]
        return cls(
            # a greedy request is staged at temperature 1 with top_k 1 (SamplingParams)
            temperatures=torch.tensor([[1.0 if s.greedy else s.temperature] for s in sets]),
            top_ks=torch.tensor(top_ks, dtype=torch.int32),
            top_ps=torch.tensor([s.top_p for s in sets]),
            min_ps=torch.tensor([s.min_p for s in sets]),
            need_top_k_sampling=any(k != TOP_K_ALL for k in top_ks),
            need_top_p_sampling=any(s.top_p != 1.0 for s in sets),
            need_min_p_sampling=any(s.min_p > 0 for s in sets),
        )


def compare_laws(
    laws: ServerLaws, *, root: Path, sets: Sequence[ParameterSet], logits: torch.Tensor
) -> LawComparison:
    """Each of ``sets`` alone, then all mixed, each on every row of ``logits`` ``[n, V]``
    (one context a row): the release's verify target against its sampler's law, both run
    from the files under ``root``. ``UnresolvedName`` where a function cannot be loaded
    (one line)."""
    loaded = WheelFunctions(root, package="sglang", answers=CPU_ANSWERS)
    verify = loaded.function(*_split(laws.verify_target))
    recorder = MultinomialRecorder()
    sampling = WheelFunctions(
        root, package="sglang", answers={**SAMPLER_ANSWERS, "torch": recorder}
    )
    sampler = sampling.function(*_split(laws.sampler))
    logits = logits.to(torch.float32)
    sets = tuple(sets)
    compared: list[SetComparison] = []
    contexts = logits.shape[0]
    for batch, members in [*(("alone", (s,)) for s in sets), ("mixed", sets)]:
        rows = [s for s in members for _ in range(contexts)]
        staged = StagedBatch.of(rows)
        batch_logits = logits.repeat(len(members), 1)
        server = recorder.law(sampler, staged=staged, logits=batch_logits)
        try:
            target = _verify_target(
                verify,
                staged=staged,
                logits=batch_logits,
                branches=laws.temperatures_otherwise,
            )
        except TypeError as error:  # a branch that calls a CUDA-only kernel, None here
            if "NoneType" not in str(error):
                raise
            why = (
                "its target builder calls a renormalisation kernel the release binds on "
                f"CUDA only, None on a CPU ({error})"
            )
            compared += [SetComparison(batch, m.label, contexts, not_run=why) for m in members]
            continue
        for index, member in enumerate(members):
            at = slice(index * contexts, (index + 1) * contexts)
            compared.append(compare_rows(batch, member, target=target[at], server=server[at]))
    return LawComparison(laws=laws, sets=tuple(compared))


def _split(qualified: str) -> tuple[str, str]:
    module, _, name = qualified.rpartition(".")
    return module, name


def _verify_target(
    verify: Any, *, staged: StagedBatch, logits: torch.Tensor, branches: bool
) -> torch.Tensor:
    bs = logits.shape[0]
    if not branches or staged.need_top_k_sampling or staged.need_top_p_sampling:
        built = verify(next_token_logits=logits, sampling_info=staged, draft_token_num=1, bs=bs)
        return built.reshape(bs, -1)
    return torch.softmax(logits / staged.temperatures, dim=-1)  # the temperatures-only branch


class MultinomialRecorder(types.ModuleType):
    """``torch`` for the release's sampler function: every name is torch's, but
    ``multinomial`` records the weights it is handed and returns every rank in order, so
    the function's own gather maps each rank back to its token: its law, read exactly."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.weights: list[torch.Tensor] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def multinomial(self, weights: torch.Tensor, num_samples: int = 1, **_: Any) -> torch.Tensor:
        del num_samples
        self.weights.append(weights.clone())
        n, width = weights.shape
        return torch.arange(width, device=weights.device).expand(n, width)

    def law(self, sampler: Any, *, staged: StagedBatch, logits: torch.Tensor) -> torch.Tensor:
        """``[bs, V]``: the weights the sampler draws each row's token from, renormalised."""
        self.weights.clear()
        probs = torch.softmax(logits / staged.temperatures, dim=-1)
        tokens = sampler(
            probs.clone(),
            staged.top_ks,
            staged.top_ps,
            staged.min_ps,
            staged.need_min_p_sampling,
            None,  # no per-request seed: multinomial
            None,
        )
        (ranked,) = self.weights
        order = tokens.reshape(ranked.shape).long()  # the token at each rank
        law = torch.zeros_like(probs).scatter_(-1, order, ranked)
        return law / law.sum(-1, keepdim=True)


__all__ = ["LawComparison", "SetComparison", "StagedBatch", "UnresolvedName", "compare_laws"]
