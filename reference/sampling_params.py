"""Per-request sampling parameters and their staging into the sampler's buffers.

A request carries a temperature, a top-k, a top-p and a min-p (``SamplingInfo``, one
row each, mixed freely within a batch). Our convention (docs/sampling-params.md):
temperatures are clamped to at least ``1e-5`` (greedy requests often carry ``T = 0``);
a row is greedy when ``top_k == 1``; ``top_k == 0`` means no top-k (vLLM's reading;
sglang stages ``1 << 30`` for it); ``top_p == 1`` and ``min_p == 0`` mean no truncation;
``sampling_info=None`` means every row is greedy at ``T = 1``. The accepted ranges are
``temperature >= 0`` and finite, ``top_k >= 0``, ``top_p`` in ``(0, 1]``, ``min_p`` in
``[0, 1)``; any other value (NaN included) is a caller error and raises with one line
that names the parameter and its range, before anything is written (docs/numerics.md).
The law a request is sampled from is ``reference.request_law``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference.request_law import Truncation

MIN_TEMPERATURE = 1e-5
NO_TOP_K = 0  # top_k 0: the whole vocabulary


@dataclass(frozen=True, init=False)
class SamplingInfo:
    """The slice of the server's batch sampling state the draft sampler and the verifier
    read: every request's temperature, top-k, top-p and min-p."""

    temperatures: torch.Tensor  # [bs] float
    top_ks: torch.Tensor  # [bs] int
    top_ps: torch.Tensor  # [bs] float, 1: no top-p
    min_ps: torch.Tensor  # [bs] float, 0: no min-p

    def __init__(
        self,
        *,
        temperatures: torch.Tensor,
        top_ks: torch.Tensor,
        top_ps: torch.Tensor | None = None,
        min_ps: torch.Tensor | None = None,
    ) -> None:
        """``top_ps`` and ``min_ps`` default to no truncation (1 and 0 on every row)."""
        like = temperatures.to(torch.float32)
        object.__setattr__(self, "temperatures", temperatures)
        object.__setattr__(self, "top_ks", top_ks)
        object.__setattr__(self, "top_ps", torch.ones_like(like) if top_ps is None else top_ps)
        object.__setattr__(self, "min_ps", torch.zeros_like(like) if min_ps is None else min_ps)

    @classmethod
    def from_lists(
        cls,
        *,
        temperatures: list[float],
        top_ks: list[int],
        top_ps: list[float] | None = None,
        min_ps: list[float] | None = None,
        device: str | torch.device = "cpu",
    ) -> SamplingInfo:
        def floats(values: list[float] | None) -> torch.Tensor | None:
            return (
                None if values is None else torch.tensor(values, dtype=torch.float32, device=device)
            )

        return cls(
            temperatures=torch.tensor(temperatures, dtype=torch.float32, device=device),
            top_ks=torch.tensor(top_ks, dtype=torch.int64, device=device),
            top_ps=floats(top_ps),
            min_ps=floats(min_ps),
        )

    def select(self, rows: torch.Tensor) -> SamplingInfo:
        """The requests ``rows`` (``[bs]`` indices), in that order: a batch of them."""
        return SamplingInfo(
            temperatures=self.temperatures[rows],
            top_ks=self.top_ks[rows],
            top_ps=self.top_ps[rows],
            min_ps=self.min_ps[rows],
        )

    @property
    def greedy_mask(self) -> torch.Tensor:
        """``[bs]`` bool: the rows whose request is greedy (``top_k == 1``)."""
        return self.top_ks == 1

    @property
    def truncation(self) -> Truncation:
        """Every request's top-k, top-p and min-p (``[bs]`` each)."""
        return Truncation(top_ks=self.top_ks, top_ps=self.top_ps, min_ps=self.min_ps)


def check_sampling_info(sampling_info: SamplingInfo, *, bs: int | None = None) -> None:
    """``ValueError`` (one line naming the parameter and its accepted range) unless every
    field is ``[bs]`` (``bs``: the temperatures' length when ``None``) and every value is
    in its range. Reads the values on the host: staging runs outside the graph."""
    fields = vars(sampling_info)
    rows = bs if bs is not None else int(sampling_info.temperatures.reshape(-1).shape[0])
    if any(tuple(value.shape) != (rows,) for value in fields.values()):
        shapes = ", ".join(f".{name} {tuple(value.shape)}" for name, value in fields.items())
        raise ValueError(f"sampling_info's fields must all be [bs={rows}], got {shapes}")
    temps, top_ks, top_ps, min_ps = (
        sampling_info.temperatures,
        sampling_info.top_ks,
        sampling_info.top_ps.double(),
        sampling_info.min_ps.double(),
    )
    # +inf is refused too: -inf / inf is NaN, which would let a masked entry win the race.
    if not bool(torch.isfinite(temps).all()) or bool((temps < 0).any()):
        raise ValueError(
            f"temperatures must be >= 0 and not NaN or infinite "
            f"(0 is clamped to {MIN_TEMPERATURE}), got {temps.tolist()}"
        )
    if top_ks.is_floating_point() or bool((top_ks < 0).any()):
        raise ValueError(
            f"top_ks must be integers >= 0 (0: no top-k, 1: greedy), got {top_ks.tolist()}"
        )
    if not bool(((top_ps > 0) & (top_ps <= 1)).all()):  # NaN fails both comparisons
        raise ValueError(f"top_ps must be in (0, 1] (1: no top-p), got {top_ps.tolist()}")
    if not bool(((min_ps >= 0) & (min_ps < 1)).all()):
        raise ValueError(f"min_ps must be in [0, 1) (0: no min-p), got {min_ps.tolist()}")


def stage_sampling_params(
    *,
    bs: int,
    sampling_info: SamplingInfo | None,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
) -> None:
    """Write the first ``bs`` rows of the static ``temperatures`` and ``greedy_mask``
    buffers from ``sampling_info`` (``None``: all greedy at ``T = 1``), after checking
    every parameter of it (``check_sampling_info``)."""
    if not 0 < bs <= temperatures.shape[0]:
        raise ValueError(f"bs must be in 1..{temperatures.shape[0]} (max_bs), got {bs}")
    if sampling_info is None:
        temperatures[:bs] = 1.0
        greedy_mask[:bs] = True
        return
    check_sampling_info(sampling_info, bs=bs)
    # Both rows are computed before either buffer is written: a failure writes nothing.
    staged_temperatures = sampling_info.temperatures.to(temperatures.dtype).clamp_min(
        MIN_TEMPERATURE
    )
    staged_greedy = sampling_info.greedy_mask
    temperatures[:bs] = staged_temperatures
    greedy_mask[:bs] = staged_greedy
