"""Reproducers: find the smallest failing case for an implementation, write it, replay it.

A repro file holds the case, where the implementation came from, the check it
was minimised for (or none: the first failing one), the checks it failed (names,
details, positions) and digests of its output buffers. Replaying runs the case
again, with the recorded implementation or another one, says whether the result
is identical and whether the implementation now passes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.case import Case, CaseError
from harness.defaults import REFERENCE
from harness.io.files import write_atomically
from harness.options import DEFAULT_OPTIONS, RunOptions
from harness.pipeline.check_result import CheckResult
from harness.pipeline.compare import evaluate_run, tensor_digest
from harness.pipeline.runner import run_case
from harness.plugins.implementations import (
    BUILTIN_IMPLEMENTATIONS,
    Implementation,
    builtin_implementations,
    parse_impl_spec,
)

REPRO_SCHEMA = "dspark-harness/repro"
REPRO_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Outcome:
    """The observable result of one implementation on one case."""

    failures: tuple[CheckResult, ...]  # the failed checks, in the order they ran
    tokens_sha256: str | None
    corrected_sha256: str | None

    @property
    def failing(self) -> bool:
        return bool(self.failures)

    @property
    def signature(self) -> str:
        """What shrinking preserves by default: the first failing check."""
        return self.failures[0].name if self.failures else ""

    def fails(self, check: str | None) -> bool:
        """Whether it fails ``check`` (any check when ``None``)."""
        return any(f.name == check for f in self.failures) if check else self.failing

    def to_json(self) -> dict[str, Any]:
        return {
            "failures": [
                {"check": f.name, "detail": f.detail, "positions": [list(p) for p in f.positions]}
                for f in self.failures
            ],
            "tokens_sha256": self.tokens_sha256,
            "corrected_sha256": self.corrected_sha256,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        failures = tuple(
            CheckResult(
                name=f["check"],
                status="fail",
                detail=f["detail"],
                positions=tuple((int(row), int(step)) for row, step in f["positions"]),
            )
            for f in data["failures"]
        )
        return cls(failures, data["tokens_sha256"], data["corrected_sha256"])


def outcome_of(
    case: Case,
    implementation: Implementation,
    *,
    options: RunOptions = DEFAULT_OPTIONS,
) -> Outcome:
    """Run the reference and the implementation on the case under ``options``; collect
    its failures."""
    implementations = builtin_implementations((REFERENCE,))
    if implementation.name != REFERENCE:
        implementations.append(implementation)
    run = run_case(case, implementations, options=options)
    verdict = evaluate_run(run, require_observable=False)
    result = verdict.results[implementation.name]
    failures = tuple(verdict.failed_checks(implementation.name))
    return Outcome(failures, tensor_digest(result.tokens), tensor_digest(result.corrected))


def _size(case: Case) -> int:
    return case.bs * case.gamma * case.vocab_size * case.hidden_size * case.markov_rank


def _smaller(case: Case) -> Iterator[Case]:
    """Candidate one-step reductions of a case, most aggressive first."""

    def rows(keep: slice) -> dict[str, Any]:
        temperatures, greedy = case.temperatures[keep], case.greedy_rows[keep]
        return {
            "bs": len(temperatures),
            "max_bs": len(temperatures),
            "temperatures": temperatures,
            "greedy_rows": greedy,
        }

    moves: list[dict[str, Any]] = []
    if case.bs > 1:
        moves += [
            rows(slice(0, case.bs // 2)),
            rows(slice(case.bs // 2, None)),
            rows(slice(1, None)),
            rows(slice(0, -1)),
        ]
    if case.max_bs > case.bs:
        moves.append({"max_bs": case.bs})
    if case.gamma > 1:
        moves += [{"gamma": max(1, case.gamma // 2)}, {"gamma": case.gamma - 1}]
    if case.vocab_size > 2:
        moves += [{"vocab_size": max(2, case.vocab_size // 2)}, {"vocab_size": case.vocab_size - 1}]
    if case.hidden_size > 1:
        moves += [
            {"hidden_size": max(1, case.hidden_size // 2)},
            {"hidden_size": case.hidden_size - 1},
        ]
    if case.markov_rank > 1:
        moves.append({"markov_rank": max(1, case.markov_rank // 2)})
    if case.replays:  # a shorter life, or none
        moves += [{"replays": 0}, {"replays": case.replays // 2}, {"replays": case.replays - 1}]
    for field_name, simple in (
        ("confidence", False),
        ("vocab_padding", 0),
        ("draft_vocab", 0),
        ("dtype", "float32"),
        ("head_kind", "vanilla"),
        ("fused_greedy", False),
    ):
        if getattr(case, field_name) != simple:
            moves.append({field_name: simple})
    for move in moves:
        try:
            yield case.with_changes(**move, name="")
        except CaseError:
            continue


def shrink(
    case: Case,
    implementation: Implementation,
    *,
    check: str | None = None,
    options: RunOptions = DEFAULT_OPTIONS,
) -> tuple[Case, Outcome]:
    """Greedy shrinking: take any smaller case that still fails ``check`` (default: with
    the same first failing check)."""
    outcome = outcome_of(case, implementation, options=options)
    if not outcome.fails(check):
        raise ValueError(
            f"{implementation.name} does not fail {check or 'a check'} on {case.label()}"
        )
    return _shrunk(case, outcome, implementation, check=check, options=options)


def _shrunk(
    case: Case,
    outcome: Outcome,
    implementation: Implementation,
    *,
    check: str | None,
    options: RunOptions,
) -> tuple[Case, Outcome]:
    """``case`` (failing as ``outcome`` says) shrunk greedily."""
    kept = check or outcome.signature
    improved = True
    while improved:
        improved = False
        for candidate in _smaller(case):
            candidate_outcome = outcome_of(candidate, implementation, options=options)
            still = candidate_outcome.fails(check) if check else candidate_outcome.signature == kept
            if candidate_outcome.failing and still:
                case, outcome, improved = candidate, candidate_outcome, True
                options.progress(f"shrunk to {case.label()}")
                break
    return case, outcome


def find_smallest_failure(
    cases: list[Case],
    implementation: Implementation,
    *,
    check: str | None = None,
    options: RunOptions = DEFAULT_OPTIONS,
) -> tuple[Case, Outcome] | None:
    """The smallest case among ``cases`` failing ``check`` (any check when ``None``),
    shrunk further; None if none does. Cases are tried smallest first, so the search
    stops at the first failure (a sampler that hangs costs one time limit per case
    tried, not one per case of the matrix)."""
    for case in sorted(cases, key=_size):  # stable: equal sizes keep the matrix's order
        options.progress(f"trying {case.label()}")
        outcome = outcome_of(case, implementation, options=options)
        if outcome.fails(check):
            return _shrunk(case, outcome, implementation, check=check, options=options)
    return None


def implementation_spec(implementation: Implementation) -> str:
    if implementation.name in BUILTIN_IMPLEMENTATIONS:
        return f"builtin:{implementation.name}"
    return implementation.spec


def resolve_implementation(spec: str) -> Implementation:
    if spec.startswith("builtin:"):
        name = spec.removeprefix("builtin:")
        if name not in BUILTIN_IMPLEMENTATIONS:
            raise CaseError(f"unknown built-in implementation {name!r} in repro file")
        return builtin_implementations((name,))[0]
    return parse_impl_spec(spec)


def write_repro(
    path: Path,
    *,
    case: Case,
    implementation: Implementation,
    outcome: Outcome,
    check: str | None = None,
) -> None:
    data = {
        "schema": REPRO_SCHEMA,
        "schema_version": REPRO_SCHEMA_VERSION,
        "implementation": implementation_spec(implementation),
        "check": check,
        "case": case.to_json_dict(),
        "outcome": outcome.to_json(),
    }
    write_atomically(path, json.dumps(data, indent=2) + "\n")


@dataclass(frozen=True)
class Repro:
    """A repro file's content."""

    case: Case
    spec: str  # where the implementation came from
    outcome: Outcome
    check: str | None  # the check it was minimised for; None: the first failing one


