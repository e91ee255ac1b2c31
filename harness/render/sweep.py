"""The "Scaling sweep" section of ``python -m harness sweep`` (the fitted exponents and
ratios of ``harness.measure.sweep``) and its figure, ``sweep.png``: time per call and the
pair's ratio against ``bs * gamma * V``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.defaults import BUGGY_SIDE, FIXED_SIDE, PAIR_SIDES
from harness.measure.sweep import EXPONENT_RANGE, PNG_FILE, SweepConfig, SweepSummary
from harness.measure.timing import CLOCKS, MODES
from harness.render.figures import PLOT_EXTRA_HINT, render_png
from harness.render.sections import Section, Table


def sweep_png(
    *, config: SweepConfig, records: list[dict[str, Any]], summary: SweepSummary
) -> bytes | None:
    """Time per call and legacy/fixed ratio against ``bs * gamma * V`` (``None``
    without matplotlib)."""

    def draw(figure: Any) -> None:
        times_ax, ratio_ax = figure.subplots(1, 2)
        _draw_sweep(times_ax, ratio_ax, records=records, summary=summary, pair=config.pair)
        figure.suptitle(f"DSpark draft sampler sweep: {config.describe()}", fontsize=8)
        figure.tight_layout()

    return render_png(draw, size=(12, 4.8), dpi=110)


def _draw_sweep(
    times_ax: Any,
    ratio_ax: Any,
    *,
    records: list[dict[str, Any]],
    summary: SweepSummary,
    pair: tuple[str, str],
) -> None:
    clock = summary.clock
    names = dict(zip(PAIR_SIDES, pair, strict=True))  # slot -> the pair's name
    work = np.array([r["work"] for r in records], dtype=float)
    order = np.argsort(work)
    styles = {"walk_only": "o", "whole_call": "s"}
    colours = {BUGGY_SIDE: "tab:red", FIXED_SIDE: "tab:blue"}
    for mode in MODES:
        for name in PAIR_SIDES:
            ms = np.array([r[mode][clock][f"{name}_median_s"] * 1e3 for r in records])
            exponent = summary.exponents[clock][mode][name]
            times_ax.loglog(
                work[order],
                ms[order],
                styles[mode],
                color=colours[name],
                fillstyle="full" if mode == "walk_only" else "none",
                label=f"{names[name]}, {mode.replace('_', '-')} (exponent {exponent:.2f})",
            )
            if len(set(work)) > 1:
                slope, intercept = np.polyfit(np.log(work), np.log(ms), 1)
                grid = np.geomspace(work.min(), work.max(), 20)
                times_ax.loglog(
                    grid, np.exp(intercept) * grid**slope, "-", color=colours[name], alpha=0.4
                )
        ratios = np.array([r[mode][clock]["ratio_median"] for r in records])
        ratio_ax.semilogx(
            work[order], ratios[order], styles[mode], alpha=0.7, label=mode.replace("_", "-")
        )
    ratio_ax.axhline(2.0, color="grey", linestyle=":", label="2 (one extra walk)")
    times_ax.set(
        xlabel="bs * gamma * V", ylabel=f"median {clock} time per call [ms]", title="time per call"
    )
    ratio_ax.set(
        xlabel="bs * gamma * V",
        ylabel=f"{pair[0]} / {pair[1]} (median paired ratio)",
        title=f"{pair[0]} / {pair[1]}",
    )
    times_ax.legend(fontsize=7)
    ratio_ax.legend(fontsize=7)


def sweep_section(summary: SweepSummary, *, config: SweepConfig, paths: list[Path]) -> Section:
    """The exponents and ratios as a report section; its data is ``sweep.json``'s document."""
    rows = []
    for clock in sorted(CLOCKS, key=lambda c: c != summary.clock):
        for mode in MODES:
            e = summary.exponents[clock][mode]
            rows.append(
                [
                    mode.replace("_", "-"),
                    clock,
                    f"{e[BUGGY_SIDE]:.3f}",
                    f"{e[FIXED_SIDE]:.3f}",
                    f"{summary.ratio_median[clock][mode]:.3f}",
                ]
            )
    low, high = EXPONENT_RANGE
    buggy, fixed = config.pair
    verdict = (
        f"{fixed} walk-only exponent ({summary.clock} time) {summary.fixed_exponent:.3f}, "
        f"expected in [{low}, {high}]: "
        + (("holds" if summary.ok else "FAILS") if summary.checked else "not checked on this grid")
    )
    written = [str(p) for p in paths]
    if not any(p.name == PNG_FILE for p in paths):
        written.append(f"{PNG_FILE} skipped: {PLOT_EXTRA_HINT}")
    blocks = (
        f"sweep: {config.describe()}\n"
        "cost exponent in bs*gamma*V (log-log least squares) and median "
        f"{buggy}/{fixed} ratio:",
        Table.of(
            ["mode", "clock", buggy, fixed, "ratio"],
            rows,
            align=["left", "left", "right", "right", "right"],
        ),
        verdict,
        "written: " + ", ".join(written),
    )
    document = json.loads(paths[1].read_text())
    return Section(
        title="Scaling sweep", ok=summary.ok, verdict=verdict, blocks=blocks, data=document
    )
