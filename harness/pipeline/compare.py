"""The comparison stage: run cases, check every implementation, hold legacy to the ledger.

``evaluate_run`` turns a case run into a ``CaseVerdict`` (checks per implementation,
the ledger entry); ``case_record`` makes it a plain JSON record; ``compare`` runs a
list of cases into records, appending each finished one to a journal so that an
interrupted comparison resumes where it stopped; ``comparison_sections`` formats
records into report sections: is fixed clean, does legacy reproduce the documented
bug, is every extra implementation clean.
"""

from __future__ import annotations

import hashlib
import json
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
from harness.plugins.implementations import Implementation
from harness.render.progress import Progress
from harness.render.sections import Section

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


def evaluate_run(run: CaseRun, *, require_observable: bool) -> CaseVerdict:
    """Checks per implementation and, when legacy and fixed both ran, the ledger."""
    checks: dict[str, list[CheckResult]] = {}
    reference = run.results.get(REFERENCE)
    for name, result in run.results.items():
        checks[name] = self_checks(run, result)
        if reference is not None and name != REFERENCE and result.ok:
            checks[name].append(check_matches_reference(run, result, reference))
    ledger = None
    if LEGACY in run.results and FIXED in run.results:
        ledger = observe_divergence(
            run,
            run.results[LEGACY],
            run.results[FIXED],
            require_observable=require_observable,
        )
    return CaseVerdict(case=run.case, checks=checks, ledger=ledger, results=run.results)


def record_key(
    case: Case, implementations: list[Implementation], *, require_observable: bool
) -> str:
    """What a journal record stands for: the case, the implementations, the strictness."""
    identity = {
        "case": case.to_json_dict(),
        "implementations": [[impl.name, impl.spec] for impl in implementations],
        "require_observable": require_observable,
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
        key = record_key(case, implementations, require_observable=require_observable)
        if key in finished:
            if progress is not None:
                progress(f"[{index}/{len(cases)}] {case.label()} (finished earlier)")
            records.append(finished[key])
            continue
        if progress is not None:
            progress(f"[{index}/{len(cases)}] {case.label()}")
        run = run_case(case, implementations, time_limit_s=time_limit_s, isolate=isolate)
        record = case_record(evaluate_run(run, require_observable=require_observable), key=key)
        records.append(canonical(record) if log is None else log.append(record))
    return records


# -- records -------------------------------------------------------------------------------
def case_record(verdict: CaseVerdict, *, key: str) -> Record:
    """The per-case evidence as a plain JSON record (deterministic: no timings)."""
    implementations = {}
    for name, result in verdict.results.items():
        implementations[name] = {
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
            },
            "checks": [
                {
                    "name": c.name,
                    "status": c.status,
                    "detail": c.detail,
                    "positions": [list(p) for p in c.positions],
                }
                for c in verdict.checks.get(name, [])
            ],
        }
    ledger = None
    if verdict.ledger is not None:
        ledger = {
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
def _clean_section(name: str, records: list[Record], *, title: str) -> Section:
    failing = [(r["label"], c) for r in records for c in _failed_checks(r, name)]
    failing_cases = sum(1 for r in records if _failed_checks(r, name))
    if failing:
        lines = [f"{label}: {check['name']}: {check['detail']}" for label, check in failing]
        return Section(
            title=title,
            ok=False,
            verdict=f"{name}: FAILS {len(failing)} check(s) on {failing_cases} "
            f"of {len(records)} cases",
            text="\n".join(lines),
        )
    exactness = (
        "bit-exact vs reference in float32, within dtype tolerance otherwise"
        if name != REFERENCE
        else "self-consistent"
    )
    return Section(
        title=title,
        ok=True,
        verdict=f"{name}: clean on {len(records)}/{len(records)} cases ({exactness})",
    )


def _ledger_section(records: list[Record], *, require_coverage: bool) -> Section:
    entries = [(r["label"], r["ledger"]) for r in records if r["ledger"] is not None]
    broken = [(label, e) for label, e in entries if not e["holds"]]
    seen = {name for _, e in entries for name in e["observed"]}
    missing = sorted(set(LEDGER_CLASSES) - seen) if require_coverage else []
    width = max((len(label) for label, _ in entries), default=10)
    lines = [f"{'class'.ljust(23)} {'cases':>5}  first evidence"]
    for name in LEDGER_CLASSES:
        showing = [(label, e) for label, e in entries if name in e["observed"]]
        first = f"{showing[0][0]}: {showing[0][1]['evidence'].get(name, '')}" if showing else "-"
        lines.append(f"{name.ljust(23)} {len(showing):>5}  {first[:150]}")
    lines += ["", f"{'case'.ljust(width)}  divergence classes observed (evidence)"]
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
            f"legacy: reproduces the documented bug — ledger holds on {len(entries)}/"
            f"{len(entries)} cases"
        )
    else:
        parts = []
        if broken:
            parts.append(f"ledger broken on {len(broken)} case(s)")
        if missing:
            parts.append(f"classes never observed: {', '.join(missing)}")
        if not entries:
            parts.append("legacy and fixed were not both run")
        verdict = "legacy: does NOT reproduce the documented bug — " + "; ".join(parts)
    return Section(title="Legacy divergence ledger", ok=ok, verdict=verdict, text="\n".join(lines))


CHECK_CODES = {
    "ran": "RAN",
    "outputs_written": "OUT",
    "teacher_forcing": "TF",
    "noise_replay": "NR",
    "greedy_consistency": "GC",
    "support": "SUP",
    "single_walk": "SW",
    "matches_reference": "REF",
}


def _checks_table(records: list[Record], names: list[str]) -> str:
    width = max(len(r["label"]) for r in records)
    cell = 18
    header = f"{'case'.ljust(width)}  " + "  ".join(n.ljust(cell) for n in names)
    legend = "failed checks: " + ", ".join(f"{code}={name}" for name, code in CHECK_CODES.items())
    lines = [legend, header]
    for record in records:
        cells = []
        for name in names:
            checks = record["implementations"].get(name, {}).get("checks", [])
            failed = [c["name"] for c in checks if c["status"] == "fail"]
            if not checks:
                text = "-"
            elif failed:
                text = "FAIL " + ",".join(CHECK_CODES.get(f, f) for f in failed)
            else:
                text = "pass"
            cells.append(text.ljust(cell))
        lines.append(f"{record['label'].ljust(width)}  " + "  ".join(cells))
    return "\n".join(lines)


def comparison_sections(records: list[Record], *, require_coverage: bool) -> list[Section]:
    """Verdict sections: fixed, legacy (ledger), reference, then every extra implementation."""
    names = list(records[0]["implementations"]) if records else []
    sections: list[Section] = []
    if FIXED in names:
        sections.append(_clean_section(FIXED, records, title="Fixed sampler"))
    if LEGACY in names and FIXED in names:
        sections.append(_ledger_section(records, require_coverage=require_coverage))
    if REFERENCE in names:
        sections.append(_clean_section(REFERENCE, records, title="Reference oracle"))
    for name in names:
        if name not in (FIXED, LEGACY, REFERENCE):
            sections.append(_clean_section(name, records, title=f"Implementation {name}"))
    if records:
        sections.append(
            Section(
                title="Checks per implementation",
                ok=True,
                verdict="",
                text=_checks_table(records, names),
            )
        )
    return sections
