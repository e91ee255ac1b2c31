"""Per-request sampling parameters and their staging into the sampler's buffers.

Upstream contract (kept here): temperatures are clamped to at least ``1e-5``
(greedy requests often carry ``T = 0``), a row is greedy when ``top_k <= 1``, and
``sampling_info=None`` means every row is greedy at ``T = 1``. A temperature that
is negative, NaN or infinite is not a clamp case but a caller error and raises, before
anything is written (docs/numerics.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingInfo:
    """The slice of the server's batch sampling state the draft sampler reads."""

    temperatures: torch.Tensor  # [bs] float
    top_ks: torch.Tensor  # [bs] int

    @classmethod
    def from_lists(
        cls, *, temperatures: list[float], top_ks: list[int], device: str | torch.device = "cpu"
    ) -> SamplingInfo:
        return cls(
            temperatures=torch.tensor(temperatures, dtype=torch.float32, device=device),
            top_ks=torch.tensor(top_ks, dtype=torch.int64, device=device),
        )

    def select(self, rows: torch.Tensor) -> SamplingInfo:
        """The requests ``rows`` (``[bs]`` indices), in that order: a batch of them."""
        return SamplingInfo(temperatures=self.temperatures[rows], top_ks=self.top_ks[rows])


def stage_sampling_params(
    *,
    bs: int,
    sampling_info: SamplingInfo | None,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
) -> None:
    """Write the first ``bs`` rows of the static ``temperatures`` and ``greedy_mask``
    buffers from ``sampling_info`` (``None``: all greedy at ``T = 1``)."""
    if not 0 < bs <= temperatures.shape[0]:
        raise ValueError(f"bs must be in 1..{temperatures.shape[0]} (max_bs), got {bs}")
    if sampling_info is None:
        temperatures[:bs] = 1.0
        greedy_mask[:bs] = True
        return
    temps, top_ks = sampling_info.temperatures, sampling_info.top_ks
    if tuple(temps.shape) != (bs,) or tuple(top_ks.shape) != (bs,):
        raise ValueError(
            f"sampling_info.temperatures and .top_ks must both be [bs={bs}], "
            f"got {tuple(temps.shape)} and {tuple(top_ks.shape)}"
        )
    # Staging runs outside the graph, so reading the values on the host is fine here.
    # +inf is refused too: -inf / inf is NaN, which would let a masked entry win the race.
    if not bool(torch.isfinite(temps).all()) or bool((temps < 0).any()):
        raise ValueError(
            f"temperatures must be >= 0 and not NaN or infinite "
            f"(0 is clamped to {MIN_TEMPERATURE}), got {temps.tolist()}"
        )
    # Both rows are computed before either buffer is written: a failure writes nothing.
    staged_temperatures = temps.to(temperatures.dtype).clamp_min(MIN_TEMPERATURE)
    staged_greedy = top_ks <= 1
    temperatures[:bs] = staged_temperatures
    greedy_mask[:bs] = staged_greedy
