"""Figures as PNG bytes through matplotlib's object-oriented ``Figure`` API.

matplotlib is an optional extra (``pip install ".[plot]"``): without it every
figure is skipped (``None``) and the caller says so; no backend is ever selected
globally, so importing or calling this never changes the host program's plotting.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

PLOT_EXTRA_HINT = 'matplotlib is not installed (pip install ".[plot]")'


def render_png(
    draw: Callable[[Any], None], *, size: tuple[float, float] = (7.0, 4.5), dpi: int = 120
) -> bytes | None:
    """Call ``draw(figure)`` on a fresh ``matplotlib.figure.Figure`` of ``size`` inches and
    return the PNG bytes, or ``None`` when matplotlib is not installed."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figure = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(figure)  # attaches a canvas to this figure only
    draw(figure)
    buffer = io.BytesIO()
    # Fixed metadata: the same figure gives the same bytes on every run.
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
