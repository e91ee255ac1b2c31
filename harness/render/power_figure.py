"""The power curves as a PNG figure (matplotlib, the ``plot`` extra): what the report
writes as ``report-power.png`` beside its text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harness.render.figures import render_png

MEASURED_MARKERS = ("o", "s", "^")  # one shape per head kind, nested by size
DODGE = 1.04  # measured points of neighbouring heads sit this factor apart in rows


def power_curves_png(curves: Sequence[dict[str, Any]]) -> bytes | None:
    """The power curves (``PowerCurve.to_json_dict()``) as a PNG, per head: the measured
    points with their intervals, and the predicted line; the axes say the curves' target,
    rounds per row and test level. ``None`` without matplotlib."""

    def draw(figure: Any) -> None:
        axes = figure.add_subplot()
        for index, curve in enumerate(curves):
            colour = f"C{index}"
            points = curve["points"]
            rows = [p["rows"] for p in points]
            measured = [_number(p["empirical_power"]) for p in points]
            low = [_number(p["interval_low"]) for p in points]
            high = [_number(p["interval_high"]) for p in points]
            confidence = f"{curve['interval_confidence']:.0%}"
            # the heads' intervals at one row count side by side, not on top of each other
            dodged = [r * DODGE ** (index - (len(curves) - 1) / 2) for r in rows]
            axes.errorbar(  # the interval of each measured point, drawn under it
                dodged,
                measured,
                yerr=[
                    [m - lo for m, lo in zip(measured, low, strict=True)],
                    [hi - m for m, hi in zip(measured, high, strict=True)],
                ],
                fmt="none",
                ecolor=colour,
                elinewidth=1,
                capsize=3,
            )
            axes.semilogx(  # hollow and each head smaller: equal points stay visible
                dodged,
                measured,
                MEASURED_MARKERS[index % len(MEASURED_MARKERS)],
                color=colour,
                markerfacecolor="none",
                markersize=11 - 3 * (index % len(MEASURED_MARKERS)),
                label=f"{curve['head']}: measured, blocks rejected ({confidence} interval)",
            )
            axes.semilogx(
                rows,
                [p["predicted_power"] for p in points],
                "-",
                color=colour,
                label=f"{curve['head']}: predicted (strongest test)",
            )
        if curves:
            first = curves[0]
            axes.axhline(first["target_power"], color="grey", linestyle=":", label="target power")
            axes.set_ylabel(f"rejection rate of {first['name']} (test level {first['level']:.2g})")
            axes.set_xlabel(
                f"independent rows per head at the {first['target']} target "
                f"({first['rounds']} rounds per row)"
            )
        axes.set_ylim(-0.02, 1.02)
        axes.set_title("power of the statistical oracle per head kind: measured and predicted")
        axes.legend(fontsize=7, loc="lower right")
        figure.tight_layout()

    return render_png(draw, size=(7.0, 4.2))


def _number(value: float | None) -> float:
    """A number of the JSON, where ``None`` stands for NaN (``json_safe``)."""
    return math.nan if value is None else value
