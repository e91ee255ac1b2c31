"""The step kernel's achieved memory bandwidth against the device's peak.

- **Step kernel** (``kernel_figure``): ``exponential_race_triton`` (the two Triton
  kernels of one step and their small allocations) at ``V = 129280``, ``bs = 64``.
  ``triton.testing.do_bench`` gives the time with the Python launch path (its default
  L2 flush between runs); the *device time* comes from one CUDA graph holding the call
  over several distinct input buffers whose total exceeds four times the L2 cache, so
  launch overhead is gone and no call reads another's inputs from L2. Achieved
  bandwidth = bytes moved (read logits and noise, write and re-read the per-tile
  partials, read the per-row parameters, write the tokens) / device time.
- **Peak** (``peak_bandwidth``): the datasheet figure from ``DATASHEET_PEAK_BYTES_PER_S``
  (keyed by the device name, each with its source), the figure the device reports
  (memory clock x bus width, where torch exposes both) and the practical peak measured
  here as a 1 GiB device-to-device copy (2 GiB moved), timed like the kernel.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.case import DTYPES
from harness.gpu.clocks import graph_device_ms
from harness.gpu.graphs import require_cuda
from harness.gpu.shapes import KERNEL_BS, KERNEL_VOCAB

NOISE_BYTES = 4  # the noise buffer is float32 whatever the logits dtype
TOKEN_BYTES = 8  # int64 token ids
ROW_PARAM_BYTES = 4 + 1  # float32 temperature + bool greedy flag per row
TILE_PARTIAL_BYTES = 5 * 4  # per row and tile: max, best score, index, first NaN, first +inf
L2_MULTIPLE = 4  # the rotated inputs of one timed graph exceed this many L2 caches
COPY_BYTES = 1 << 30  # the measured-peak copy: 1 GiB read + 1 GiB written
GB = 1e9

# Peak DRAM bandwidth in bytes/s, keyed by a substring of torch.cuda.get_device_name();
# the first match wins, so the more specific names come first. Source: NVIDIA datasheets.
DATASHEET_PEAK_BYTES_PER_S: tuple[tuple[str, float, str], ...] = (
    ("H200", 4.8e12, "NVIDIA H200 datasheet: 4.8 TB/s HBM3e (H200 SXM and H200 NVL)"),
    ("H100 NVL", 3.9e12, "NVIDIA H100 datasheet: 3.9 TB/s (H100 NVL)"),
    ("H100 PCIe", 2.0e12, "NVIDIA H100 datasheet: 2 TB/s (H100 PCIe)"),
    ("H100", 3.35e12, "NVIDIA H100 datasheet: 3.35 TB/s (H100 SXM)"),
    ("A100-SXM4-80GB", 2.039e12, "NVIDIA A100 datasheet: 2,039 GB/s (A100 80GB SXM)"),
    ("A100 80GB PCIe", 1.935e12, "NVIDIA A100 datasheet: 1,935 GB/s (A100 80GB PCIe)"),
    ("A100", 1.555e12, "NVIDIA A100 datasheet: 1,555 GB/s (A100 40GB)"),
    ("B200", 8.0e12, "NVIDIA DGX B200 datasheet: 8 TB/s per GPU"),
    ("L40", 8.64e11, "NVIDIA L40 / L40S datasheets: 864 GB/s"),
    ("L4", 3.0e11, "NVIDIA L4 datasheet: 300 GB/s"),
)


@dataclass(frozen=True)
class KernelBytes:
    """Bytes one ``exponential_race_triton`` call reads and writes, by what they are."""

    logits: int
    noise: int
    row_params: int
    tile_partials: int  # written by the tiles kernel and read again by the combine
    tokens: int

    @property
    def compulsory(self) -> int:
        """What any race must move: read logits, noise and row parameters, write tokens."""
        return self.logits + self.noise + self.row_params + self.tokens

    @property
    def moved(self) -> int:
        """What the two kernels move: the compulsory bytes plus the partials, twice."""
        return self.compulsory + 2 * self.tile_partials


def race_kernel_bytes(*, bs: int, vocab_size: int, dtype: str) -> KernelBytes:
    """The byte model of one step: ``bs`` rows of ``vocab_size`` logits in ``dtype``."""
    from reference.triton_race import BLOCK_V

    tiles = math.ceil(vocab_size / BLOCK_V)
    element = DTYPES[dtype].itemsize
    return KernelBytes(
        logits=bs * vocab_size * element,
        noise=bs * vocab_size * NOISE_BYTES,
        row_params=bs * ROW_PARAM_BYTES,
        tile_partials=bs * tiles * TILE_PARTIAL_BYTES,
        tokens=bs * TOKEN_BYTES,
    )


def datasheet_peak(device_name: str) -> tuple[float, str] | None:
    """``(bytes/s, source)`` of the first table entry whose key is in the device name."""
    for key, peak, source in DATASHEET_PEAK_BYTES_PER_S:
        if key in device_name:
            return peak, source
    return None


def reported_peak(properties: Any) -> float | None:
    """Memory clock (kHz) x 2 (double data rate) x bus width (bits) / 8, where torch's
    device properties expose both; ``None`` otherwise."""
    clock_khz = getattr(properties, "memory_clock_rate", 0) or 0
    bus_bits = getattr(properties, "memory_bus_width", 0) or 0
    if clock_khz <= 0 or bus_bits <= 0:
        return None
    return float(clock_khz) * 1e3 * 2 * bus_bits / 8


@dataclass(frozen=True)
class PeakBandwidth:
    """The device's peak bandwidth three ways (bytes/s; ``None`` where unknown)."""

    device_name: str
    datasheet: float | None
    datasheet_source: str | None
    reported: float | None
    measured_copy: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "device_name": self.device_name,
            "datasheet_bytes_per_s": self.datasheet,
            "datasheet_source": self.datasheet_source,
            "reported_bytes_per_s": self.reported,
            "measured_copy_bytes_per_s": self.measured_copy,
            "measured_copy_note": f"device-to-device copy of {COPY_BYTES} bytes "
            f"({2 * COPY_BYTES} moved), device time from a CUDA graph",
        }


