"""The unit a report is made of: one section with its verdict, its evidence (prose and
tables) and its data; and how that evidence renders as terminal text or Markdown."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness.render.tables import Alignment, TableFormat, table

TERMINAL_WIDTH = 100  # what the default terminal report fits; --long and report.md hold it all


@dataclass(frozen=True)
class Table:
    """Rows of cells under a header; rendered aligned for the terminal (long cells
    wrapped between words at ``wrap``'s widths) and as a real Markdown table in
    ``report.md``."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    align: tuple[Alignment, ...] | None = None
    wrap: tuple[int | None, ...] | None = None

    @classmethod
    def of(
        cls,
        header: Sequence[str],
        rows: Sequence[Sequence[object]],
        *,
        align: Sequence[Alignment] | None = None,
        wrap: Sequence[int | None] | None = None,
    ) -> Table:
        return cls(
            tuple(header),
            tuple(tuple(str(cell) for cell in row) for row in rows),
            None if align is None else tuple(align),
            None if wrap is None else tuple(wrap),
        )

    def render(self, fmt: TableFormat = "text") -> str:
        return table(self.header, self.rows, fmt=fmt, align=self.align, wrap=self.wrap)

    def fitted(self, width: int = TERMINAL_WIDTH) -> Table:
        """This table with its last column wrapped narrower, where its terminal text is
        wider than ``width``, so that it fits (down to the column's header: the other
        columns stay as wide as their cells)."""
        over = max(len(line) for line in self.render().splitlines()) - width
        if over <= 0:
            return self
        cells = [self.header[-1], *(row[-1] for row in self.rows)]
        natural = max(len(line) for cell in cells for line in cell.splitlines())
        wrap = list(self.wrap or (None,) * len(self.header))
        shown = natural if wrap[-1] is None else min(wrap[-1], natural)
        wrap[-1] = max(len(self.header[-1]), shown - over)
        return replace(self, wrap=tuple(wrap))


def right_aligned(columns: int) -> list[Alignment]:
    """``columns`` right-aligned columns (numbers)."""
    right: Alignment = "right"
    return [right] * columns


@dataclass(frozen=True)
class Figure:
    """A figure file written beside the report: named on the terminal, embedded as an
    image in ``report.md`` (``path`` relative to the report's folder)."""

    path: str
    caption: str

    def render(self, fmt: TableFormat = "text") -> str:
        if fmt == "markdown":
            return f"![{self.caption}]({self.path})"
        return f"figure: {self.path} ({self.caption})"


Block = str | Table | Figure  # a paragraph of preformatted text, a table, or a figure


def render_blocks(blocks: Sequence[Block], *, fmt: TableFormat) -> str:
    """Blocks one after the other. In Markdown a one-line paragraph stays prose, a
    multi-line one keeps its layout in a code fence, and tables are Markdown tables."""
    parts = []
    for block in blocks:
        if isinstance(block, Table | Figure):
            parts.append(block.render(fmt))
        elif fmt == "markdown" and "\n" in block.strip("\n"):
            parts.append("```\n" + block.strip("\n") + "\n```")
        else:
            parts.append(block.strip("\n") if fmt == "markdown" else block)
    return "\n\n".join(parts)


@dataclass
class Section:
    """One part of the report.

    ``ok`` is the judgement's, copied (it decides nothing here); ``verdict`` is the one
    line shown first; ``blocks`` are the evidence (prose and tables); ``text`` is that
    evidence as terminal text (given directly by sections without tables); ``brief`` is
    what the terminal shows of it by default (``None``: all of it; ``--long`` shows all
    of it, and ``report.md`` and ``report.txt`` always do); ``data`` goes to JSON.
    """

    title: str
    ok: bool
    verdict: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    blocks: tuple[Block, ...] = ()
    brief: tuple[Block, ...] | None = None

    def brief_text(self) -> str:
        """The evidence the terminal shows by default."""
        return self.text if self.brief is None else render_blocks(self.brief, fmt="text")

    def __post_init__(self) -> None:
        if self.blocks and not self.text:
            self.text = render_blocks(self.blocks, fmt="text")

    def prepend(self, block: Block) -> None:
        """Put ``block`` before the evidence (a note on how to read it)."""
        if self.blocks:
            self.blocks = (block, *self.blocks)
            self.text = render_blocks(self.blocks, fmt="text")
        else:
            first = block if isinstance(block, str) else block.render("text")
            self.text = f"{first}\n{self.text}" if self.text else first

    def append(self, block: Block) -> None:
        """Put ``block`` after the evidence (a figure, or a note on what was left out);
        text-only evidence becomes the first block, so that in Markdown it keeps its
        layout and the new block renders as itself (an image, a table, prose)."""
        earlier = self.blocks or ((self.text,) if self.text else ())
        self.blocks = (*earlier, block)
        self.text = render_blocks(self.blocks, fmt="text")

    def markdown(self) -> str:
        """The evidence as Markdown: real tables where the section has them."""
        if self.blocks:
            return render_blocks(self.blocks, fmt="markdown")
        return f"```\n{self.text}\n```" if self.text else ""
