"""Pristine inputs around each implementation: an implementation shares the case's inputs
(hidden states, ids, model parameters, sampling parameters) with every implementation
that runs after it, so a digest of every shared input tensor is taken before and after
a run (a difference is that implementation's failure, and the caller rebuilds the
inputs). The process it shares is restored by ``harness.world``; see ``docs/trust.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import torch

from harness.case import CaseInputs


def _tensor_bytes_digest(tensor: torch.Tensor) -> str:
    data = tensor.detach()
    if data.is_inference():  # inference tensors cannot be viewed as bytes in place
        data = data.clone()
    data = data.cpu().contiguous().reshape(-1)  # 1-d: a 0-d tensor has no byte view
    raw = data.to(torch.uint8) if data.dtype == torch.bool else data.view(torch.uint8)
    digest = hashlib.sha1(f"{tensor.dtype}:{tuple(tensor.shape)}:".encode(), usedforsecurity=False)
    digest.update(raw.numpy().data)  # the buffer itself, no copy; sha1: fastest stdlib hash
    return digest.hexdigest()


def named_input_tensors(inputs: CaseInputs) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor an implementation is handed or can reach, with a readable name."""
    yield "hidden_states", inputs.hidden_states
    yield "input_ids", inputs.input_ids
    for name, tensor in inputs.model.state_dict(keep_vars=True).items():
        yield f"model.{name}", tensor
    for name, value in sorted(vars(inputs.sampling_info).items()):
        if isinstance(value, torch.Tensor):
            yield f"sampling_info.{name}", value
    if inputs.confidence_fn is not None:
        for name, tensor in inputs.confidence_fn.state_dict(keep_vars=True).items():
            yield f"confidence_fn.{name}", tensor


def input_digests(inputs: CaseInputs) -> dict[str, str]:
    """A digest (dtype, shape and bytes) of every shared input tensor, by name."""
    return {name: _tensor_bytes_digest(tensor) for name, tensor in named_input_tensors(inputs)}


def changed_inputs(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Names of inputs whose digest changed, appeared or disappeared, sorted."""
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
