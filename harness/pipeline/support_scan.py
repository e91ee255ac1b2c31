"""The support scan: drive a sampler over very many (row, step, counter) triples on
degenerate rows and catch any draft outside the support (docs/upstream.md, "The scan").

Rows of the base logits are one of two ``RowPattern``s: every logit but one at
``-inf`` (``lone-finite``), or two finite logits ``FAR_GAP`` apart and the rest at
``-inf`` (``far-apart``, where the lower token's probability is below ``exp(-FAR_GAP /
1.4)``, zero in float64). Either way exactly one token may be drafted at each (row,
step): the top token ``(row + step) % V``, whatever the Markov head adds (its bias is
finite). The harness owns the noise counter: before call ``c`` of a sampler it puts the
noise stream at ``c`` (``BuiltSampler.seek_noise``: the counter of a counter-based
stream, or torch's RNG seeded from ``c``), so one call covers ``bs * gamma`` triples
and any hit replays from its counter alone. A hit is a lossless failure; its
``ScanHit`` is written as a repro file that ``python -m harness repro FILE`` replays
bit for bit.
"""

from __future__ import annotations

import enum
import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from harness.case import Case, CaseError, build_inputs, make_case
from harness.devices import intra_op_threads
from harness.io.files import write_atomically
from harness.plugins.conventions import BuiltSampler
from harness.plugins.implementations import Implementation
from harness.progress import Progress, no_progress
from harness.upstream.dispatch import build_for_case
from reference import HEAD_KINDS, PrecomputedBaseLogits

FAR_GAP = 1.0e4  # far-apart rows: the second token sits this far below the top one
SCAN_TEMPERATURES = (0.6, 1.0, 1.4)  # rows take them in turn; every row is sampled
SCAN_REPRO_SCHEMA = "dspark-harness/scan-repro"
SCAN_REPRO_SCHEMA_VERSION = 1
MAX_HITS_KEPT = 16  # per point: the first hits, for the report and the repro file


class RowPattern(enum.Enum):
    """A degenerate row of base logits."""

    LONE_FINITE = "lone-finite"
    FAR_APART = "far-apart"


