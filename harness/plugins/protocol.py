"""The draft-sampler contract, written down as ``typing.Protocol`` classes.

These are the shapes the harness relies on and nothing more: a class that
satisfies ``DraftSamplerClass`` can be judged unchanged, whichever of the two
calling conventions it speaks (ours: ``fused_greedy=`` as an argument; the
server's: the fused switch read from ``SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV`` in
the constructor and a required ``tp_sync``). ``BlockSamplerFunction`` is the
contract of a functional plug-in (a sampler that is a function, not this class).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from reference.heads import MarkovHead
from reference.sampling_params import SamplingInfo

T = TypeVar("T")


@runtime_checkable
class DraftSampler(Protocol):
    """One constructed sampler: static buffers, staging and the in-graph call.

    ``out[max_bs*gamma]`` int64; ``corrected_out[max_bs*gamma, V]`` with folded
    sampling (else ``None``); ``confidence_out[max_bs, gamma]`` with a confidence
    function (else ``None``). A call writes the first ``bs`` requests' rows only.
    """

    out: torch.Tensor

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None: ...

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None: ...


class ConfidenceFunction(Protocol):
    """Confidence per draft token, ``[bs, gamma]`` float32.

    Callable positionally ``(draft_hidden, anchor_tokens, draft_tokens)`` and by the
    server's keywords, which add ``confidence_tap`` (the drafter's auxiliary output).
    """

    def __call__(
        self,
        draft_hidden: torch.Tensor,
        anchor_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        confidence_tap: torch.Tensor | None = None,
    ) -> torch.Tensor: ...


class TensorParallelSync(Protocol):
    """The server's cross-rank agreement hook: ``sync(site, values)`` returns the
    values every rank uses (rank 0's). On one rank it is the identity."""

    def sync(self, site: Any, values: T) -> T: ...


class DraftSamplerClass(Protocol):
    """What constructs a ``DraftSampler``. Every keyword past ``device`` is optional
    for the sampler: the harness passes only the ones its constructor accepts."""

    def __call__(
        self,
        *,
        model: Any,
        gamma: int,
        max_bs: int,
        device: torch.device,
        confidence_fn: ConfidenceFunction | None = None,
        out: torch.Tensor | None = None,
        folded_sampling: bool = True,
        fused_greedy: bool = False,
        tp_sync: TensorParallelSync = ...,
    ) -> DraftSampler: ...


class BlockSamplerFunction(Protocol):
    """A functional plug-in: one proposal of ``gamma`` draft tokens per request.

    Inputs (keyword-only): ``base_logits[bs, gamma, V]`` (model dtype), the anchor
    tokens ``[bs]`` int64, the head's hidden states ``[bs, gamma, H]``, the staged
    ``temperatures[bs]`` float32 and ``greedy_mask[bs]`` bool, the Markov head whose
    step bias conditions step ``k`` on token ``k-1``, and ``folded_sampling``: ``False``
    in a greedy fold, where every row is greedy (the mask says so) and no noise may be
    drawn. Returns ``(tokens[bs, gamma] int64, corrected[bs, gamma, V])``:
    ``corrected[:, k]`` must be the logits token ``k`` was drawn from (``None`` is
    allowed only in a greedy fold).
    """

    def __call__(
        self,
        *,
        base_logits: torch.Tensor,
        anchor_tokens: torch.Tensor,
        hidden_states: torch.Tensor,
        temperatures: torch.Tensor,
        greedy_mask: torch.Tensor,
        markov_head: MarkovHead,
        folded_sampling: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...
