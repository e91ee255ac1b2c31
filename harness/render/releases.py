"""The advisory as a report section: one row per release (its era, lossless, drop-in,
the verifiers its oracle ran under and the randomness of each, its findings' classes,
what was not covered, the time) and one row per defect class (affected versions, first
and last, first fixed), then each finding's evidence and the command that replays it.
It formats the rows ``harness.releases.sweep`` made and the verdict
``harness.releases.advisory`` gave, and decides nothing."""

from __future__ import annotations

from collections.abc import Sequence

from harness.releases.advisory import Advisory, AdvisoryVerdict
from harness.releases.sweep import ReleaseRow
from harness.render.sections import Block, Section, Table

TITLE = "Releases (docs/releases.md)"


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def oracle_under(row: ReleaseRow) -> str:
    """The verifiers its oracle ran under (chain, the control, marked so when the
    server's own ran too), the randomness each was judged on and how many of the
    request-parameter groups it ran."""
    verifiers = row["verifier"]
    if not verifiers:
        return "-"
    said = []
    for name in verifiers:
        role = " (control)" if name == "chain" and len(verifiers) > 1 else ""
        groups = row["grid"].get(name, [])
        said.append(
            f"{name}{role} on {row['randomness'].get(name, '?')}, {len(groups)} parameter "
            f"groups ({', '.join(groups) or 'none'})"
        )
    return "; ".join(said)


def release_table(rows: Sequence[ReleaseRow]) -> Table:
    return Table.of(
        ["package", "version", "era", "lossless", "drop-in", "oracle under", "findings",
         "not judged / not covered", "s"],
        [
            [
                row["package"],
                row["version"],
                row["era"],
                _yes_no(row["lossless"]) if row["judged"] else "not judged",
                _yes_no(row["drop_in"]) if row["judged"] else "-",
                oracle_under(row),
                ", ".join(f["class"] for f in row["findings"]) or "-",
                "; ".join(row["not_covered"]) or "-",
                f"{row['seconds']:.0f}",
            ]
            for row in rows
        ],
        wrap=[None, None, None, None, None, 30, 24, 48, None],
    )  # fmt: skip


def advisory_table(advisories: Sequence[Advisory]) -> Table:
    return Table.of(
        ["class", "package", "affected", "first", "last", "first fixed"],
        [
            [
                a["class"],
                a["package"],
                ", ".join(a["affected"]["versions"]),
                a["affected"]["first"],
                a["affected"]["last"],
                a["fixed_in"] or "not fixed in the judged releases",
            ]
            for a in advisories
        ],
        wrap=[None, None, 30, None, None, None],
    )


def releases_section(
    rows: Sequence[ReleaseRow], advisories: Sequence[Advisory], *, verdict: AdvisoryVerdict
) -> Section:
    """The advisory under its verdict line (what the sweep found, shown, not decided)."""
    evidence = "\n".join(
        f"- {row['package']} {row['version']}: {f['class']}: {f['evidence']}\n  repro: {f['repro']}"
        for row in rows
        for f in row["findings"]
    )
    blocks: list[Block] = [release_table(rows)]
    if advisories:
        blocks.append(advisory_table(advisories))
    if evidence:
        blocks.append(f"Findings, first evidence and repro:\n{evidence}")
    return Section(
        title=TITLE,
        ok=verdict.ok,
        verdict=verdict.line(),
        blocks=tuple(blocks),
        brief=tuple(blocks[:2]),
        data={"releases": list(rows), "advisories": list(advisories)},
    )
