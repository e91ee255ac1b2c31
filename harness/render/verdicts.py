"""The comparison's sections: how a judgement reads (``harness.judgement``). One
verdict section per implementation as its role judged it, with the statistical oracle's
part inside its lossless verdict when that ran; the divergence ledger between the pair;
and the verdicts and checks tables, as ``Table`` blocks so they are aligned in the
terminal and Markdown tables in a report. Every pass and fail is the judgement's.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from harness.defaults import FIXED, REFERENCE
from harness.judgement import HeldVerdict, Judgement, LedgerVerdict
from harness.options import Roles
from harness.pipeline.check_phrases import CHECK_PHRASES
from harness.pipeline.check_result import Skip, Tier
from harness.pipeline.checks import CHECK_CODES, CHECKS
from harness.pipeline.ledger import LEDGER_CLASSES
from harness.pipeline.records import CaseRecord, CheckRecord
from harness.pipeline.verdicts import (
    Statistical,
)
from harness.render.coverage import coverage_section
from harness.render.sections import TERMINAL_WIDTH, Block, Section, Table


def _verdict_section(held: HeldVerdict, *, title: str) -> Section:
    """One implementation's verdicts as its role judged them, with the failing checks
    and the statistical oracle's part."""
    verdict, name = held.verdict, held.name
    failing = verdict.failures
    lines = [f.line() for f in failing if f.lossless]
    drop_in_lines = [f.line() for f in failing if not f.lossless]
    if drop_in_lines:
        lines += ["", "not drop-in (bit-compatibility with the reference):", *drop_in_lines]
    if verdict.statistical.failed:
        lines += ["", verdict.statistical.describe()]
        if verdict.statistical.carried_by:
            lines.append(f"every rejected test: {verdict.statistical.every_carrier()}")
        if verdict.statistical.call_findings:
            lines += ["every finding on the oracle's calls:", verdict.statistical.every_finding()]
    statistical_line = verdict.statistical_line()
    lossless_failures = len([f for f in failing if f.lossless])
    failing_cases = len({f.case for f in failing if f.lossless})
    of_cases = f"{verdict.judged}/{verdict.cases} cases"
    if verdict.outside_contract:
        of_cases += f" ({verdict.outside_contract} not run: outside its contract)"
    data = {"verdict": verdict.to_json()}
    if held.expected_to_fail:
        line = (
            f"{name}: fails a lossless check, as expected — {verdict.reason}"
            if held.ok
            else f"{name}: expected to fail a lossless check, but is {verdict.summary()}"
        )
        if lossless_failures or verdict.lossless:  # else the reason is the oracle's already
            line += f"; {statistical_line}"
        return Section(
            title=title,
            ok=held.ok,
            verdict=line,
            text="\n".join(lines).strip(),
            data=data,
            brief=_first_failures(lines),
        )
    if verdict.cases and not verdict.judged:
        line = f"{name}: {verdict.summary()}"
    elif not verdict.lossless and not lossless_failures:
        line = f"{name}: passes every lossless check on {of_cases}, but NOT lossless"
    elif not verdict.lossless:
        line = (
            f"{name}: FAILS {lossless_failures} lossless check(s) "
            f"on {failing_cases} of {verdict.cases} cases — {verdict.summary()}"
        )
    elif verdict.drop_in:
        exactness = (
            "bit-exact vs reference in float32, within dtype tolerance otherwise"
            if name != REFERENCE
            else "self-consistent"
        )
        line = f"{name}: clean on {of_cases} — lossless and drop-in ({exactness})"
    else:
        line = f"{name}: lossless on {of_cases}; not drop-in: {verdict.reason}"
    line += f"; {statistical_line}"
    if not held.ok:
        line += f" [required: {held.held_to}]"
    return Section(
        title=title,
        ok=held.ok,
        verdict=line,
        text="\n".join(lines).strip(),
        data={**data, "required": held.held_to},
        brief=_first_failures(lines),
    )


BRIEF_FAILURES = 6  # failing checks an implementation's section shows by default


def _first_failures(lines: list[str]) -> tuple[Block, ...]:
    """The first failing checks, each cut to the terminal's width, and how many more."""
    failures = [line for line in lines if line]
    shown = [textwrap.shorten(f, width=TERMINAL_WIDTH, placeholder=" ...") for f in failures]
    more = len(failures) - BRIEF_FAILURES
    tail = [f"... and {more} more (the whole evidence, or --long)"] if more > 0 else []
    return ("\n".join([*shown[:BRIEF_FAILURES], *tail]),) if failures else ()


