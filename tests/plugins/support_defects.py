"""Planted defects of the support scan and the non-finite probe
(``harness.pipeline.support_scan``): samplers lossless in exact arithmetic that draft
outside the support, or break the non-finite rule, only in floating point.

- ``HalfUniformGumbelSampler``: Gumbel-max with the uniform rounded to float16 first, so
  ``u = 1`` happens (about 2^-12 per token): its exponential is ``inf`` and its key
  ``-inf``, and a row whose top token draws it hands the argmax to another token, a
  ``-inf`` one on a row with one finite logit. The released sampler's defect in
  miniature (docs/upstream.md, "Findings").
- ``NanAsMaskedSampler``: reads NaN logits as ``-inf`` before the race, so a NaN row no
  longer yields its first NaN.
"""

from __future__ import annotations

import torch

from tests.plugins.alternative_samplers import _RowDrawSampler


class HalfUniformGumbelSampler(_RowDrawSampler):
    """``argmax(x / T - log E)`` with ``E = -log1p(-u)``, ``u`` rounded to float16."""

    def draw(self, scaled: torch.Tensor, step_idx: int) -> torch.Tensor:
        uniform = torch.empty_like(scaled).uniform_().half().float()  # [bs, V], may be 1
        return torch.argmax(scaled - torch.log(-torch.log1p(-uniform)), dim=-1)


class NanAsMaskedSampler(_RowDrawSampler):
    """The exponential race on logits whose NaNs were read as masked (``-inf``)."""

    def draw(self, scaled: torch.Tensor, step_idx: int) -> torch.Tensor:
        masked = torch.nan_to_num(scaled, nan=float("-inf"))  # [bs, V]
        noise = torch.empty_like(masked).exponential_()
        return torch.argmax(torch.softmax(masked, dim=-1) / noise, dim=-1)
