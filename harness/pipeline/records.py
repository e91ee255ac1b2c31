"""The per-case record of a comparison, typed: one plain JSON object per case, appended
to the journal, listed under the report's ``"cases"`` and read by the verdicts, the
coverage and the report sections (``harness.pipeline.compare.case_record`` writes it).
"""

from __future__ import annotations

from typing import Any, TypedDict

CaseFields = dict[str, Any]  # a case's own fields, as ``Case.to_json_dict()["case"]``


class CheckRecord(TypedDict):
    """One check of one implementation on the case."""

    name: str
    tier: str  # "lossless" or "drop_in" (``harness.pipeline.check_result``)
    status: str  # "pass", "fail" or "skip"
    detail: str
    positions: list[list[int]]  # [row, step] that show it
    skip: str | None  # why it skipped (``harness.pipeline.check_result.Skip``), else None


class ErrorRecord(TypedDict):
    """What an implementation raised."""

    type: str
    message: str


class WorkRecord(TypedDict):
    """The work of the implementation's call, counted exactly."""

    walks: int
    fused_calls: int
    head_steps: int
    sampler_calls: int
    noise_calls: int
    noise_elements: int
    aten_ops: int
    rng: dict[str, dict[str, list[int]]]  # phase: op: [calls, elements]
    noise_counter_advances: int | None  # counter-based noise: how far the call moved it


class ImplementationRecord(TypedDict):
    """One implementation's verdicts, outputs (as digests), work and checks on the case."""

    lossless: bool
    drop_in: bool
    error: ErrorRecord | None
    tokens_sha256: str | None
    corrected_sha256: str | None
    confidence_sha256: str | None
    work: WorkRecord
    checks: list[CheckRecord]


class LedgerRecord(TypedDict):
    """The divergence ledger of the pair on the case."""

    pair: list[str]
    expected: list[str]
    observed: list[str]
    latent: list[str]
    holds: bool
    problems: list[str]
    evidence: dict[str, str]


class CaseRecord(TypedDict):
    """Everything a comparison knows about one case (deterministic: no timings)."""

    schema: str
    key: str  # what the record stands for (``harness.pipeline.compare.record_key``)
    label: str
    case: CaseFields
    implementations: dict[str, ImplementationRecord]
    ledger: LedgerRecord | None