def _ledger_section(records: Sequence[CaseRecord], ledger: LedgerVerdict) -> Section:
    buggy, fixed = ledger.pair
    entries = [(r["label"], r["ledger"]) for r in records if r["ledger"] is not None]
    broken, missing = ledger.broken, ledger.never_observed
    width = max((len(label) for label, _ in entries), default=10)
    rows = []
    for name in LEDGER_CLASSES:
        showing = [(label, e) for label, e in entries if name in e["observed"]]
        first = f"{showing[0][0]}: {showing[0][1]['evidence'].get(name, '')}" if showing else "-"
        rows.append([name, len(showing), first])
    classes_table = Table.of(
        ["class", "cases", "first evidence"],
        rows,
        align=("left", "right", "left"),
        wrap=(None, None, PROSE_WIDTH),
    )
    lines = [f"{'case'.ljust(width)}  divergence classes observed (evidence)"]
    for label, entry in entries:
        mark = "ok  " if entry["holds"] else "FAIL"
        classes = ", ".join(entry["observed"]) or "-"
        lines.append(f"{label.ljust(width)}  {mark} {classes}")
        for name in entry["observed"]:
            lines.append(f"{'':{width}}         {name}: {entry['evidence'].get(name, '')}")
        if entry["latent"]:
            lines.append(
                f"{'':{width}}         latent (walks drew equal tokens): {entry['latent']}"
            )
        lines.extend(f"{'':{width}}         PROBLEM: {p}" for p in entry["problems"])
    if ledger.ok:
        verdict = (
            f"{buggy}: reproduces the documented bug — ledger holds on {len(entries)}/"
            f"{len(entries)} cases (pair {buggy},{fixed})"
        )
    else:
        parts = []
        if broken:
            parts.append(f"ledger broken on {len(broken)} case(s)")
        if missing:
            parts.append(f"classes never observed: {', '.join(missing)}")
        if not entries:
            parts.append(f"{buggy} and {fixed} were not both run")
        verdict = f"{buggy}: does NOT reproduce the documented bug — " + "; ".join(parts)
    pair_line = f"pair: {buggy} (buggy) vs {fixed} (fixed)"
    return Section(
        title=f"Divergence ledger: {buggy} vs {fixed}",
        ok=ledger.ok,
        verdict=verdict,
        blocks=(pair_line, classes_table, "\n".join(lines)),
        data={"pair": list(ledger.pair)},
        brief=(replace(classes_table, wrap=(None, None, BRIEF_PROSE_WIDTH)),),
    )


PROSE_WIDTH = 88  # where a table's prose cell wraps on the terminal (whole in Markdown)
BRIEF_PROSE_WIDTH = 66  # the same in the default terminal report, whose tables fit 100 columns


def _checks_of(record: CaseRecord, name: str) -> list[CheckRecord]:
    """``name``'s checks on the case (none when it did not run there)."""
    entry = record["implementations"].get(name)
    return [] if entry is None else entry["checks"]


def _checks_cell(checks: list[CheckRecord]) -> str:
    if not checks:
        return "-"
    if any(c["name"] == "ran" and c["skip"] == Skip.OUTSIDE_CONTRACT.value for c in checks):
        return "not run: outside its contract"
    lossless = [
        CHECK_CODES.get(c["name"], c["name"])
        for c in checks
        if c["status"] == "fail" and c["tier"] == Tier.LOSSLESS
    ]
    drop_in = [
        CHECK_CODES.get(c["name"], c["name"])
        for c in checks
        if c["status"] == "fail" and c["tier"] != Tier.LOSSLESS
    ]
    if lossless:
        return "FAIL " + ",".join(lossless + drop_in)
    if drop_in:
        return "lossless; not drop-in " + ",".join(drop_in)
    return "pass"


def _checks_table(
    records: Sequence[CaseRecord], names: list[str], *, roles: Roles
) -> tuple[Block, ...]:
    """Under which implementations a FAIL is expected, the table of each case's failed
    checks per implementation, and its legend: every check's code in the table, its tier
    and what it holds, in the order the checks run."""
    legend = Table.of(
        ["code", "check", "tier", "holds that"],
        [
            [
                CHECK_CODES.get(check.name, check.name),
                check.name,
                check.tier.label,
                CHECK_PHRASES[check.name],
            ]
            for check in CHECKS
        ],
    )
    expected = [
        f"{name} ({role}, held to {held_to})"
        for name in names
        for role, held_to in [roles.describe(name)]
        if name == roles.buggy or name in roles.expect_fail
    ]
    notes: tuple[Block, ...] = ()
    if expected:
        notes = (
            f"expected to fail checks: {', '.join(expected)}; a failed check under any "
            "other implementation fails its verdict",
        )
    rows = [
        [
            record["label"],
            *(_checks_cell(_checks_of(record, n)) for n in names),
        ]
        for record in records
    ]
    return *notes, Table.of(["case", *names], rows), "the codes of failed checks:", legend


