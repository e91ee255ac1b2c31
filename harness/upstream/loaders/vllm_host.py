"""A vLLM release's pinned host buffers on a CPU.

vLLM keeps its per-slot states (``RequestState``'s, its sampler's ``SamplingStates``) in
``gpu/buffer_utils.py``'s ``UvaBuffer``: host memory allocated pinned, with a device view
of it (unified virtual addressing). A CPU build of torch has no pinned allocator, so
``host_memory`` stands in for the allocation alone: plain host memory whose device view
is the memory itself, which is what unified addressing is on a CPU, and no pinned host
copy where vLLM asks whether to pin. Everything around it (``UvaBackedTensor``'s pool,
``StagedWriteTensor``'s staged writes and their Triton kernel) is the release's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

BUFFERS = "vllm.v1.worker.gpu.buffer_utils"
TORCH_UTILS = "vllm.utils.torch_utils"


def _host_uva(release: type) -> type:
    """The release's ``UvaBuffer`` on host memory: the same fields (``cpu``, ``np`` and
    the device view, an attribute ``uva`` before 0.30 and a method after), the view the
    memory itself."""
    viewed_by_method = callable(getattr(release, "uva", None))

    class HostUvaBuffer(release):
        def __init__(self, size: Any, dtype: torch.dtype) -> None:  # no pinned allocation
            self.cpu = torch.zeros(size, dtype=dtype)
            self.np = self.cpu.numpy()
            if viewed_by_method:
                self._uva = self.cpu
            else:
                self.uva = self.cpu

    return HostUvaBuffer


def _no() -> bool:
    return False


@contextmanager
def stood_in(answers: Sequence[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(module, name, answer)``: ``module.name`` is ``answer`` while the block
    runs, and what it was after it."""
    saved = [(module, name, getattr(module, name)) for module, name, _ in answers]
    for module, name, answer in answers:
        setattr(module, name, answer)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@contextmanager
def host_memory() -> Iterator[None]:
    """The release's pinned buffers on host memory while the block runs (the module
    docstring says why), put back as they were after it."""
    buffers = importlib.import_module(BUFFERS)
    torch_utils = importlib.import_module(TORCH_UTILS)
    with stood_in(
        [
            (buffers, "UvaBuffer", _host_uva(buffers.UvaBuffer)),
            # whether to pin a host copy: a constant until 0.31, asked of a function from 0.32
            *(
                (torch_utils, name, answer)
                for name, answer in (("PIN_MEMORY", False), ("is_pin_memory_available", _no))
                if name in vars(torch_utils)
            ),
        ]
    ):
        yield


__all__ = ["host_memory", "stood_in"]
