"""The report stage: format sections for people (terminal, Markdown) and machines (JSON).

It only formats and writes; every number it shows was computed by an earlier
stage. The JSON report is deterministic for a given case set and seed: wall
times live in a separate ``timing`` object so everything else is byte-identical
between runs.
"""

from __future__ import annotations

import json
import platform
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.io.files import write_atomically
from harness.render.sections import TERMINAL_WIDTH, Section

REPORT_SCHEMA = "dspark-harness/report"
# 2: the judgement of a run that judged implementations (``"judgement"``,
# ``harness.judgement.Judgement.to_json``) replaces version 1's ``"verdicts"``
REPORT_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Report:
    """What one command reports, whatever the output (terminal, Markdown, JSON): whether
    it holds (``ok``, decided before it is formatted), its sections, the per-case
    records, the wall times and, when it judged implementations, the judgement's JSON."""

    command: str
    seed: int
    device: str
    heading: str
    ok: bool
    sections: list[Section]
    cases: Sequence[Mapping[str, Any]] = ()
    timing: dict[str, float] = field(default_factory=dict)
    judgement: dict[str, Any] | None = None
    # what the command found, said in place of PASS/FAIL (the releases advisory: "2 of 20
    # releases affected by 1 defect class ..."), and its findings at the JSON's top level
    said: str = ""
    top_level: Mapping[str, Any] = field(default_factory=dict)


def verdict_line(ok: bool, *, said: str = "") -> str:
    return f"VERDICT: {said or ('PASS' if ok else 'FAIL')}"


def render_text(
    *,
    heading: str,
    ok: bool,
    sections: list[Section],
    said: str = "",
    written: Sequence[Path] = (),
    long: bool = True,
) -> str:
    """Verdict first (one line per section; without ``long``, wrapped to the terminal's
    width), then the evidence of each section (without ``long``, what each section shows
    by default), the files ``written`` when given (and, without ``long``, the one that
    holds the whole evidence), and the verdict again as the last line, where a terminal
    leaves it in view."""
    lines = [heading, "", verdict_line(ok, said=said)]
    for section in sections:
        if not section.verdict:
            continue
        mark = f"  [{'ok' if section.ok else 'FAIL'}] "
        if long:  # whole lines, as report.txt keeps them for grep
            lines.append(mark + section.verdict)
        else:
            lines += textwrap.wrap(
                section.verdict,
                width=TERMINAL_WIDTH,
                initial_indent=mark,
                subsequent_indent=" " * len(mark),
                break_long_words=False,
                break_on_hyphens=False,
            )
    for section in sections:
        evidence = section.text if long else section.brief_text()
        if not evidence:
            continue
        lines += ["", f"== {section.title} ==", evidence]
    if written:
        lines += ["", f"written: {', '.join(str(path) for path in written)}"]
    if not long and any(s.brief is not None for s in sections):
        where = "".join(f"{path.name}, or " for path in written if path.suffix == ".md")
        lines.append(f"the whole evidence (every case, every test): {where}--long")
    lines += ["", verdict_line(ok, said=said)]
    return "\n".join(lines) + "\n"


def render_markdown(*, heading: str, ok: bool, sections: list[Section], said: str = "") -> str:
    lines = [f"# {heading}", "", f"**Verdict: {said or ('PASS' if ok else 'FAIL')}**", ""]
    for section in sections:
        if section.verdict:
            lines.append(f"- {'✅' if section.ok else '❌'} {section.verdict}")
    for section in sections:
        if section.text:
            lines += ["", f"## {section.title}", "", section.markdown()]
    return "\n".join(lines) + "\n"


def environment() -> dict[str, Any]:
    """Versions that define what the numbers mean."""
    import torch  # here, not at import: the command line answers --help without it

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "cuda_device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def report_json(report: Report) -> dict[str, Any]:
    """The machine-readable report (``"judgement"`` only when the command judged
    implementations)."""
    extra = {} if report.judgement is None else {"judgement": report.judgement}
    return {
        "schema": REPORT_SCHEMA,
        "schema_version": REPORT_SCHEMA_VERSION,
        "command": report.command,
        "seed": report.seed,
        "device": report.device,
        "ok": report.ok,
        **({"verdict": report.said} if report.said else {}),
        **report.top_level,
        **extra,
        "environment": environment(),
        "sections": [
            {
                "title": s.title,
                "ok": s.ok,
                "verdict": s.verdict,
                "text": s.text,
                "data": s.data,
            }
            for s in report.sections
        ],
        "cases": list(report.cases),
        "timing": report.timing,
    }


def write_report(
    out_dir: Path, *, stem: str, data: dict[str, Any], text: str, markdown: str
) -> list[Path]:
    """Write ``STEM.json``, ``STEM.md`` and ``STEM.txt`` under ``out_dir``."""
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.txt"]
    contents = [json.dumps(data, indent=2, sort_keys=False) + "\n", markdown, text]
    for path, content in zip(paths, contents, strict=True):
        write_atomically(path, content)
    return paths


def emit_report(report: Report, *, out_dir: Path, as_json: bool, long: bool = False) -> bool:
    """Write ``COMMAND.{json,md,txt}`` under ``out_dir`` (the text whole), print the
    text (the sections' default evidence unless ``long``) or the JSON, and return
    whether the report holds (``Report.ok``)."""
    data = report_json(report)
    heading, sections, ok, said = report.heading, report.sections, report.ok, report.said
    text = render_text(heading=heading, ok=ok, sections=sections, said=said)
    markdown = render_markdown(heading=heading, ok=ok, sections=sections, said=said)
    paths = write_report(out_dir, stem=report.command, data=data, text=text, markdown=markdown)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        shown = render_text(
            heading=heading, ok=ok, sections=sections, said=said, written=paths, long=long
        )
        print(shown, end="")
    return report.ok
