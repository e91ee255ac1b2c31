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
) -> str:
    """``rows`` under ``header`` as aligned text (``fmt="text"``) or a GitHub-flavoured
    Markdown table (``fmt="markdown"``). Cells are shown as given (``str``), so numbers
    keep the formatting the caller chose (in Markdown a ``|`` is escaped); ``align``
    gives one alignment per column (default: left)."""
    if fmt not in _TABULATE_FORMATS:
        raise ValueError(f"fmt must be 'text' or 'markdown', got {fmt!r}")
    if align is not None and len(align) != len(header):
        raise ValueError(f"align needs one entry per column ({len(header)}), got {len(align)}")
    cells = [[_cell(cell, fmt) for cell in row] for row in rows]
    return tabulate(
        cells,
        headers=[_cell(name, fmt) for name in header],
        tablefmt=_TABULATE_FORMATS[fmt],
        colalign=tuple(align) if align is not None else ("left",) * len(header),
        disable_numparse=True,
    )
