"""Observation of one sampler run: ATen operators and every random draw.

``DispatchObserver`` is a ``TorchDispatchMode`` that counts every ATen operator of
the call and records every random operator (``exponential_``, ``uniform_``,
``normal_``, ``bernoulli_``, ``random_``, ``multinomial``, ``rand``/``randn``/
``randint`` and their ``_like`` forms, with or without a generator) in every phase
of a run — construction, staging and the call — by calls and elements per op; exact
and deterministic on any device. A draw from a CPU generator keeps that generator's
state before and after it (``StreamStates``), and each phase torch's own CPU generator's
state around it: where in the stream each party drew (``harness.pipeline.torch_stream``).
The Markov walks are counted by the calling convention (``harness.plugins.walks``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode

Phase = Literal["construction", "staging", "call"]
NOISE_OP = "exponential_"  # the one random op a drop-in sampler uses
RANDOM_OPS = frozenset(
    {
        "exponential_",
        "uniform_",
        "normal_",
        "normal",
        "bernoulli_",
        "bernoulli",
        "random_",
        "multinomial",
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "randperm",
        "poisson",
        "cauchy_",
        "geometric_",
        "log_normal_",
        "native_dropout",
    }
)


@dataclass(frozen=True)
class StreamStates:
    """A CPU torch generator's state (``get_state()``, ``[5056]`` uint8) before and after
    a draw or a phase; ``server``: torch's own generator, the one the server's verifier
    draws from, not a generator of the sampler's own."""

    before: torch.Tensor
    after: torch.Tensor
    server: bool = True


@dataclass(frozen=True)
class RandomDraw:
    """One random operator's output: which op, in which phase, and what it drew."""

    op: str
    phase: Phase
    shape: tuple[int, ...]
    values: torch.Tensor | None  # a copy, when draws are recorded
    stream: StreamStates | None = None  # None: not drawn from a CPU generator

    @property
    def elements(self) -> int:
        return int(torch.Size(self.shape).numel())

    def describe(self) -> str:
        return f"{self.op} {list(self.shape)} ({self.phase})"


class EagerDispatchMode(TorchDispatchMode):
    """A dispatch mode that is never traced by ``torch.compile``: torch otherwise wraps
    ``__torch_dispatch__`` in dynamo's disable, whose first call imports ``torch._dynamo``
    (seconds per process, and a write to ``os.environ``)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class DispatchObserver(EagerDispatchMode):
    """Counts the call's ATen operators by name and records every random draw.

    ``phase`` says what the sampler is doing; operators are counted only in the
    ``"call"`` phase (the work of one proposal), random draws in every phase.
    """

    def __init__(self, *, record_noise: bool, phase: Phase = "call") -> None:
        super().__init__()
        self.record_noise = record_noise
        self.phase: Phase = phase
        self.op_counts: Counter[str] = Counter()
        self.draws: list[RandomDraw] = []
        self.phase_streams: dict[Phase, StreamStates] = {}  # torch's CPU generator around each

    @contextmanager
    def in_phase(self, phase: Phase) -> Iterator[None]:
        """Observe ``phase`` (the mode is entered and left around it)."""
        self.phase = phase
        before = torch.default_generator.get_state()
        with self:
            yield
        after = torch.default_generator.get_state()
        self.phase_streams[phase] = StreamStates(before, after)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        name = func.overloadpacket.__name__
        generator = drawn_from(args, kwargs) if name in RANDOM_OPS else None
        before = None if generator is None else generator.get_state()
        result = func(*args, **(kwargs or {}))
        if self.phase == "call":
            self.op_counts[str(func.overloadpacket)] += 1
        if name in RANDOM_OPS:
            drawn = args[0] if name.endswith("_") else result
            if isinstance(drawn, tuple):  # native_dropout: (output, mask)
                drawn = drawn[0]
            values = drawn.detach().clone() if self.record_noise else None
            stream = None
            if generator is not None and before is not None:
                server = generator is torch.default_generator
                stream = StreamStates(before, generator.get_state(), server=server)
            self.draws.append(RandomDraw(name, self.phase, tuple(drawn.shape), values, stream))
        return result

    # -- views of the record ---------------------------------------------------------------
    def stream_of_call(self) -> StreamStates | None:
        """Torch's CPU generator from the start of the staging to the end of the call
        (``None`` when either phase did not finish)."""
        staging, call = self.phase_streams.get("staging"), self.phase_streams.get("call")
        if staging is None or call is None:
            return None
        return StreamStates(staging.before, call.after)

    def draws_in(self, *phases: Phase) -> list[RandomDraw]:
        return [d for d in self.draws if d.phase in phases]

    @property
    def noise_calls(self) -> int:
        """``exponential_`` calls during the call."""
        return sum(1 for d in self.draws_in("call") if d.op == NOISE_OP)

    @property
    def noise_elements(self) -> int:
        return sum(d.elements for d in self.draws_in("call") if d.op == NOISE_OP)

    @property
    def noise_draws(self) -> list[torch.Tensor]:
        """The values of the call's ``exponential_`` draws (when recorded)."""
        return [
            d.values for d in self.draws_in("call") if d.op == NOISE_OP and d.values is not None
        ]


def drawn_from(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> torch.Generator | None:
    """The CPU generator a random operator reads: the one it is passed, else torch's own
    when its output is on the CPU (``None``: a generator of another device)."""
    passed = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Generator)]
    if passed:
        return passed[0] if passed[0].device.type == "cpu" else None
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    device = (kwargs or {}).get("device") or (tensors[0].device if tensors else None)
    on_cpu = device is None or torch.device(device).type == "cpu"
    return torch.default_generator if on_cpu else None


def rng_consumption(draws: list[RandomDraw]) -> dict[str, dict[str, list[int]]]:
    """``{phase: {op: [calls, elements]}}`` of a list of draws, in a stable order."""
    table: dict[str, dict[str, list[int]]] = {}
    for draw in draws:
        entry = table.setdefault(draw.phase, {}).setdefault(draw.op, [0, 0])
        entry[0] += 1
        entry[1] += draw.elements
    return {phase: dict(sorted(ops.items())) for phase, ops in table.items()}
