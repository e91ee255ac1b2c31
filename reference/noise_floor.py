"""The floor of an ``Exp(1)`` draw in the exponential race, shared by the torch race
(``reference.step_samplers``) and its Triton twin (``reference.triton_race``)."""

from __future__ import annotations

import torch

# A zero Exp(1) draw is raised to the smallest normal float32: 0/0 would be NaN and win the argmax.
MIN_NOISE = torch.finfo(torch.float32).tiny
