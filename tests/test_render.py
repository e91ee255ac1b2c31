"""Presentation: tables render aligned for the terminal and as real Markdown tables, and
every figure is skipped, with a note, when matplotlib (the ``plot`` extra) is missing."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli import _write_power_plot
from harness.measure import sweep
from harness.render.figures import PLOT_EXTRA_HINT, render_png
from harness.render.report import render_markdown, render_text
from harness.render.sections import Section, Table
from tests.test_sweep import TINY, fake_measure

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
    markdown = render_markdown(heading="h", sections=[with_table, text_only])
    assert "one line\n\n| case (legacy \\| fixed)" in markdown
    assert "```\na\nb\n```" in markdown and "```\nx  y\n1  2\n```" in markdown
    assert with_table.text == "one line\n\n" + TABLE.render("text") + "\n\na\nb"
    assert TABLE.render("text") in render_text(heading="h", sections=[with_table])


def test_figures_need_matplotlib_and_say_so(without_matplotlib: None) -> None:
    assert render_png(lambda figure: None) is None
    assert "pip install" in PLOT_EXTRA_HINT


def test_the_report_skips_its_power_plot_without_matplotlib(
    tmp_path: Path, without_matplotlib: None
) -> None:
    messages: list[str] = []
    stats = Section("stats", ok=True, verdict="", data={"power_curves": [{"points": []}]})
    _write_power_plot(tmp_path, [stats], progress=messages.append)
    assert messages == [f"report-power.png skipped: {PLOT_EXTRA_HINT}"]
    assert stats.text == messages[0]  # the report says so too
    assert not list(tmp_path.iterdir())


def test_the_sweep_skips_its_plot_without_matplotlib(
    tmp_path: Path, without_matplotlib: None
) -> None:
    config = replace(TINY, vocab=(64, 128))
    records = sweep.run_sweep(config, out_dir=tmp_path, measure=fake_measure([]))
    summary = sweep.summarise(records, clock=config.clock, checked=False)
    paths = sweep.write_outputs(out_dir=tmp_path, config=config, records=records, summary=summary)
    assert [p.name for p in paths] == [sweep.CSV_FILE, sweep.JSON_FILE]
    section = sweep.sweep_section(summary, config=config, paths=paths)
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
