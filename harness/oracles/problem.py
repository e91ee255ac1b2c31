"""The problem the statistical oracle poses: configuration, models, rows, exact laws.

This module owns ``StatsConfig`` (and the default the command and the report
run), ``StatsProblem`` (the drafter of every head kind, the synthetic target,
the draft context, each row's sampling setting, and the exact target laws each
temperature group is tested against), and ``decode_rows``, which builds a sampler
and drives it through the reference decode loop (``reference.verifier``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.devices import intra_op_threads
from harness.pipeline.case import TOP_K_ALL, Case, CaseInputs
from harness.plugins.conventions import BuiltSampler, build_for_case
from reference import HEAD_KINDS, SamplingInfo, ToyDraftModel, make_toy_draft_model
from reference.target_model import MarkovTargetModel, make_markov_target
from reference.verifier import (
    CHAIN_VERIFIER,
    DecodeResult,
    DraftBlock,
    DraftContext,
    Verifier,
    derived_seeds,
    speculative_decode,
)

DEFAULT_ALPHA = 1e-6
MAX_JOINT_CELLS = 1 << 16  # V**m cells of the enumerated joint
GREEDY = 0.0  # the temperature that marks a greedy row (top_k = 1)
# The oracle's drafters lean on the previous token (W1 x 3): the lever the double walk
# pulls. At scale 1 the rnn head's q hardly moves with it (docs/statistics.md).
PREV_EMBEDDING_SCALE = 3.0


class StatsError(ValueError):
    """A statistical-oracle configuration that cannot be run."""


@dataclass(frozen=True)
class StatsConfig:
    """Everything that defines one oracle run.

    ``rows`` independent rows per head kind; row ``i`` takes ``temperatures[i % len]``
    (0 marks a greedy row). Every row runs ``rounds`` draft-verify rounds (more if
    it still lacks ``m`` tokens). ``model_seed`` fixes drafters, target and context;
    ``seed`` fixes the anchors, the samplers' noise and the verifier's draws.
    """

    rows: int = 8_000
    m: int = 2
    rounds: int = 2
    gamma: int = 4
    vocab_size: int = 8
    hidden_size: int = 16
    markov_rank: int = 8
    head_kinds: tuple[str, ...] = HEAD_KINDS
    temperatures: tuple[float, ...] = (0.6, 1.0, 1.4, GREEDY)
    alpha: float = DEFAULT_ALPHA
    seed: int = 0
    model_seed: int = 0
    target_logit_scale: float = 1.0
    prev_embedding_scale: float = PREV_EMBEDDING_SCALE
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperatures", tuple(float(t) for t in self.temperatures))
        object.__setattr__(self, "head_kinds", tuple(self.head_kinds))
        self.validate()

    def validate(self) -> None:
        for name in ("rows", "rounds", "gamma", "vocab_size", "hidden_size", "markov_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise StatsError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.m, int) or self.m < 2:
            raise StatsError(f"m must be an integer >= 2 (the bug starts at token 2), got {self.m}")
        if self.vocab_size**self.m > MAX_JOINT_CELLS:
            raise StatsError(
                f"the joint of m={self.m} tokens over V={self.vocab_size} has "
                f"{self.vocab_size**self.m} cells; at most {MAX_JOINT_CELLS} are enumerated"
            )
        if not self.head_kinds or len(set(self.head_kinds)) != len(self.head_kinds):
            raise StatsError(f"head kinds must be distinct and not empty, got {self.head_kinds}")
        for kind in self.head_kinds:
            if kind not in HEAD_KINDS:
                raise StatsError(f"head kind must be one of {HEAD_KINDS}, got {kind!r}")
        if not self.temperatures:
            raise StatsError("at least one temperature is needed")
        for t in self.temperatures:
            if not math.isfinite(t) or t < 0:
                raise StatsError(f"temperatures must be finite and >= 0 (0: greedy), got {t!r}")
        if not 0 < self.alpha < 1:
            raise StatsError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if not self.prev_embedding_scale > 0:
            raise StatsError(
                f"prev_embedding_scale must be positive, got {self.prev_embedding_scale}"
            )
        if not self.target_logit_scale > 0:
            raise StatsError(f"target_logit_scale must be positive, got {self.target_logit_scale}")

    @property
    def groups(self) -> tuple[float, ...]:
        """The temperature groups, in first-seen order (0: greedy)."""
        return tuple(dict.fromkeys(self.temperatures))

    def describe(self) -> str:
        return (
            f"{self.rows} rows per head x {len(self.head_kinds)} heads "
            f"({', '.join(self.head_kinds)}), groups {', '.join(map(group_label, self.groups))}, "
            f"{self.rounds} rounds per row, V={self.vocab_size}, gamma={self.gamma}, "
            f"H={self.hidden_size}, r={self.markov_rank}, family alpha={self.alpha:g}, "
            f"seed={self.seed}, model seed={self.model_seed}"
        )


def group_label(temperature: float) -> str:
    return "greedy" if temperature == GREEDY else f"T={temperature:g}"


DEFAULT_CONFIG = StatsConfig()


@dataclass(frozen=True)
class StatsProblem:
    """The fixed part of a run, built once from a config."""

    config: StatsConfig
    drafters: dict[str, ToyDraftModel]  # by head kind
    target: MarkovTargetModel
    context: DraftContext
    sampling_info: SamplingInfo
    row_group: torch.Tensor  # [rows] int64, index into config.groups
    transition: torch.Tensor  # [G, V, V] float64: p(x | prev) of each group
    expected_joint: torch.Tensor  # [G, V**m] float64: the first m tokens after an anchor


def build_problem(config: StatsConfig) -> StatsProblem:
    """Drafters, target and context from ``config.model_seed`` (independent streams, all
    drawn on the CPU), the rows' sampling parameters and the exact laws."""
    device = torch.device(config.device)
    drafter_seed, target_seed, context_seed = derived_seeds(config.model_seed, 3)
    drafters = {}
    for kind in config.head_kinds:
        drafter = make_toy_draft_model(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            markov_rank=config.markov_rank,
            head_kind=kind,
            sample_from_anchor=True,
            seed=drafter_seed,
        )
        with torch.no_grad():
            drafter.markov_head.W1.weight.mul_(config.prev_embedding_scale)
        drafters[kind] = drafter.to(device)
    target = make_markov_target(
        vocab_size=config.vocab_size, seed=target_seed, logit_scale=config.target_logit_scale
    ).to(device)
    context = DraftContext(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        gamma=config.gamma,
        sample_from_anchor=True,
        seed=context_seed,
    ).to(device)
    groups = config.groups
    row_temperatures = [
        config.temperatures[i % len(config.temperatures)] for i in range(config.rows)
    ]
    sampling_info = SamplingInfo.from_lists(
        temperatures=row_temperatures,
        top_ks=[1 if t == GREEDY else TOP_K_ALL for t in row_temperatures],
        device=device,
    )
    every_token = torch.arange(config.vocab_size, device=device)
    transition = torch.stack(
        [
            target.next_token_probs(
                every_token,
                temperatures=torch.tensor(t, dtype=torch.float64, device=device),
                greedy_mask=torch.tensor(t == GREEDY, device=device),
            )
            for t in groups
        ]
    )  # [G, V, V]
    expected = torch.stack(
        [target.joint_probs(m=config.m, temperature=t, greedy=t == GREEDY) for t in groups]
    )  # [G, V**m]
    return StatsProblem(
        config=config,
        drafters=drafters,
        target=target,
        context=context,
        sampling_info=sampling_info,
        row_group=torch.tensor([groups.index(t) for t in row_temperatures], device=device),
        transition=transition.cpu(),
        expected_joint=expected.cpu(),
    )


