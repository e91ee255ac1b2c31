"""The comparison stage: run cases, check every implementation, hold legacy to the ledger.

``evaluate_run`` turns a case run into a ``CaseVerdict`` (checks per implementation,
the ledger entry); ``case_record`` makes it a plain JSON record; ``compare`` runs a
list of cases into records, appending each finished one to a journal so that an
interrupted comparison resumes where it stopped; ``comparison_sections`` formats
records into report sections: the two verdicts of every implementation against
what its role requires (``harness.pipeline.verdicts``), with the statistical
oracle's verdict inside each lossless verdict when it ran, and whether the buggy
side of the pair (default ``legacy,fixed``) reproduces the documented bug. Their
tables are ``Table`` blocks: aligned in the terminal, Markdown tables in a report.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.io.fingerprint import run_fingerprint
from harness.io.journal import Journal, canonical
from harness.pipeline.case import Case
from harness.pipeline.checks import CheckResult, check_matches_reference, self_checks
from harness.pipeline.ledger import LEDGER_CLASSES, LedgerEntry, observe_divergence
from harness.pipeline.memory import check_cases_fit
from harness.pipeline.runner import DEFAULT_TIME_LIMIT_S, CaseRun, ImplResult, run_case
from harness.pipeline.verdicts import (
    DEFAULT_PAIR,
    NOT_RUN,
    Roles,
    Statistical,
    Verdict,
    case_verdict,
    implementation_verdict,
)
from harness.plugins.implementations import Implementation
from harness.render.progress import Progress
from harness.render.sections import Block, Section, Table

LEGACY, FIXED, REFERENCE = "legacy", "fixed", "reference"
CASE_RECORD_SCHEMA = "dspark-harness/case-record"
Record = dict[str, Any]


@dataclass
class CaseVerdict:
    """Everything the report needs to know about one case."""

    case: Case
    checks: dict[str, list[CheckResult]]
    ledger: LedgerEntry | None
    results: dict[str, ImplResult]

    def failed_checks(self, name: str) -> list[CheckResult]:
        return [c for c in self.checks.get(name, []) if c.failed]


def tensor_digest(tensor: torch.Tensor | None) -> str | None:
    """A stable fingerprint of a result tensor (dtype, shape and bytes)."""
    if tensor is None:
        return None
    data = tensor.detach().cpu().contiguous()
    header = f"{data.dtype}:{tuple(data.shape)}:".encode()
    raw = data.view(torch.uint8) if data.dtype != torch.bool else data.to(torch.uint8)
    return hashlib.sha256(header + raw.numpy().tobytes()).hexdigest()[:16]


def evaluate_run(
    run: CaseRun, *, require_observable: bool, pair: tuple[str, str] = DEFAULT_PAIR
) -> CaseVerdict:
    """Checks per implementation and, when both sides of the pair ran, the ledger."""
    checks: dict[str, list[CheckResult]] = {}
    reference = run.results.get(REFERENCE)
    for name, result in run.results.items():
        checks[name] = self_checks(run, result)
        if reference is not None and name != REFERENCE and result.ok:
            checks[name].append(check_matches_reference(run, result, reference))
    ledger = None
    buggy, fixed = pair
    if buggy in run.results and fixed in run.results:
        ledger = observe_divergence(
            run,
            run.results[buggy],
            run.results[fixed],
            require_observable=require_observable,
        )
    return CaseVerdict(case=run.case, checks=checks, ledger=ledger, results=run.results)


def record_key(
    case: Case,
    implementations: list[Implementation],
    *,
    require_observable: bool,
    pair: tuple[str, str] = DEFAULT_PAIR,
) -> str:
    """What a journal record stands for: the case, the implementations, the strictness
    and the pair held to the ledger."""
    identity = {
        "case": case.to_json_dict(),
        "implementations": [[impl.name, impl.spec] for impl in implementations],
        "require_observable": require_observable,
        "pair": list(pair),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def compare(
    cases: list[Case],
    implementations: list[Implementation],
    *,
    require_observable: bool,
    progress: Progress | None = None,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
    journal: Path | None = None,
    resume: bool = False,
    pair: tuple[str, str] = DEFAULT_PAIR,
    isolate: bool = False,
) -> list[Record]:
    """Run and evaluate every case into a record, reporting progress per case.

    With a ``journal``, each finished record is appended to it as one durable JSON
    line stamped with the run's fingerprint (code and outcome-changing options); with
    ``resume``, records already there with the same fingerprint are taken instead of
    rerun (a torn last line is dropped), otherwise the journal starts over.
    """
    check_cases_fit(cases)  # before anything is allocated or any journal touched
    finished: dict[str, Record] = {}
    log: Journal | None = None
    if journal is not None:
        fingerprint = run_fingerprint(
            implementations={impl.name: impl.sampler_class for impl in implementations},
            options={
                "time_limit_s": time_limit_s,
                "require_observable": require_observable,
                "isolate": isolate,
            },
        )
        log = Journal(
            journal, schema=CASE_RECORD_SCHEMA, fingerprint=fingerprint, what="case record"
        )
        finished, notes = log.finished(resume=resume)
        for note in notes:
            if progress is not None:
                progress(note)
    records = []
    for index, case in enumerate(cases, start=1):
        key = record_key(case, implementations, require_observable=require_observable, pair=pair)
        if key in finished:
            if progress is not None:
                progress(f"[{index}/{len(cases)}] {case.label()} (finished earlier)")
            records.append(finished[key])
            continue
        if progress is not None:
            progress(f"[{index}/{len(cases)}] {case.label()}")
        run = run_case(case, implementations, time_limit_s=time_limit_s, isolate=isolate)
        verdict = evaluate_run(run, require_observable=require_observable, pair=pair)
        record = case_record(verdict, key=key, pair=pair)
        records.append(canonical(record) if log is None else log.append(record))
    return records


# -- records -------------------------------------------------------------------------------
def case_record(verdict: CaseVerdict, *, key: str, pair: tuple[str, str] = DEFAULT_PAIR) -> Record:
    """The per-case evidence as a plain JSON record (deterministic: no timings)."""
    implementations = {}
    for name, result in verdict.results.items():
        checks = [
            {
                "name": c.name,
                "tier": c.tier,
                "status": c.status,
                "detail": c.detail,
                "positions": [list(p) for p in c.positions],
            }
            for c in verdict.checks.get(name, [])
        ]
        lossless, drop_in = case_verdict(checks)
        implementations[name] = {
            "lossless": lossless,
            "drop_in": drop_in,
            "error": None
            if result.error is None
            else {"type": result.error.type, "message": result.error.message},
            "tokens_sha256": tensor_digest(result.tokens),
            "corrected_sha256": tensor_digest(result.corrected),
            "confidence_sha256": tensor_digest(result.confidence),
            "work": {
                "walks": result.work.walks,
                "fused_calls": result.work.fused_calls,
                "head_steps": result.work.head_steps,
                "sampler_calls": result.work.sampler_calls,
                "noise_calls": result.work.noise_calls,
                "noise_elements": result.work.noise_elements,
                "aten_ops": result.work.total_ops,
                "rng": result.work.rng,
            },
            "checks": checks,
        }
    ledger = None
    if verdict.ledger is not None:
        ledger = {
            "pair": list(pair),
            "expected": sorted(verdict.ledger.expected),
            "observed": sorted(verdict.ledger.observed),
            "latent": sorted(verdict.ledger.latent),
            "holds": verdict.ledger.holds,
            "problems": list(verdict.ledger.problems),
            "evidence": dict(sorted(verdict.ledger.evidence.items())),
        }
    return {
        "schema": CASE_RECORD_SCHEMA,
        "key": key,
        "label": verdict.case.label(),
        "case": verdict.case.to_json_dict()["case"],
        "implementations": implementations,
        "ledger": ledger,
    }


def _failed_checks(record: Record, name: str) -> list[dict[str, Any]]:
    checks = record["implementations"].get(name, {}).get("checks", [])
    return [c for c in checks if c["status"] == "fail"]


# -- sections ------------------------------------------------------------------------------
Statisticals = Mapping[str, Statistical] | None  # None: the statistical oracle did not run


def full_verdict(records: list[Record], name: str, statistical: Statisticals) -> Verdict:
    """``name``'s verdicts from its checks with the statistical oracle's part in them."""
    part = NOT_RUN if statistical is None else statistical.get(name, NOT_RUN)
    return implementation_verdict(records, name).with_statistical(part)


def _verdict_section(
    name: str, records: list[Record], *, roles: Roles, title: str, statistical: Statisticals
) -> Section:
    """One implementation's verdicts held against its role, with the failing checks and
    the statistical oracle's part."""
    verdict = full_verdict(records, name, statistical)
    failing = verdict.failures
    lines = [
        f"{label}: {check}: {detail}"
        for label, check, tier, detail in failing
        if tier == "lossless"
    ]
    drop_in_lines = [
        f"{label}: {check}: {detail}"
        for label, check, tier, detail in failing
        if tier != "lossless"
    ]
    if drop_in_lines:
        lines += ["", "not drop-in (bit-compatibility with the reference):", *drop_in_lines]
    if verdict.statistical.failed:
        lines += ["", verdict.statistical.describe()]
        if verdict.statistical.carried_by:
            lines.append(f"every rejected test: {verdict.statistical.carried_by}")
    statistical_line = verdict.statistical_line()
    lossless_failures = len([f for f in failing if f[2] == "lossless"])
    failing_cases = len({label for label, _, tier, _ in failing if tier == "lossless"})
    of_cases = f"{verdict.cases}/{verdict.cases} cases"
    data = {"verdict": verdict.to_json()}
    if name in roles.expect_fail:
        ok = not verdict.lossless
        line = (
            f"{name}: fails a lossless check, as expected — {verdict.reason}"
            if ok
            else f"{name}: expected to fail a lossless check, but is {verdict.summary()}"
        )
        if lossless_failures or verdict.lossless:  # else the reason is the oracle's already
            line += f"; {statistical_line}"
        return Section(
            title=title,
            ok=ok,
            verdict=line,
            text="\n".join(lines).strip(),
            data=data,
        )
    required = roles.requirement(name)
    ok = verdict.meets(required)
    if not verdict.lossless and not lossless_failures:
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
    if not ok:
        line += f" [required: {required}]"
    return Section(
        title=title,
        ok=ok,
        verdict=line,
        text="\n".join(lines).strip(),
        data={**data, "required": required},
    )


