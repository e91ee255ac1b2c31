"""The unit a report is made of: one section with its verdict, text and data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Section:
    """One part of the report.

    ``ok`` feeds the exit code; ``verdict`` is the one line shown first; ``text`` is
    the preformatted evidence for the terminal and Markdown; ``data`` goes to JSON.
    """

    title: str
    ok: bool
    verdict: str
    text: str = ""
    data: dict[str, Any] = field(default_factory=dict)
