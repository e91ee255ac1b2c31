"""Presentation: tables render aligned for the terminal and as real Markdown tables, and
every figure is skipped, with a note, when matplotlib (the ``plot`` extra) is missing."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli.report import write_power_plot
from harness.measure import sweep
from harness.render.figures import PLOT_EXTRA_HINT, render_png
from harness.render.report import render_markdown, render_text, write_report
from harness.render.sections import Section, Table
from harness.render.sweep import sweep_png, sweep_section
from tests.harness.measure.test_sweep import TINY, fake_measure

TABLE = Table.of(["case (legacy | fixed)", "walks"], [["folded", "2 | 1"]], align=["left", "right"])


@pytest.fixture
def without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every ``import matplotlib...`` fail, as on an install without the extra."""
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_a_table_is_aligned_text_and_a_markdown_table_with_escaped_pipes() -> None:
    text = TABLE.render("text").splitlines()
    assert text[0].startswith("case (legacy | fixed)") and text[0].endswith("walks")
    assert text[2].endswith("2 | 1")  # right-aligned under its header
    markdown = TABLE.render("markdown").splitlines()
    assert markdown[0].startswith("| case (legacy \\| fixed)")
    assert set(markdown[1]) <= {"|", "-", ":"}
    assert markdown[2].count(" | ") == 1  # the cell's own pipe is escaped


def test_report_markdown_has_real_tables_and_fences_only_preformatted_text() -> None:
    with_table = Section("work", ok=True, verdict="fine", blocks=("one line", TABLE, "a\nb"))
    text_only = Section("ledger", ok=True, verdict="holds", text="x  y\n1  2")
    markdown = render_markdown(heading="h", ok=True, sections=[with_table, text_only])
    assert "one line\n\n| case (legacy \\| fixed)" in markdown
    assert "```\na\nb\n```" in markdown and "```\nx  y\n1  2\n```" in markdown
    assert with_table.text == "one line\n\n" + TABLE.render("text") + "\n\na\nb"
    assert TABLE.render("text") in render_text(heading="h", ok=True, sections=[with_table])


def test_figures_need_matplotlib_and_say_so(without_matplotlib: None) -> None:
    assert render_png(lambda figure: None) is None
    assert "pip install" in PLOT_EXTRA_HINT


def test_the_report_skips_its_power_plot_without_matplotlib(
    tmp_path: Path, without_matplotlib: None
) -> None:
    messages: list[str] = []
    stats = Section("stats", ok=True, verdict="", data={"power_curves": [{"points": []}]})
    write_power_plot(tmp_path, [stats], progress=messages.append)
    assert messages == [f"report-power.png skipped: {PLOT_EXTRA_HINT}"]
    assert stats.text == messages[0]  # the report says so too
    assert not list(tmp_path.iterdir())


def test_the_sweep_skips_its_plot_without_matplotlib(
    tmp_path: Path, without_matplotlib: None
) -> None:
    config = replace(TINY, vocab=(64, 128))
    records = sweep.run_sweep(config, out_dir=tmp_path, measure=fake_measure([]))
    summary = sweep.summarise(records, clock=config.clock, checked=False)
    png = sweep_png(config=config, records=records, summary=summary)
    paths = sweep.write_outputs(
        out_dir=tmp_path, config=config, records=records, summary=summary, png=png
    )
    assert [p.name for p in paths] == [sweep.CSV_FILE, sweep.JSON_FILE]
    section = sweep_section(summary, config=config, paths=paths)
    assert f"{sweep.PNG_FILE} skipped: {PLOT_EXTRA_HINT}" in section.text
    assert not (tmp_path / sweep.PNG_FILE).exists()


