"""Memory estimates, checked before anything is allocated.

A case, a statistical-oracle run and a sweep point each get an upper estimate of the
bytes they hold at their peak, from their shapes alone. An estimate above the limit
is refused (``MemoryLimitError``, exit status 2) with the estimate in the message.
The default limit is ``DEFAULT_FRACTION`` of the memory free now (the host's, or the
CUDA device's for CUDA runs); ``--max-memory`` (``RunOptions.max_memory_bytes``)
sets another.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # --max-memory and the estimates are read without torch
    from harness.case import Case

DEFAULT_FRACTION = 0.5  # of the free memory: leaves room for the rest of the machine
FLOAT_BYTES = 4  # float32: corrected logits, noise and step logits are float32
LIVE_LOGIT_TENSORS = 20  # [bs, gamma, V] float32 tensors alive at a case run's peak (15-21 seen)
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class MemoryLimitError(ValueError):
    """A run whose memory estimate is above the limit."""


def parse_size(text: str) -> int:
    """``"8G"``, ``"512M"``, ``"1.5G"``, ``"1000000"`` -> bytes (binary units)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?\s*", text.upper())
    if match is None:
        raise ValueError(f"expected a size such as 8G, 512M or 1000000 (bytes), got {text!r}")
    value = float(match.group(1)) * UNITS[match.group(2)]
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"expected a positive size, got {text!r}")
    return int(value)


def format_size(size: float) -> str:
    """Bytes in binary units, one decimal: ``15.2 GiB``."""
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit:
            return f"{size / unit:.1f} {name}"
    return f"{int(size)} B"


def free_bytes(device: str) -> int:
    """Memory free now on the device (CUDA) or the host (``MemAvailable``)."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info(torch.device(device))
            return int(free)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def limit_in_force(device: str, *, max_memory_bytes: int | None) -> tuple[int, str]:
    """The limit in force and where it comes from (``max_memory_bytes``, else the default
    fraction of the free memory)."""
    if max_memory_bytes is not None:
        return max_memory_bytes, "--max-memory"
    free = free_bytes(device)
    where = "the device" if device.startswith("cuda") else "the machine"
    return int(free * DEFAULT_FRACTION), f"{DEFAULT_FRACTION:.0%} of {where}'s free memory"


def check_fits(estimate: int, *, what: str, device: str, max_memory_bytes: int | None) -> None:
    """Refuse ``what`` if its estimate is above the limit."""
    limit, source = limit_in_force(device, max_memory_bytes=max_memory_bytes)
    if estimate > limit:
        raise MemoryLimitError(
            f"{what} needs an estimated {format_size(estimate)}, above the limit of "
            f"{format_size(limit)} ({source}); raise it with --max-memory SIZE (e.g. 64G) "
            "or choose smaller shapes"
        )


def sampler_call_bytes(
    *, bs: int, max_bs: int, gamma: int, vocab: int, hidden: int, rank: int, dtype_bytes: int
) -> int:
    """Peak bytes of one observed sampler call with its model: weights (lm_head, the
    heads' embedding, projection and widest extra layer), static buffers over
    ``max_bs`` and the live ``[bs, gamma, V]`` tensors (base and corrected logits,
    recorded noise of two walks, result copies)."""
    weights = vocab * hidden + 2 * vocab * rank + (2 * rank + hidden) * 3 * rank
    buffers = max_bs * gamma * (vocab + 2) + max_bs * vocab  # corrected_out, out, noise
    live = LIVE_LOGIT_TENSORS * bs * gamma * vocab
    hidden_rows = bs * (gamma + 1) * hidden
    return dtype_bytes * (weights + hidden_rows) + FLOAT_BYTES * (buffers + live)


def stats_run_bytes(*, rows: int, gamma: int, vocab: int, m: int, hidden: int, rank: int) -> int:
    """Peak bytes of a statistical-oracle run: one sampler call over every row, plus the
    exact and empirical joints over ``V^m`` cells (float64)."""
    call = sampler_call_bytes(
        bs=rows, max_bs=rows, gamma=gamma, vocab=vocab, hidden=hidden, rank=rank, dtype_bytes=4
    )
    return call + 4 * 8 * vocab**m


def case_bytes(case: Case) -> int:
    """Peak bytes of one case run (its inputs, one implementation at a time); a life
    replays up to ``max_bs`` rows."""
    return sampler_call_bytes(
        bs=case.max_bs if case.replays else case.bs,
        max_bs=case.max_bs,
        gamma=case.gamma,
        vocab=case.vocab_size + case.vocab_padding,
        hidden=case.hidden_size,
        rank=case.markov_rank,
        dtype_bytes=case.torch_dtype.itemsize,
    )


def check_cases_fit(cases: list[Case], *, max_memory_bytes: int | None) -> None:
    """Refuse the first case whose estimate is above the limit, before any case runs."""
    for case in cases:
        check_fits(
            case_bytes(case),
            what=f"case {case.label()}",
            device=case.device,
            max_memory_bytes=max_memory_bytes,
        )
