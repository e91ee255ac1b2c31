"""A correct but slow sampler whose module ignores SIGTERM at import, and whose every
call ignores it again: the harness must stay stoppable by SIGTERM."""

import signal
import time

import torch

from fixed import DsparkDraftSampler as FixedSampler

signal.signal(signal.SIGTERM, signal.SIG_IGN)


class DsparkDraftSampler(FixedSampler):
    """Correct tokens, a tenth of a second late, with SIGTERM ignored."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(0.1)
        super().__call__(hidden_states, input_ids)
