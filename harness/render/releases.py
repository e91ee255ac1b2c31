"""The advisory as a report section: one row per release (its era, lossless, drop-in,
the verifiers its oracle ran under and the randomness of each, its life across the
junction's states and rows, its findings' classes, what was not covered, the time) and
one row per defect class (affected versions, first and last, first fixed), then each
finding's evidence and the command that replays it, and each row's life in full. It
formats the rows ``harness.releases.sweep`` made and the verdict
``harness.releases.advisory`` gave, and decides nothing."""

from __future__ import annotations

from collections.abc import Sequence

from harness.releases.advisory import Advisory, AdvisoryVerdict
from harness.releases.laws import LAWS_GRID
from harness.releases.sweep import ReleaseRow
from harness.render.sections import Block, Section, Table

TITLE = "Releases (docs/releases.md)"


def _yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def oracle_under(row: ReleaseRow) -> str:
    """The verifiers its oracle ran under (chain, the control, marked so when the
    server's own ran too), the randomness each was judged on and how many of the
    request-parameter groups it ran; then how many of the grid's sets its verify target
    was held to its sampler's law on, where it was (``harness.releases.laws``)."""
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
    laws = row["grid"].get(LAWS_GRID)
    if laws:
        said.append(f"{LAWS_GRID}: {len(laws)} set(s) alone or mixed")
    return "; ".join(said)


def life_cell(row: ReleaseRow) -> str:
    """The states its life ran and the rows of each (``-``: no life)."""
    life = row["life"]
    if life is None:
        return "-"
    states = ", ".join(f"{state} {said['rows']}" for state, said in life["states"].items())
    states = states or "no state judged"
    return f"{'lossless' if life['lossless'] else 'NOT lossless'}: {states}"


def _bound(bound: float | None) -> str:
    return "no bound" if bound is None else f"sees a fixed token on {bound:.1%} of its rows"


def life_lines(rows: Sequence[ReleaseRow]) -> str:
    """Each row's life: its server, depth and buffers, each state's rows and bound, and
    what stands in."""
    lines = []
    for row in rows:
        life = row["life"]
        if life is None:
            continue
        lines.append(
            f"- {row['package']} {row['version']}: {life['server']}, {life['steps']} steps, "
            f"{life['calls']} drafter calls; {life['depth']}; keeps {', '.join(life['kept'])} "
            f"(the verifier reads {', '.join(life['verifier_reads'])}), poisoned first"
        )
        lines += [
            f"  {state}: {said['rows']} rows, p = {said['p_value']:.3g}, {_bound(said['bound'])}"
            for state, said in life["states"].items()
        ]
        lines += [f"  stands in: {line}" for line in life["stands_in"]]
    return "\n".join(lines)


def release_table(rows: Sequence[ReleaseRow]) -> Table:
    return Table.of(
        ["package", "version", "era", "lossless", "drop-in", "oracle under", "life: rows a state",
         "findings", "not judged / not covered", "s"],
        [
            [
                row["package"],
                row["version"],
                row["era"],
                _yes_no(row["lossless"]) if row["judged"] else "not judged",
                _yes_no(row["drop_in"]) if row["judged"] else "-",
                oracle_under(row),
                life_cell(row),
                ", ".join(f["class"] for f in row["findings"]) or "-",
                "; ".join(row["not_covered"]) or "-",
                f"{row['seconds']:.0f}",
            ]
            for row in rows
        ],
        wrap=[None, None, None, None, None, 30, 24, 24, 48, None],
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
    lives = life_lines(rows)
    if lives:
        blocks.append(f"Lives across the junction (docs/design.md):\n{lives}")
    return Section(
        title=TITLE,
        ok=verdict.ok,
        verdict=verdict.line(),
        blocks=tuple(blocks),
        brief=tuple(blocks[:2]),
        data={"releases": list(rows), "advisories": list(advisories)},
    )
