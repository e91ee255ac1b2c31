"""What one implementation produced, as data: the result of a call (``ImplResult``), its
failure (``RaisedError``), its counted work (``WorkCounts``) and its server life (``Life``,
each replay's step and result). The runner (``harness.pipeline.runner``) and the life
driver (``harness.pipeline.life``) fill them; the checks read them. They cross a process
line as plain data (``harness.wire``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from harness.case import Case
from harness.pipeline.observe import RandomDraw, StreamStates
from harness.plugins.conventions import (
    CounterReads,
    DraftKey,
    KeyedDraws,
    NoiseCounter,
    RequestKeys,
    StagedParams,
)
from harness.wire import answer_types


@dataclass(frozen=True)
class RaisedError:
    """An exception an implementation raised: class, message and where."""

    type: str
    message: str
    where: str

    def summary(self) -> str:
        return f"{self.type}: {self.message}"

    @property
    def timed_out(self) -> bool:
        """The time limit stopped it: not judged, never a defect."""
        return self.type == CallTimeout.__name__


class CallTimeout(Exception):
    """An implementation's call ran past the per-call time limit."""


@dataclass
class WorkCounts:
    """Work of one call, counted exactly."""

    walks: int = 0
    fused_calls: int = 0  # fused greedy calls that produced tokens
    head_steps: int = 0
    sampler_calls: int = 0
    noise_calls: int = 0
    noise_elements: int = 0
    op_counts: dict[str, int] = field(default_factory=dict)
    rng: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # phase: op: [calls, n]

    @property
    def total_ops(self) -> int:
        return sum(self.op_counts.values())


@dataclass
class ImplResult:
    """What one implementation produced on one case."""

    name: str
    tokens: torch.Tensor | None = None  # [bs, gamma] int64
    corrected: torch.Tensor | None = None  # [bs, gamma, V] kept step logits, folded sampling only
    confidence: torch.Tensor | None = None  # [bs, gamma]
    staged: StagedParams | None = None  # the sampler's own staging, where it exposes it
    noise_counter: NoiseCounter | None = None  # counter-based noise the harness owns
    counter_replay: torch.Tensor | None = None  # [bs, gamma]: tokens of the declared stream
    requested: StagedParams | None = None  # the requests as the server stages them
    stream_replays: dict[int, torch.Tensor] | None = None  # counter -> [bs, gamma] tokens
    counter_reads: CounterReads | None = None  # counters the call's draws read, if observed
    verifier_counter: NoiseCounter | None = None  # the server verifier's stream, decode so far
    keyed_draws: KeyedDraws | None = None  # per-request keys: the draft's and the verifier's
    verify_ids: torch.Tensor | None = None  # [bs, gamma + 1]: anchor then drafts
    candidates: torch.Tensor | None = None  # [bs, gamma, V] bool: the contract's draft support
    draft_top_k: int | None = None  # the drafter's own top-k, as it declares it
    keeps_step_logits: bool = True  # False: its convention keeps none on this call
    error: RaisedError | None = None
    noise_draws: list[torch.Tensor] = field(default_factory=list)  # each [bs, V]
    walk_tokens: list[torch.Tensor] = field(default_factory=list)  # tokens of each walk
    work: WorkCounts = field(default_factory=WorkCounts)
    random_draws: list[RandomDraw] = field(default_factory=list)  # every phase, in order
    # torch's CPU generator from the start of the staging to the end of the call: the
    # stretch of its stream the call may draw (``None``: not seen, the call raised)
    server_stream: StreamStates | None = None
    outside_writes: dict[str, int] = field(default_factory=dict)  # buffer: entries written
    mutated_inputs: list[str] = field(default_factory=list)  # shared inputs it changed
    leaked_state: list[str] = field(default_factory=list)  # global settings it changed
    second_call: ImplResult | None = None  # the next staged call on the same inputs
    # Draws made before this call that it may consume (noise drawn at construction or
    # at the end of the previous call: double-buffered designs).
    carried_draws: list[RandomDraw] = field(default_factory=list)
    life: Life | None = None  # the case's server life on a new instance, if it has one
    # Why the case cannot be expressed in the implementation's calling convention (it
    # was not run; every check skips saying so), or None.
    outside_contract: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class GreedyMix(enum.Enum):
    """Which rows of a replay are greedy."""

    ALL_GREEDY = "all-greedy"
    MIXED = "mixed"
    ALL_SAMPLED = "all-sampled"


@dataclass(frozen=True)
class LifeStep:
    """One replay of a life: its batch size, greedy mix and staged parameters."""

    index: int
    bs: int
    mix: GreedyMix
    temperatures: tuple[float, ...]  # [bs]; greedy rows are sent as T = 1 with top_k = 1
    greedy_rows: tuple[bool, ...]  # [bs]
    input_seed: int  # seed of this replay's hidden states and anchors
    # [bs] each, a request's truncation (docs/sampling-params.md); (): none staged
    top_ks: tuple[int, ...] = ()  # 0: no top-k (a greedy row's 1 is greedy_rows')
    top_ps: tuple[float, ...] = ()
    min_ps: tuple[float, ...] = ()

    def describe(self) -> str:
        return f"replay {self.index} (bs={self.bs}, {self.mix.value})"

    def case_of(self, case: Case) -> Case:
        """The case this replay is: the life's case at this batch and these parameters."""
        return case.with_changes(
            bs=self.bs,
            temperatures=self.temperatures,
            greedy_rows=self.greedy_rows,
            top_ks=self.top_ks,
            top_ps=self.top_ps,
            min_ps=self.min_ps,
            replays=0,
            name=f"{case.label()} / {self.describe()}",
        )


@dataclass
class LifeReplay:
    """One replay's step and what the sampler produced (its inputs are regenerated from
    the step with ``replay_inputs``)."""

    step: LifeStep
    result: ImplResult


@dataclass
class Life:
    """A life of one instance: every replay run (it stops at the first that raises)."""

    replays: list[LifeReplay] = field(default_factory=list)
    planned: int = 0  # replays the schedule asked for
    out_passed: bool = False  # the constructor took the server's out= buffer
    error: RaisedError | None = None  # construction raised


answer_types(
    RaisedError,
    WorkCounts,
    ImplResult,
    RandomDraw,
    StreamStates,
    StagedParams,  # a convention's staging, as read (sglang 0.5.23)
    NoiseCounter,
    CounterReads,  # the counters a call's draws read (sglang 0.5.23, in torch)
    KeyedDraws,  # the per-request keys a call and its verifier read (vLLM 0.33)
    DraftKey,
    RequestKeys,
    Life,
    LifeReplay,
    LifeStep,
    GreedyMix,
)