def head_seed(seed: int, *, head_kind: str) -> int:
    """The decode seed of one head kind's rows: independent streams per head."""
    return derived_seeds(seed, len(HEAD_KINDS))[HEAD_KINDS.index(head_kind)]


def cpu_threads(device: str) -> int | None:
    """Intra-op threads the oracle runs with: one on the CPU, where every op works on
    ``[rows, V]`` with a tiny ``V`` and, on a shared 2-core machine, waiting for a busy
    core made the verdict 5-10x slower; as they are elsewhere."""
    return 1 if torch.device(device).type == "cpu" else None


def decode_rows(
    sampler_class: type,
    *,
    problem: StatsProblem,
    head_kind: str,
    seed: int,
    verifier: Verifier = CHAIN_VERIFIER,
) -> DecodeResult:
    """Build the sampler at ``max_bs = rows`` (folded sampling, in the sampler's own
    calling convention, ``harness.plugins.conventions``) and run the decode loop for one
    head kind, verified by ``verifier``; the loop reads the draft through the
    convention's ``draft_block``."""
    config = problem.config
    decode_seed = head_seed(seed, head_kind=head_kind)
    case = Case(
        bs=config.rows,
        gamma=config.gamma,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        markov_rank=config.markov_rank,
        head_kind=head_kind,
        temperatures=tuple(float(t) for t in problem.sampling_info.temperatures.tolist()),
        greedy_rows=tuple(bool(k <= 1) for k in problem.sampling_info.top_ks.tolist()),
        device=config.device,
        seed=decode_seed,  # a counter-based stream keys its noise from it
    )
    inputs = CaseInputs(
        model=problem.drafters[head_kind],
        hidden_states=torch.empty(0, config.hidden_size),  # the decode loop makes its own
        input_ids=torch.empty(0, dtype=torch.int64),
        sampling_info=problem.sampling_info,
        confidence_fn=None,
    )
    with intra_op_threads(cpu_threads(config.device)):
        built = build_for_case(sampler_class, case=case, inputs=inputs)
        return speculative_decode(
            sampler=built,
            target=problem.target,
            context=problem.context,
            sampling_info=problem.sampling_info,
            m=config.m,
            seed=decode_seed,
            min_rounds=config.rounds,
            verifier=verifier,
            read_draft=_built_draft_block,
        )


def _built_draft_block(built: BuiltSampler, rows: int) -> DraftBlock:
    return built.draft_block(rows)
