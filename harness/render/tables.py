"""Tables for people: one helper for aligned terminal text and real Markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from tabulate import tabulate

TableFormat = Literal["text", "markdown"]
Alignment = Literal["left", "right", "center"]
_TABULATE_FORMATS = {"text": "simple", "markdown": "github"}


def _cell(value: object, fmt: TableFormat) -> str:
    text = str(value)
    return text.replace("|", "\\|") if fmt == "markdown" else text  # a bare | ends the cell


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    fmt: TableFormat = "text",
    align: Sequence[Alignment] | None = None,
    wrap: Sequence[int | None] | None = None,
) -> str:
    """``rows`` under ``header`` as aligned text (``fmt="text"``) or a GitHub-flavoured
    Markdown table (``fmt="markdown"``). Cells are shown as given (``str``), so numbers
    keep the formatting the caller chose (in Markdown a ``|`` is escaped); ``align``
    gives one alignment per column (default: left); ``wrap`` one width per column
    (``None``: as wide as its cells) at which terminal text wraps between words, so
    that a long cell is never cut (Markdown cells stay whole)."""
    if fmt not in _TABULATE_FORMATS:
        raise ValueError(f"fmt must be 'text' or 'markdown', got {fmt!r}")
    for name, per_column in (("align", align), ("wrap", wrap)):
        if per_column is not None and len(per_column) != len(header):
            raise ValueError(
                f"{name} needs one entry per column ({len(header)}), got {len(per_column)}"
            )
    cells = [[_cell(cell, fmt) for cell in row] for row in rows]
    widths = list(wrap) if wrap is not None and fmt == "text" else None
    return tabulate(
        cells,
        headers=[_cell(name, fmt) for name in header],
        tablefmt=_TABULATE_FORMATS[fmt],
        colalign=tuple(align) if align is not None else ("left",) * len(header),
        disable_numparse=True,
        maxcolwidths=widths,
    )