def peak_bandwidth(device: torch.device) -> PeakBandwidth:
    """Datasheet, reported and measured (1 GiB copy) peak of ``device``."""
    require_cuda(device, what="the peak-bandwidth figure")
    name = torch.cuda.get_device_name(device)
    sheet = datasheet_peak(name)
    source = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    copy_ms = graph_device_ms([lambda: target.copy_(source)], device=device)
    return PeakBandwidth(
        device_name=name,
        datasheet=None if sheet is None else sheet[0],
        datasheet_source=None if sheet is None else sheet[1],
        reported=reported_peak(torch.cuda.get_device_properties(device)),
        measured_copy=2 * COPY_BYTES / (copy_ms / 1e3),
    )


@dataclass(frozen=True)
class KernelFigure:
    """One dtype of the step kernel: its bytes, both times and the achieved bandwidth."""

    dtype: str
    bs: int
    vocab_size: int
    bytes: KernelBytes
    do_bench_ms: float  # with the Python launch path
    device_ms: float  # from a CUDA graph over rotated inputs
    rotated_inputs: int

    @property
    def achieved(self) -> float:
        return self.bytes.moved / (self.device_ms / 1e3)

    def to_json(self, peak: PeakBandwidth) -> dict[str, Any]:
        def share(reference: float | None) -> float | None:
            return None if reference is None else self.achieved / reference

        return {
            "dtype": self.dtype,
            "bs": self.bs,
            "vocab_size": self.vocab_size,
            "bytes_moved": self.bytes.moved,
            "bytes_compulsory": self.bytes.compulsory,
            "do_bench_ms": self.do_bench_ms,
            "device_ms": self.device_ms,
            "rotated_inputs": self.rotated_inputs,
            "achieved_bytes_per_s": self.achieved,
            "fraction_of_datasheet_peak": share(peak.datasheet),
            "fraction_of_measured_copy_peak": share(peak.measured_copy),
        }


def race_inputs(
    *, bs: int, vocab_size: int, dtype: str, device: torch.device, seed: int
) -> dict[str, torch.Tensor]:
    """Race inputs made on the CPU from ``seed``, then moved: logits ~ 3 N(0, 1) in
    ``dtype``, ``Exp(1)`` noise, T = 1 and every row sampled."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(bs, vocab_size, generator=generator) * 3
    noise = torch.empty(bs, vocab_size).exponential_(generator=generator)
    return {
        "logits": logits.to(DTYPES[dtype]).to(device),
        "temperatures": torch.ones(bs, device=device),
        "greedy_mask": torch.zeros(bs, dtype=torch.bool, device=device),
        "noise": noise.to(device),
    }


def kernel_figure(
    *, dtype: str, device: torch.device, bs: int = KERNEL_BS, vocab_size: int = KERNEL_VOCAB
) -> KernelFigure:
    """``do_bench`` and graph device time of ``exponential_race_triton`` for one dtype."""
    require_cuda(device, what="the step-kernel figure")
    import triton.testing

    from reference.triton_race import exponential_race_triton

    byte_model = race_kernel_bytes(bs=bs, vocab_size=vocab_size, dtype=dtype)
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    rotated = max(2, math.ceil(L2_MULTIPLE * l2_bytes / byte_model.moved))
    first = race_inputs(bs=bs, vocab_size=vocab_size, dtype=dtype, device=device, seed=0)
    sets = [first] + [{k: v.clone() for k, v in first.items()} for _ in range(rotated - 1)]
    do_bench_ms = float(
        triton.testing.do_bench(
            lambda: exponential_race_triton(**first), warmup=25, rep=100, return_mode="median"
        )
    )
    device_ms = graph_device_ms(
        [functools.partial(exponential_race_triton, **inputs) for inputs in sets],
        device=device,
    )
    return KernelFigure(dtype, bs, vocab_size, byte_model, do_bench_ms, device_ms, rotated)
