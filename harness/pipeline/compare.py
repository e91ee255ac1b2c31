"""The comparison stage: run cases, check every implementation, hold legacy to the ledger.

``evaluate_run`` turns a case run into a ``CaseVerdict`` (checks per implementation,
the ledger entry); ``case_record`` makes it a plain JSON record; ``compare`` runs a
list of cases into records, appending each finished one to a journal so that an
interrupted comparison resumes where it stopped. ``harness.render.verdicts`` formats
the records into report sections.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch

from harness.case import Case
from harness.defaults import DEFAULT_PAIR
from harness.executor import IN_PROCESS, Executor
from harness.io.fingerprint import run_fingerprint
from harness.io.journal import Journal, canonical
from harness.options import RunOptions
from harness.pipeline.checks import CheckResult, Subject, run_checks, tier_of
from harness.pipeline.ledger import LedgerEntry, observe_divergence
from harness.pipeline.memory import check_cases_fit
from harness.pipeline.records import (
    CaseRecord,
    CheckRecord,
    ErrorRecord,
    ImplementationRecord,
    LedgerRecord,
    WorkRecord,
)
from harness.pipeline.runner import CaseRun, ImplResult, run_case
from harness.pipeline.verdicts import case_verdict
from harness.plugins.implementations import Implementation

CASE_RECORD_SCHEMA = "dspark-harness/case-record"


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
    checks = {name: run_checks(Subject(run, result)) for name, result in run.results.items()}
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
    options: RunOptions,
    journal: Path | None = None,
    executor: Executor = IN_PROCESS,
) -> list[CaseRecord]:
    """Run and evaluate every case into a record under ``options`` (the time limit,
    the ledger's pair and strictness, the memory limit), each implementation on
    ``executor`` in its trust domain, reporting progress per case.

    With a ``journal``, each finished record is appended to it as one durable JSON
    line stamped with the run's fingerprint (code and outcome-changing options); with
    ``options.resume``, records already there with the same fingerprint are taken instead of
    rerun (a torn last line is dropped), otherwise the journal starts over.
    """
    check_cases_fit(cases, max_memory_bytes=options.max_memory_bytes)  # before any allocation
    progress, pair = options.progress, options.roles.pair
    require_observable = options.require_observable
    finished: dict[str, CaseRecord] = {}
    log: Journal | None = None
    if journal is not None:
        fingerprint = run_fingerprint(
            implementations={impl.name: impl.sampler_class for impl in implementations},
            options={
                "time_limit_s": options.time_limit_s,
                "require_observable": require_observable,
                "isolate": options.isolate,
                "threads": options.threads,  # the reduction order of a CPU matmul follows it
            },
        )
        log = Journal(
            journal, schema=CASE_RECORD_SCHEMA, fingerprint=fingerprint, what="case record"
        )
        stored, notes = log.finished(resume=options.resume)
        finished = cast(dict[str, CaseRecord], stored)  # records this function wrote
        for note in notes:
            progress(note)
    records: list[CaseRecord] = []
    for index, case in enumerate(cases, start=1):
        key = record_key(case, implementations, require_observable=require_observable, pair=pair)
        if key in finished:
            progress(f"[{index}/{len(cases)}] {case.label()} (finished earlier)")
            records.append(finished[key])
            continue
        progress(f"[{index}/{len(cases)}] {case.label()}")
        run = run_case(case, implementations, options=options, executor=executor)
        verdict = evaluate_run(run, require_observable=require_observable, pair=pair)
        record = case_record(verdict, key=key, pair=pair)
        written = canonical(record) if log is None else log.append(record)
        records.append(cast(CaseRecord, written))  # the same record, its keys sorted
    return records


# -- records -------------------------------------------------------------------------------
def case_record(
    verdict: CaseVerdict, *, key: str, pair: tuple[str, str] = DEFAULT_PAIR
) -> CaseRecord:
    """The per-case evidence as a plain JSON record (deterministic: no timings)."""
    implementations: dict[str, ImplementationRecord] = {}
    for name, result in verdict.results.items():
        checks = [
            CheckRecord(
                name=c.name,
                tier=tier_of(c.name),
                status=c.status,
                detail=c.detail,
                positions=[list(p) for p in c.positions],
                skip=c.skip,  # why it skipped (a Skip code), else None
            )
            for c in verdict.checks.get(name, [])
        ]
        lossless, drop_in = case_verdict(checks)
        implementations[name] = ImplementationRecord(
            lossless=lossless,
            drop_in=drop_in,
            error=None
            if result.error is None
            else ErrorRecord(type=result.error.type, message=result.error.message),
            tokens_sha256=tensor_digest(result.tokens),
            corrected_sha256=tensor_digest(result.corrected),
            confidence_sha256=tensor_digest(result.confidence),
            work=WorkRecord(
                walks=result.work.walks,
                fused_calls=result.work.fused_calls,
                head_steps=result.work.head_steps,
                sampler_calls=result.work.sampler_calls,
                noise_calls=result.work.noise_calls,
                noise_elements=result.work.noise_elements,
                aten_ops=result.work.total_ops,
                rng=result.work.rng,
                # Counter-based noise (sglang 0.5.23): how far the call moved the counter.
                noise_counter_advances=None
                if result.noise_counter is None
                else result.noise_counter.advances,
            ),
            checks=checks,
        )
    ledger = None
    if verdict.ledger is not None:
        ledger = LedgerRecord(
            pair=list(pair),
            expected=sorted(verdict.ledger.expected),
            observed=sorted(verdict.ledger.observed),
            latent=sorted(verdict.ledger.latent),
            holds=verdict.ledger.holds,
            problems=list(verdict.ledger.problems),
            evidence=dict(sorted(verdict.ledger.evidence.items())),
        )
    return CaseRecord(
        schema=CASE_RECORD_SCHEMA,
        key=key,
        label=verdict.case.label(),
        case=verdict.case.to_json_dict()["case"],
        implementations=implementations,
        ledger=ledger,
    )
