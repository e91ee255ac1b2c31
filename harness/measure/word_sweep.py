"""Every 32-bit word through a word-to-noise conversion, counted exactly.

``sweep()`` runs one ``WordConversion`` (``harness.upstream.noise_words``) over the
words ``[start, stop)`` of ``[0, 2^32)`` in chunks and counts, exactly, the words
whose uniform is 0 or 1 and whose noise is +inf, -inf or NaN, with the first word of
each, the extreme finite noise values and the time taken. Each count is also a
probability per draw: a uniformly random word hits it with probability count / 2^32,
an exact fraction. A sweep holds when no word gives a non-finite noise; a uniform at 0
or 1 that the conversion guards is reported, not a failure (docs/upstream.md, "Every
word of the noise streams").
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from harness.progress import Progress, no_progress
from harness.upstream.noise_words import WordConversion

WORDS = 1 << 32
DEFAULT_CHUNK = 1 << 22
EVENTS = ("uniform == 0", "uniform == 1", "noise +inf", "noise -inf", "noise NaN")
NON_FINITE = ("noise +inf", "noise -inf", "noise NaN")


def probability_text(count: int) -> str:
    """``count / 2^32`` as an exact fraction, a power of two where it is one."""
    if count == 0:
        return "0"
    fraction = Fraction(count, WORDS)
    if fraction.numerator == 1 and fraction.denominator & (fraction.denominator - 1) == 0:
        return f"2^-{fraction.denominator.bit_length() - 1}"
    return f"{fraction.numerator}/{fraction.denominator}"


@dataclass(frozen=True)
class WordEvent:
    """How many words of the sweep give one event, and the first of them."""

    event: str
    count: int
    first_word: int | None

    @property
    def probability(self) -> float:
        return self.count / WORDS

    def to_json(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "count": self.count,
            "probability": probability_text(self.count),
            "probability_float": self.probability,
            "first_word": self.first_word,
        }


@dataclass(frozen=True)
class WordSweep:
    """One conversion over the words ``[start, stop)``: its events and extremes."""

    server: str
    stream: str
    noise: str
    source: str
    start: int
    stop: int
    events: tuple[WordEvent, ...]
    noise_min: float | None  # the extreme finite noise values (None: none finite)
    noise_max: float | None
    seconds: float

    @property
    def words(self) -> int:
        return self.stop - self.start

    @property
    def complete(self) -> bool:
        return self.start == 0 and self.stop == WORDS

    def count(self, event: str) -> int:
        return next(e.count for e in self.events if e.event == event)

    @property
    def non_finite(self) -> int:
        """The words whose noise is +inf, -inf or NaN."""
        return sum(self.count(event) for event in NON_FINITE)

    @property
    def ok(self) -> bool:
        """No word gives a non-finite noise value."""
        return self.non_finite == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "stream": self.stream,
            "noise": self.noise,
            "source": self.source,
            "words": [self.start, self.stop],
            "complete": self.complete,
            "events": [event.to_json() for event in self.events],
            "noise_min": self.noise_min,
            "noise_max": self.noise_max,
            "seconds": self.seconds,
            "ok": self.ok,
        }


def _flags(uniform: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (
        uniform == 0,
        uniform == 1,
        noise == math.inf,
        noise == -math.inf,
        torch.isnan(noise),
    )


def sweep(
    conversion: WordConversion,
    *,
    start: int = 0,
    stop: int = WORDS,
    chunk: int = DEFAULT_CHUNK,
    progress: Progress = no_progress,
) -> WordSweep:
    """Run ``conversion`` on every word of ``[start, stop)``, ``chunk`` words at a time."""
    if not 0 <= start < stop <= WORDS or chunk < 1:
        raise ValueError(f"words [{start}, {stop}) in chunks of {chunk}: out of range")
    counts = [0] * len(EVENTS)
    firsts: list[int | None] = [None] * len(EVENTS)
    low, high = math.inf, -math.inf
    began = time.perf_counter()
    reported = began
    for first in range(start, stop, chunk):
        words = torch.arange(first, min(first + chunk, stop), dtype=torch.int64)
        uniform, noise = conversion.convert(words)
        finite = torch.isfinite(noise)
        every_finite = bool(finite.all())
        u_low, u_high = (float(v) for v in torch.aminmax(uniform))
        if not every_finite or u_low == 0 or u_high == 1:  # the rare chunk with an event
            for index, flag in enumerate(_flags(uniform, noise)):
                hits = int(flag.sum())
                if hits and firsts[index] is None:
                    firsts[index] = first + int(flag.nonzero()[0, 0])
                counts[index] += hits
        kept = noise if every_finite else noise[finite]
        if kept.numel():
            chunk_low, chunk_high = torch.aminmax(kept)
            low, high = min(low, float(chunk_low)), max(high, float(chunk_high))
        now = time.perf_counter()
        if now - reported >= 10:
            reported = now
            done = first + words.numel() - start
            progress(
                f"words: {conversion.name}: {done}/{stop - start} "
                f"({100 * done / (stop - start):.1f}%, {now - began:.0f}s)"
            )
    return WordSweep(
        server=conversion.server,
        stream=conversion.stream,
        noise=conversion.noise,
        source=conversion.source,
        start=start,
        stop=stop,
        events=tuple(
            WordEvent(event, count, first_word)
            for event, count, first_word in zip(EVENTS, counts, firsts, strict=True)
        ),
        noise_min=None if low == math.inf else low,
        noise_max=None if high == -math.inf else high,
        seconds=round(time.perf_counter() - began, 3),
    )


def sweeps_ok(sweeps: list[WordSweep]) -> bool:
    """Whether no conversion gives a non-finite noise on any word it was run on."""
    return all(s.ok for s in sweeps)