def _ledger_section(records: list[Record], *, require_coverage: bool, roles: Roles) -> Section:
    buggy, fixed = roles.pair
    entries = [(r["label"], r["ledger"]) for r in records if r["ledger"] is not None]
    broken = [(label, e) for label, e in entries if not e["holds"]]
    seen = {name for _, e in entries for name in e["observed"]}
    missing = sorted(set(LEDGER_CLASSES) - seen) if require_coverage else []
    width = max((len(label) for label, _ in entries), default=10)
    rows = []
    for name in LEDGER_CLASSES:
        showing = [(label, e) for label, e in entries if name in e["observed"]]
        first = f"{showing[0][0]}: {showing[0][1]['evidence'].get(name, '')}" if showing else "-"
        rows.append([name, len(showing), first[:150]])
    classes_table = Table.of(
        ["class", "cases", "first evidence"], rows, align=("left", "right", "left")
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
    ok = not broken and not missing and bool(entries)
    if ok:
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
    return Section(
        title=f"Divergence ledger: {buggy} vs {fixed}",
        ok=ok,
        verdict=verdict,
        blocks=(f"pair: {buggy} (buggy) vs {fixed} (fixed)", classes_table, "\n".join(lines)),
        data={"pair": list(roles.pair)},
    )


CHECK_CODES = {
    "ran": "RAN",
    "outputs_written": "OUT",
    "no_writes_outside_batch": "OOB",
    "inputs_unchanged": "IN",
    "teacher_forcing": "TF",
    "noise_replay": "NR",
    "greedy_consistency": "GC",
    "greedy_rows_argmax": "GA",
    "support": "SUP",
    "fresh_noise": "FN",
    "noise_budget": "NB",
    "single_walk": "SW",
    "matches_reference": "REF",
}


def _checks_cell(checks: list[dict[str, Any]]) -> str:
    if not checks:
        return "-"
    lossless = [
        CHECK_CODES.get(c["name"], c["name"])
        for c in checks
        if c["status"] == "fail" and c["tier"] == "lossless"
    ]
    drop_in = [
        CHECK_CODES.get(c["name"], c["name"])
        for c in checks
        if c["status"] == "fail" and c["tier"] != "lossless"
    ]
    if lossless:
        return "FAIL " + ",".join(lossless + drop_in)
    if drop_in:
        return "lossless; not drop-in " + ",".join(drop_in)
    return "pass"


def _checks_table(records: list[Record], names: list[str]) -> tuple[Block, ...]:
    """The legend and the table of each case's failed checks per implementation."""
    legend = "failed checks: " + ", ".join(f"{code}={name}" for name, code in CHECK_CODES.items())
    rows = [
        [
            record["label"],
            *(_checks_cell(record["implementations"].get(n, {}).get("checks", [])) for n in names),
        ]
        for record in records
    ]
    return legend, Table.of(["case", *names], rows)


def comparison_sections(
    records: list[Record],
    *,
    require_coverage: bool,
    roles: Roles | None = None,
    statistical: Statisticals = None,
) -> list[Section]:
    """Verdict sections: fixed, the pair's ledger, reference, then every other
    implementation, each held to what its role requires; ``statistical`` (by name,
    ``None`` when the oracle did not run) enters each lossless verdict."""
    roles = roles or Roles()
    names = list(records[0]["implementations"]) if records else []
    sections: list[Section] = []
    titles = {FIXED: "Fixed sampler", REFERENCE: "Reference oracle"}
    ordered = [n for n in (FIXED, REFERENCE) if n in names]
    ordered += [n for n in names if n not in ordered]
    for name in ordered:
        if name == roles.buggy and name not in roles.expect_fail:
            continue
        title = titles.get(name, f"Implementation {name}")
        sections.append(
            _verdict_section(name, records, roles=roles, title=title, statistical=statistical)
        )
    if roles.buggy in names and roles.fixed in names:
        index = 1 if sections and sections[0].title == titles[FIXED] else 0
        sections.insert(
            index, _ledger_section(records, require_coverage=require_coverage, roles=roles)
        )
    if records:
        sections.append(
            Section(
                title="Verdicts per implementation",
                ok=True,
                verdict="",
                blocks=(_verdicts_table(records, roles=roles, statistical=statistical),),
            )
        )
        sections.append(
            Section(
                title="Checks per implementation",
                ok=True,
                verdict="",
                blocks=_checks_table(records, names),
            )
        )
    return sections


def _role(name: str, roles: Roles) -> tuple[str, str]:
    """``(role, what it is held to)`` of one implementation."""
    if name in roles.expect_fail:
        return "expected to fail", "fails a lossless check"
    if name == roles.buggy:
        return f"buggy side of the pair with {roles.fixed}", "the divergence ledger"
    if name == roles.fixed:
        return f"fixed side of the pair with {roles.buggy}", roles.requirement(name)
    return "judged", roles.requirement(name)


def _statistical_cell(statistical: Statistical) -> str:
    if not statistical.ran:
        return "not run"
    if statistical.error is not None:
        return "raised"
    return "REJECTED" if statistical.rejected else "pass"


def _verdicts_table(records: list[Record], *, roles: Roles, statistical: Statisticals) -> Table:
    """Implementation, role, requirement, the statistical part, the two verdicts, and why
    not drop-in."""
    rows = []
    for name in records[0]["implementations"]:
        verdict = full_verdict(records, name, statistical)
        role, required = _role(name, roles)
        rows.append(
            [
                name,
                role,
                required,
                _statistical_cell(verdict.statistical),
                "yes" if verdict.lossless else "NO",
                "yes" if verdict.drop_in else "no",
                verdict.summary()[:120],
            ]
        )
    header = ["implementation", "role", "held to", "statistical", "lossless", "drop-in", "verdict"]
    return Table.of(header, rows)


def verdicts_json(
    records: list[Record], *, roles: Roles, statistical: Statisticals = None
) -> dict[str, Any]:
    """Per implementation: its two verdicts (the statistical part in them), its role and
    what it is held to; the roles."""
    names = list(records[0]["implementations"]) if records else []
    implementations = {}
    for name in names:
        role, required = _role(name, roles)
        implementations[name] = {
            **full_verdict(records, name, statistical).to_json(),
            "role": role,
            "held_to": required,
        }
    return {"roles": roles.to_json(), "implementations": implementations}