def comparison_sections(judgement: Judgement) -> list[Section]:
    """Verdict sections: fixed, the pair's ledger, reference, then every other
    implementation, each as its role judged it (the buggy side of the pair by the
    ledger alone); then the verdicts table, what they covered and the checks table."""
    records = judgement.records
    roles = judgement.options.roles
    names = judgement.names
    sections: list[Section] = []
    titles = {FIXED: "Fixed sampler", REFERENCE: "Reference oracle"}
    ordered = [n for n in (FIXED, REFERENCE) if n in names]
    ordered += [n for n in names if n not in ordered]
    for name in ordered:
        if not judgement.judged_by_checks(name):
            continue
        title = titles.get(name, f"Implementation {name}")
        sections.append(_verdict_section(judgement.held_verdict(name), title=title))
    if judgement.ledger is not None:
        index = 1 if sections and sections[0].title == titles[FIXED] else 0
        sections.insert(index, _ledger_section(records, judgement.ledger))
    if records:
        sections.append(
            Section(
                title="Verdicts per implementation",
                ok=True,
                verdict="",
                blocks=(_verdicts_table(judgement),),
                brief=(_verdicts_table(judgement, brief=True),),
            )
        )
        statistical = None if judgement.oracle is None else judgement.oracle.coverage
        sections.append(coverage_section(list(records), statistical=statistical))
        sections.append(
            Section(
                title="Checks per implementation",
                ok=True,
                verdict="",
                blocks=_checks_table(records, names, roles=roles),
                brief=(_checks_summary(records, names, roles=roles),),
            )
        )
    return sections


def _statistical_cell(statistical: Statistical) -> str:
    if not statistical.ran:
        return "not run"
    if statistical.not_judged is not None:
        return "not judged"
    if statistical.error is not None:
        return "raised"
    return "REJECTED" if statistical.rejected else "pass"


def _verdicts_table(judgement: Judgement, *, brief: bool = False) -> Table:
    """Implementation, role, requirement, the statistical part, the two verdicts, and why
    not drop-in; ``brief``: without the role, narrow enough for 100 columns."""
    rows = [
        [
            held.name,
            held.role,
            held.held_to,
            _statistical_cell(held.verdict.statistical),
            "yes" if held.verdict.lossless else "NO",
            "yes" if held.verdict.drop_in else "no",
            held.verdict.summary(),
        ]
        for held in judgement.held
    ]
    header = ["implementation", "role", "held to", "statistical", "lossless", "drop-in", "verdict"]
    if brief:  # the verdicts' reasons are the verdict lines above the evidence
        header, rows = header[:1] + header[2:-1], [row[:1] + row[2:-1] for row in rows]
        return Table.of(header, rows)
    return Table.of(header, rows, wrap=(None, 24, None, None, None, None, PROSE_WIDTH // 2))


def _checks_summary(records: Sequence[CaseRecord], names: list[str], *, roles: Roles) -> Table:
    """Per implementation: on how many cases it passed every check, and which checks
    failed how often (the per-case table is the whole evidence)."""
    rows = []
    for name in names:
        failed: Counter[str] = Counter()
        ran = clean = 0
        for record in records:
            checks = _checks_of(record, name)
            if not checks:
                continue
            ran += 1
            failing = [
                CHECK_CODES.get(c["name"], c["name"]) for c in checks if c["status"] == "fail"
            ]
            clean += not failing
            failed.update(failing)
        expected = " (expected)" if name == roles.buggy or name in roles.expect_fail else ""
        rows.append(
            [
                name + expected,
                f"{clean}/{ran}",
                ", ".join(f"{code} x{count}" for code, count in failed.items()) or "-",
            ]
        )
    return Table.of(
        ["implementation", "cases clean", "failed checks (code x cases)"],
        rows,
        wrap=(None, None, BRIEF_PROSE_WIDTH - 10),
    )


def judgement_sections(judgement: Judgement) -> list[Section]:
    """Every section of a judged comparison: the verdict sections, then the statistical
    oracle's and the eliminated work's where they ran, before the checks table."""
    from harness.render.statistics import stats_section
    from harness.render.work import work_section

    sections = comparison_sections(judgement)
    if judgement.oracle is not None:
        stats = stats_section(judgement.oracle, roles=judgement.options.roles)
        sections.insert(max(len(sections) - 1, 0), stats)
    if judgement.work is not None:
        sections.insert(max(len(sections) - 1, 0), work_section(judgement.work))
    return sections