def read_repro_json(path: Path) -> Any:
    """A repro file's JSON (a case repro or a scan repro); ``CaseError`` when unreadable."""
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise CaseError(f"{path}: not valid JSON ({error})") from None
    except OSError as error:
        raise CaseError(f"{path}: cannot read ({error.strerror})") from None


def read_repro(path: Path) -> Repro:
    """Read a repro file; malformed or newer-schema files raise ``CaseError``."""
    data = read_repro_json(path)
    if not isinstance(data, dict) or data.get("schema") != REPRO_SCHEMA:
        raise CaseError(f"{path}: not a repro file (expected schema {REPRO_SCHEMA!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or version > REPRO_SCHEMA_VERSION:
        raise CaseError(
            f"{path}: repro schema_version {version!r} is not supported "
            f"(this harness reads up to {REPRO_SCHEMA_VERSION})"
        )
    try:
        case = Case.from_json_dict(data["case"])
        spec = str(data["implementation"])
        outcome = Outcome.from_json(data["outcome"])
        check = data.get("check")
    except (KeyError, TypeError) as error:
        raise CaseError(f"{path}: malformed repro file ({error!r})") from None
    if check is not None and not isinstance(check, str):
        raise CaseError(f"{path}: malformed repro file (check must be a name, got {check!r})")
    return Repro(case=case, spec=spec, outcome=outcome, check=check)
