"""Which counters of the Philox stream a 0.5.23 call's draws read, where torch computes
the stream's words (docs/upstream.md, "Replaying counter-based noise").

While a call runs under ``observe_counter_reads``, the loaded package's
``MarkovSampleStep.execute`` (its Gumbel race, one draw per sampled step) records the
counter it is handed, and the package's Philox function records the counter of any
other call of it (another transform of the same words: an inverse CDF, say). The two
are put back when the call returns. Both only observe: every value is the package's.
On a CUDA stream that is capturing a graph nothing is read back (the reads are then
not visible); the Triton race computes its words in the kernel, so only its counter
(the one ``execute`` is handed) is seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.plugins.conventions import CounterReads
from harness.upstream.loaders.sglang_loader import LoadedSglang

MARKOV_SAMPLE_MODULE = "sglang.kernels.ops.speculative.dspark.markov_sample"


@dataclass
class CounterRecorder:
    """The counters one call read: by the package's race, and by anything else."""

    own: set[int] = field(default_factory=set)
    other: set[int] = field(default_factory=set)
    visible: bool = True
    inside_race: int = 0  # > 0 while the package's race runs (its own Philox calls)

    def read(self, counter: torch.Tensor, *, own: bool) -> None:
        if counter.is_cuda and torch.cuda.is_current_stream_capturing():
            self.visible = False  # reading it back would break the capture
            return
        values = {int(v) for v in torch.unique(counter.detach()).tolist()}
        (self.own if own else self.other).update(values)

    def reads(self) -> CounterReads | None:
        if not self.visible:
            return None
        return CounterReads(own=tuple(sorted(self.own)), other=tuple(sorted(self.other)))


@contextmanager
def observe_counter_reads(loaded: LoadedSglang) -> Iterator[CounterRecorder]:
    """Record the counters read while the block runs (module docstring)."""
    recorder = CounterRecorder()
    step_class = loaded.MarkovSampleStep
    module: Any = loaded.modules[MARKOV_SAMPLE_MODULE]  # its names are the package's
    execute, descriptor = step_class.execute, step_class.__dict__["execute"]
    philox = module._philox

    def recording_execute(**kwargs: Any) -> Any:
        if kwargs.get("has_sampled_rows") is not False:  # False: every row argmaxes
            recorder.read(kwargs["offset"], own=True)
        recorder.inside_race += 1
        try:
            return execute(**kwargs)
        finally:
            recorder.inside_race -= 1

    def recording_philox(key: int, c0: Any, c1: Any, c2: Any, c3: torch.Tensor) -> Any:
        if not recorder.inside_race:
            recorder.read(c3, own=False)
        return philox(key, c0, c1, c2, c3)

    step_class.execute = staticmethod(recording_execute)
    module._philox = recording_philox
    try:
        yield recorder
    finally:
        step_class.execute = descriptor
        module._philox = philox
