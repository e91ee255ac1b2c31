"""The section of ``python -m harness words``: per conversion, the words checked, each
event's count with its exact probability per draw, the extreme finite noise values,
the seconds, and where each part of the conversion comes from."""

from __future__ import annotations

from harness.measure.word_sweep import EVENTS, WORDS, WordSweep, probability_text
from harness.render.sections import Block, Section, Table, right_aligned

TITLE = "Every word of the noise streams (docs/upstream.md)"


def _words_cell(sweep: WordSweep) -> str:
    if sweep.complete:
        return "all 2^32"
    return f"{sweep.words} from {sweep.start}"


def _event_cell(sweep: WordSweep, event: str) -> str:
    count = sweep.count(event)
    return "0" if count == 0 else f"{count} ({probability_text(count)})"


def _extreme(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def words_section(sweeps: list[WordSweep], *, unavailable: dict[str, str], ok: bool) -> Section:
    """The table of sweeps; ``ok`` is the logic's (no non-finite noise anywhere)."""
    header = [
        "server", "stream", "words", "u = 0", "u = 1", "+inf", "-inf", "NaN",
        "finite noise", "s", "noise",
    ]  # fmt: skip
    rows = [
        [
            s.server,
            s.stream,
            _words_cell(s),
            *(_event_cell(s, event) for event in EVENTS),
            f"[{_extreme(s.noise_min)}, {_extreme(s.noise_max)}]",
            f"{s.seconds:.0f}",
            "finite" if s.ok else "NON-FINITE",
        ]
        for s in sweeps
    ]
    blocks: list[Block] = [
        Table.of(
            header,
            rows,
            align=["left", "left", "left", *right_aligned(len(header) - 4), "left"],
            wrap=[8, 12, 10, None, None, None, None, None, 12, None, None],
        ),
        f"counts are exact; a count's probability per draw is count / 2^32 = count / {WORDS}. "
        "A uniform at 0 or 1 that the conversion guards is reported, not a failure; "
        "a non-finite noise value is one.",
    ]
    for s in sweeps:
        hits = [
            f"{e.event} first at word {e.first_word}" for e in s.events if e.first_word is not None
        ]
        blocks.append(
            f"{s.server} {s.stream}: noise {s.noise}; {s.source}"
            + (f" ({'; '.join(hits)})" if hits else "")
        )
    for server, reason in unavailable.items():
        blocks.append(f"{server}: not checked: {reason}")
    failing = [s for s in sweeps if not s.ok]
    if failing:
        verdict = "NON-FINITE noise: " + "; ".join(
            f"{s.server} {s.stream} {probability_text(s.non_finite)} per draw" for s in failing
        )
    else:
        verdict = f"every noise value finite over the words checked ({len(sweeps)} conversions)"
    return Section(
        title=TITLE,
        ok=ok,
        verdict=verdict,
        blocks=tuple(blocks),
        brief=(blocks[0], blocks[1]),
        data={
            "sweeps": [s.to_json() for s in sweeps],
            "unavailable": dict(unavailable),
        },
    )