@dataclass(frozen=True)
class ScanPoint:
    """One setting of the scan: a head kind, a dtype, a row pattern, a batch shape, the
    counters ``first_counter .. first_counter + calls - 1``."""

    head_kind: str
    dtype: str
    pattern: RowPattern
    bs: int
    gamma: int
    vocab_size: int
    calls: int
    first_counter: int = 0
    seed: int = 0
    hidden_size: int = 8
    markov_rank: int = 4

    def __post_init__(self) -> None:
        for name in ("bs", "gamma", "vocab_size", "calls", "hidden_size", "markov_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise CaseError(f"scan {name} must be a positive integer, got {value!r}")
        if self.vocab_size < 2:
            raise CaseError(
                f"scan vocab_size must be >= 2 (two finite logits), got {self.vocab_size}"
            )
        if self.first_counter < 0:
            raise CaseError(f"scan first_counter must be >= 0, got {self.first_counter}")

    @property
    def triples(self) -> int:
        return self.bs * self.gamma * self.calls

    def case(self) -> Case:
        """The case the sampler is built for (its drafter, hidden states and rows)."""
        base = make_case(
            bs=self.bs,
            gamma=self.gamma,
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            markov_rank=self.markov_rank,
            head_kind=self.head_kind,
            dtype=self.dtype,
            seed=self.seed,
        )
        temperatures = tuple(SCAN_TEMPERATURES[i % len(SCAN_TEMPERATURES)] for i in range(self.bs))
        return base.with_changes(temperatures=temperatures)

    def label(self) -> str:
        last = self.first_counter + self.calls - 1
        return (
            f"{self.head_kind}/{self.dtype}/{self.pattern.value} bs={self.bs} g={self.gamma} "
            f"V={self.vocab_size} counters {self.first_counter}..{last}"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "pattern": self.pattern.value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScanPoint:
        return cls(**{**data, "pattern": RowPattern(data["pattern"])})


def top_tokens(point: ScanPoint, *, device: torch.device) -> torch.Tensor:
    """``[bs, gamma]``: the one token each (row, step) may draft."""
    rows = torch.arange(point.bs, device=device).unsqueeze(1)
    steps = torch.arange(point.gamma, device=device)
    return (rows + steps) % point.vocab_size


def pattern_logits(point: ScanPoint, *, device: torch.device) -> torch.Tensor:
    """The base logits ``[bs*gamma, V]`` of the point's pattern, in its dtype."""
    case = point.case()
    top = top_tokens(point, device=device).reshape(-1, 1)  # [bs*gamma, 1]
    logits = torch.full(
        (point.bs * point.gamma, point.vocab_size), float("-inf"), device=device
    )  # [bs*gamma, V]
    logits.scatter_(1, top, 0.0)
    if point.pattern is RowPattern.FAR_APART:
        logits.scatter_(1, (top + 1) % point.vocab_size, -FAR_GAP)
    return logits.to(case.torch_dtype)


@dataclass(frozen=True)
class ScanHit:
    """A draft outside the support: where, which token, which token was the only one allowed."""

    counter: int
    row: int
    step: int
    token: int
    allowed: int


@dataclass(frozen=True)
class PointResult:
    """One point of one implementation: how much it covered and what it hit."""

    implementation: str
    point: ScanPoint
    hits: tuple[ScanHit, ...]  # the first MAX_HITS_KEPT
    hit_count: int
    triples: int
    wall_s: float
    error: str | None = None

    @property
    def clean(self) -> bool:
        return self.error is None and self.hit_count == 0


class ScanDriver:
    """One sampler built over a point's degenerate drafter, called at chosen counters."""

    def __init__(
        self,
        implementation: Implementation,
        point: ScanPoint,
        *,
        base_logits: torch.Tensor | None = None,
    ) -> None:
        self.point = point
        self.case = point.case()
        device = torch.device(self.case.device)
        inputs = build_inputs(self.case)
        rows = pattern_logits(point, device=device) if base_logits is None else base_logits
        drafter = PrecomputedBaseLogits(inputs.model, base_logits=rows)
        self.inputs = inputs
        self.built: BuiltSampler = build_for_case(
            implementation.sampler_class, case=self.case, inputs=inputs, model=drafter
        )
        self.allowed = top_tokens(point, device=device)  # [bs, gamma]

    def tokens_at(self, counter: int) -> torch.Tensor:
        """``[bs, gamma]`` drafted with the noise stream at ``counter``."""
        self.built.seek_noise(counter)
        self.built.stage_sampling_params(bs=self.case.bs, sampling_info=self.inputs.sampling_info)
        with torch.inference_mode():
            self.built(self.inputs.hidden_states, self.inputs.input_ids)
        return self.built.read_tokens(self.case)

    def hits_of(self, tokens: torch.Tensor, *, counter: int) -> tuple[list[ScanHit], int]:
        """The first ``MAX_HITS_KEPT`` hits of one call, and how many there were."""
        wrong = tokens != self.allowed
        count = int(wrong.sum())
        if not count:
            return [], 0
        where = wrong.nonzero()[:MAX_HITS_KEPT].tolist()
        hits = [
            ScanHit(
                counter=counter,
                row=row,
                step=step,
                token=int(tokens[row, step]),
                allowed=int(self.allowed[row, step]),
            )
            for row, step in where
        ]
        return hits, count


def scan_point(
    implementation: Implementation, point: ScanPoint, *, progress: Progress = no_progress
) -> PointResult:
    """Every counter of the point; a raising implementation is a recorded result."""
    started = time.perf_counter()
    hits: list[ScanHit] = []
    count = 0
    covered = 0
    error = None
    try:
        with intra_op_threads(1), torch.random.fork_rng(devices=[]):
            driver = ScanDriver(implementation, point)
            for counter in range(point.first_counter, point.first_counter + point.calls):
                found, found_count = driver.hits_of(driver.tokens_at(counter), counter=counter)
                hits += found[: MAX_HITS_KEPT - len(hits)]
                count += found_count
                covered += point.bs * point.gamma
    except Exception as failure:  # the code under test failing is a result, never a crash
        error = f"{type(failure).__name__}: {failure}"
    progress(f"scan: {implementation.name} {point.label()}: {count} hits in {covered} triples")
    return PointResult(
        implementation=implementation.name,
        point=point,
        hits=tuple(hits),
        hit_count=count,
        triples=covered,
        wall_s=time.perf_counter() - started,
        error=error,
    )


@dataclass(frozen=True)
class ScanPlan:
    """The points of a scan: every head kind x dtype x pattern, the triple budget split
    evenly, each point on its own counters (no triple is scanned twice)."""

    head_kinds: tuple[str, ...]
    dtypes: tuple[str, ...]
    patterns: tuple[RowPattern, ...]
    bs: int
    gamma: int
    vocab_size: int
    triples_per_point: int
    seed: int = 0

    def points(self) -> Iterator[ScanPoint]:
        calls = max(1, -(-self.triples_per_point // (self.bs * self.gamma)))
        settings = [
            (head_kind, dtype, pattern)
            for head_kind in self.head_kinds
            for dtype in self.dtypes
            for pattern in self.patterns
        ]
        for index, (head_kind, dtype, pattern) in enumerate(settings):
            yield ScanPoint(
                head_kind=head_kind,
                dtype=dtype,
                pattern=pattern,
                bs=self.bs,
                gamma=self.gamma,
                vocab_size=self.vocab_size,
                calls=calls,
                first_counter=index * calls,
                seed=self.seed,
            )

    @property
    def triples(self) -> int:
        return sum(p.triples for p in self.points())


FULL_PLAN_BS = 1 << 14  # the scan's default batch: one call covers 65536 triples


def full_plan(*, triples_per_point: int, seed: int = 0, bs: int = FULL_PLAN_BS) -> ScanPlan:
    """Every head kind x float32, bfloat16 x both patterns at ``bs`` (default 16384),
    gamma=4, V=4."""
    return ScanPlan(
        head_kinds=HEAD_KINDS,
        dtypes=("float32", "bfloat16"),
        patterns=tuple(RowPattern),
        bs=bs,
        gamma=4,
        vocab_size=4,
        triples_per_point=triples_per_point,
        seed=seed,
    )


def tokens_digest(tokens: torch.Tensor) -> str:
    return hashlib.sha256(tokens.cpu().contiguous().numpy().tobytes()).hexdigest()


def write_scan_repro(
    path: Path, *, implementation_spec: str, point: ScanPoint, hit: ScanHit, digest: str
) -> None:
    """One hit as a replayable file: the point narrowed to the hit's counter."""
    data = {
        "schema": SCAN_REPRO_SCHEMA,
        "schema_version": SCAN_REPRO_SCHEMA_VERSION,
        "implementation": implementation_spec,
        "point": replace(point, first_counter=hit.counter, calls=1).to_json(),
        "hit": asdict(hit),
        "tokens_sha256": digest,
    }
    write_atomically(path, json.dumps(data, indent=2) + "\n")


@dataclass(frozen=True)
class ScanRepro:
    """A scan repro file's content."""

    spec: str
    point: ScanPoint
    hit: ScanHit
    tokens_sha256: str


def is_scan_repro(data: object) -> bool:
    return isinstance(data, dict) and data.get("schema") == SCAN_REPRO_SCHEMA


def read_scan_repro(data: dict[str, Any], *, path: Path) -> ScanRepro:
    """A parsed scan repro; a malformed or newer one raises ``CaseError``."""
    version = data.get("schema_version")
    if not isinstance(version, int) or version > SCAN_REPRO_SCHEMA_VERSION:
        raise CaseError(
            f"{path}: scan repro schema_version {version!r} is not supported "
            f"(this harness reads up to {SCAN_REPRO_SCHEMA_VERSION})"
        )
    try:
        return ScanRepro(
            spec=str(data["implementation"]),
            point=ScanPoint.from_json(data["point"]),
            hit=ScanHit(**data["hit"]),
            tokens_sha256=str(data["tokens_sha256"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise CaseError(f"{path}: malformed scan repro file ({error!r})") from None


@dataclass(frozen=True)
class ScanReplay:
    """A scan repro run again: the same tokens bit for bit, and whether it still hits."""

    identical: bool
    hits: tuple[ScanHit, ...]
    hit_count: int

    @property
    def passes(self) -> bool:
        return self.hit_count == 0


def replay_scan_repro(repro: ScanRepro, implementation: Implementation) -> ScanReplay:
    """Rebuild the sampler at the repro's point and call it once at the hit's counter."""
    with intra_op_threads(1), torch.random.fork_rng(devices=[]):
        driver = ScanDriver(implementation, repro.point)
        tokens = driver.tokens_at(repro.hit.counter)
        hits, count = driver.hits_of(tokens, counter=repro.hit.counter)
    return ScanReplay(
        identical=tokens_digest(tokens) == repro.tokens_sha256, hits=tuple(hits), hit_count=count
    )


def first_hit_tokens(
    implementation: Implementation, point: ScanPoint, hit: ScanHit
) -> torch.Tensor:
    """The tokens of the call that produced ``hit`` (for the repro file's digest)."""
    with intra_op_threads(1), torch.random.fork_rng(devices=[]):
        return ScanDriver(implementation, point).tokens_at(hit.counter)


# -- non-finite logits under the documented rule (docs/numerics.md) -----------------------------
NAN, INF = float("nan"), float("inf")


class NonfiniteRule(enum.Enum):
    """The four parts of the non-finite rule, each with a row that exercises it."""

    FIRST_NAN = "a NaN row yields its first NaN"
    FIRST_POS_INF = "a +inf row (no NaN) yields its first +inf"
    NEG_INF_NEVER = "a -inf entry never wins while the row has a finite one"
    ALL_NEG_INF = "a row of only -inf yields token 0"


NONFINITE_ROWS: dict[NonfiniteRule, tuple[tuple[float, ...], frozenset[int]]] = {
    NonfiniteRule.FIRST_NAN: ((1.0, NAN, 0.0, NAN), frozenset({1})),
    NonfiniteRule.FIRST_POS_INF: ((0.0, INF, 1.0, INF), frozenset({1})),
    NonfiniteRule.NEG_INF_NEVER: ((-INF, 0.5, -INF, 0.0), frozenset({1, 3})),
    NonfiniteRule.ALL_NEG_INF: ((-INF, -INF, -INF, -INF), frozenset({0})),
}


@dataclass(frozen=True)
class RuleOutcome:
    """How one implementation met one part of the rule over ``draws`` (row, step) draws."""

    rule: NonfiniteRule
    draws: int
    violations: int
    tokens_seen: tuple[int, ...]  # every token drafted, sorted
    error: str | None = None

    @property
    def holds(self) -> bool:
        return self.error is None and self.violations == 0


def nonfinite_behaviour(
    implementation: Implementation, *, bs: int = 1024, gamma: int = 4, calls: int = 4
) -> tuple[RuleOutcome, ...]:
    """Each part of the rule on rows made only of its pattern (V = 4, float32, sampled
    rows at the scan's temperatures), counters ``0 .. calls - 1``."""
    outcomes = []
    for rule, (row, allowed) in NONFINITE_ROWS.items():
        point = ScanPoint(
            head_kind="vanilla",
            dtype="float32",
            pattern=RowPattern.LONE_FINITE,
            bs=bs,
            gamma=gamma,
            vocab_size=len(row),
            calls=calls,
        )
        base = torch.tensor(row).repeat(bs * gamma, 1)  # [bs*gamma, V]
        seen: set[int] = set()
        violations = 0
        error = None
        try:
            with intra_op_threads(1), torch.random.fork_rng(devices=[]):
                driver = ScanDriver(implementation, point, base_logits=base)
                for counter in range(calls):
                    tokens = driver.tokens_at(counter)
                    seen |= set(tokens.unique().tolist())
                    violations += int((~torch.isin(tokens, torch.tensor(sorted(allowed)))).sum())
        except Exception as failure:  # the code under test failing is a result
            error = f"{type(failure).__name__}: {failure}"
        outcomes.append(
            RuleOutcome(
                rule=rule,
                draws=bs * gamma * calls,
                violations=violations,
                tokens_seen=tuple(sorted(seen)),
                error=error,
            )
        )
    return tuple(outcomes)
