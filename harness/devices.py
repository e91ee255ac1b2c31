"""Device and thread plumbing every measurement shares: one sync, one thread-count scope."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so clocks read real time."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[int]:
    """Run the block with ``threads`` intra-op threads (``None``: leave as is); restore the
    previous count on exit. Yields the count in force."""
    previous = torch.get_num_threads()
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)