def test_a_note_goes_before_the_evidence_in_text_and_markdown() -> None:
    with_table = Section("work", ok=True, verdict="", blocks=(TABLE,))
    with_table.prepend("read me first")
    assert with_table.text.startswith("read me first\n\n")
    assert with_table.markdown().startswith("read me first\n\n| case")
    text_only = Section("ledger", ok=True, verdict="", text="x  y")
    text_only.prepend("read me first")
    assert text_only.text == "read me first\nx  y"


def _power_curves(heads: tuple[str, ...]) -> list[dict[str, object]]:
    """Curves of heads whose measured points coincide (every head rejects at every size)."""
    points = [
        {
            "rows": rows,
            "empirical_power": 1.0,
            "interval_low": 0.8,
            "interval_high": 1.0,
            "predicted_power": 0.99,
        }
        for rows in (8, 64)
    ]
    return [
        {
            "head": head,
            "name": "legacy",
            "target": "far",
            "rounds": 4,
            "level": 1e-6,
            "interval_confidence": 0.95,
            "target_power": 0.9,
            "points": points,
        }
        for head in heads
    ]


def test_the_report_embeds_its_power_figure_in_markdown(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the figure needs the plot extra")
    stats = Section(
        "Statistical oracle",
        ok=True,
        verdict="fine",
        text="rows  p\n8     0.5",
        data={"power_curves": _power_curves(("vanilla",))},
    )
    write_power_plot(tmp_path, [stats], progress=lambda message: None)
    markdown = render_markdown(heading="h", ok=True, sections=[stats])
    assert "](report-power.png)" in markdown and markdown.count("![") == 1
    assert "```\nrows  p\n8     0.5\n```" in markdown  # the evidence keeps its layout
    assert "figure: report-power.png" in stats.text
    assert (tmp_path / "report-power.png").read_bytes().startswith(b"\x89PNG")


def test_coinciding_measured_points_of_the_power_figure_stay_visible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    figure_module = pytest.importorskip("matplotlib.figure", reason="needs the plot extra")
    from harness.render import power_figure as stats_section

    drawn = figure_module.Figure()
    monkeypatch.setattr(stats_section, "render_png", lambda draw, size: draw(drawn))
    stats_section.power_curves_png(_power_curves(("vanilla", "gated", "rnn")))
    measured = [line for line in drawn.axes[0].lines if "measured" in str(line.get_label())]
    assert len(measured) == 3
    assert all(line.get_markerfacecolor() == "none" for line in measured)  # hollow
    assert len({line.get_marker() for line in measured}) == 3
    assert len({line.get_markersize() for line in measured}) == 3  # nested, none hidden


@pytest.mark.parametrize("command", ["report", "compare", "releases", "stats"])
def test_the_terminal_names_the_markdown_file_the_command_wrote(
    command: str, tmp_path: Path
) -> None:
    sections = [Section(title="t", ok=False, verdict="v", text="a\nb", brief=("a",))]
    written = write_report(tmp_path, stem=command, data={}, text="", markdown="")
    text = render_text(heading="h", ok=False, sections=sections, written=written, long=False)
    named = {word.strip(",.()") for word in text.split() if word.strip(",.()").endswith(".md")}
    assert {Path(n).name for n in named} == {f"{command}.md"}
    assert f"the whole evidence (every case, every test): {command}.md, or --long" in text


def test_a_table_too_wide_for_the_terminal_wraps_its_last_column_to_fit() -> None:
    words = " ".join(f"word{n}" for n in range(40))
    wide = Table.of(["name", "what"], [["a" * 30, words], ["b", "short"]], wrap=(None, 90))
    assert max(len(line) for line in wide.render().splitlines()) > 100  # the planted width
    fitted = wide.fitted()
    assert max(len(line) for line in fitted.render().splitlines()) <= 100
    words_of = [w for w in fitted.render().split() if set(w) != {"-"}]
    assert words_of == [w for w in wide.render().split() if set(w) != {"-"}]  # none cut
    narrow = Table.of(["name", "what"], [["a", "b"]])
    assert narrow.fitted() is narrow
