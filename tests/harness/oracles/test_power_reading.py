"""How the power curves read: a prediction set beside measured points, each measured
point with its binomial interval, and the axis in the run's own settings (its target and
rounds per row), never a literal."""

from __future__ import annotations

import math
from dataclasses import asdict

import pytest

from harness.oracles.power import PowerCurve, PowerPoint, wilson_interval
from harness.render.power_figure import power_curves_png
from harness.render.statistics import power_text


@pytest.mark.parametrize(("successes", "trials"), [(23, 24), (9, 24), (5, 6), (1, 3), (0, 12)])
def test_the_interval_is_scipys_wilson_interval(successes: int, trials: int) -> None:
    from scipy.stats import binomtest

    expected = binomtest(successes, trials).proportion_ci(0.95, method="wilson")
    low, high = wilson_interval(successes, trials)
    assert low == pytest.approx(expected.low, abs=1e-12)
    assert high == pytest.approx(expected.high, abs=1e-12)


def test_the_interval_holds_its_share_at_the_edges_and_is_undefined_without_trials() -> None:
    assert wilson_interval(12, 12) == (pytest.approx(0.7575, abs=1e-4), 1.0)
    assert wilson_interval(0, 24)[0] == 0.0
    assert all(math.isnan(bound) for bound in wilson_interval(0, 0))


def _point(rows: int, rejections: int, trials: int, predicted: float) -> PowerPoint:
    low, high = wilson_interval(rejections, trials)
    return PowerPoint(
        rows=rows,
        trials=trials,
        rejections=rejections,
        empirical_power=rejections / trials,
        interval_low=low,
        interval_high=high,
        predicted_power=predicted,
    )


# The report's gated curve at seed 0, at a made-up target and rounds (the axis reads them).
GATED = PowerCurve(
    name="legacy",
    head="gated",
    target="near",
    rounds=7,
    alpha=1e-6,
    level=3.97e-9,
    interval_confidence=0.95,
    pooled_rows=15_000,
    seeds=(0, 1, 2),
    points=(_point(624, 23, 24, 0.9999), _point(1248, 12, 12, 1.0)),
    target_power=0.99,
    rows_for_target_power=592,
    measured_rows_for_target_power=1248,
    rule_of_thumb_rows=80,
    power_at_rule_of_thumb=6.2e-9,
)


def test_the_text_calls_the_prediction_a_prediction_and_gives_each_point_its_interval() -> None:
    text = power_text([GATED])
    assert "lower bound" not in text
    assert text.startswith(
        "power against legacy at the near target, 7 rounds per row, alpha 1e-06 "
    )
    assert (
        "Measured: the share of blocks rejected, with its Wilson 95% interval. Predicted: the "
        "strongest test's noncentral chi-square power at the noncentrality estimated from the "
        "pooled rows, a prediction that measured points can fall below:"
    ) in text
    rows = [line.split() for line in text.splitlines() if line.startswith("gated ")]
    assert rows[1:] == [
        ["gated", "624", "23/24", "0.96", "[0.80,", "0.99]", "1.00", "no"],
        ["gated", "1248", "12/12", "1.00", "[0.76,", "1.00]", "1.00", "yes"],
    ]


def test_the_figure_draws_each_interval_and_takes_its_axis_from_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    figure_module = pytest.importorskip("matplotlib.figure", reason="needs the plot extra")
    from harness.render import power_figure as stats_section

    drawn = figure_module.Figure()
    monkeypatch.setattr(stats_section, "render_png", lambda draw, size: draw(drawn))
    power_curves_png([GATED.to_json_dict()])
    axes = drawn.axes[0]
    assert axes.get_xlabel() == "independent rows per head at the near target (7 rounds per row)"
    (bars,) = axes.collections  # one set of interval bars per head
    spans = sorted(tuple(sorted(segment[:, 1])) for segment in bars.get_segments())
    assert spans == [
        pytest.approx((GATED.points[1].interval_low, 1.0)),  # 12/12: [0.76, 1]
        pytest.approx((GATED.points[0].interval_low, GATED.points[0].interval_high)),  # 23/24
    ]
    labels = [str(line.get_label()) for line in axes.lines]
    assert "gated: measured, blocks rejected (95% interval)" in labels
    assert "gated: predicted (strongest test)" in labels


def test_a_curve_round_trips_its_intervals_and_settings_through_json() -> None:
    body = GATED.to_json_dict()
    assert (body["target"], body["rounds"], body["interval_confidence"]) == ("near", 7, 0.95)
    assert body["points"][0] == asdict(GATED.points[0])
