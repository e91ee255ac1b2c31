"""Samplers correct in the judging process that end the process forked beside it (the
statistical oracle's, ``--jobs``) on their first call there: each planted one way a
process ends without an answer. The process they were imported in is the judge's."""

from __future__ import annotations

import os
import signal

import torch

from fixed import DsparkDraftSampler as FixedSampler

JUDGE = os.getpid()  # the process that imported this module


class _EndsForked(FixedSampler):
    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if os.getpid() != JUDGE:
            self.end()
        super().__call__(hidden_states, input_ids)

    def end(self) -> None:
        raise NotImplementedError


class ExitsForked(_EndsForked):
    """``os._exit(0)``: status 0 and no answer."""

    def end(self) -> None:
        os._exit(0)


class KilledForked(_EndsForked):
    """SIGKILL, as the kernel's OOM killer sends it."""

    def end(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class StoppedForked(_EndsForked):
    """SIGTERM, as a user's ``kill`` sends it to that process alone."""

    def end(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
