"""The problem the statistical oracle poses: configuration, models, rows, exact laws.

This module owns ``StatsConfig`` (and the default the command and the report
run), ``TargetSpec`` (a target at one distance from the drafters' own law),
``StatsProblem`` (for one target: the drafter of every head kind, the synthetic
target of each head, the draft context, each row's sampling setting, and the exact
target laws each parameter-set group is tested against); ``harness.oracles.decode``
drives a sampler through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from harness.case import TOP_K_ALL
from harness.defaults import DEFAULT_ROWS, DEFAULT_VERIFIER_NOISE, VerifierNoise
from harness.oracle_cut import ORACLE_LAWS, OUR_LAW, VLLM_LAW
from harness.oracles.defaults import (
    DEFAULT_ALPHA,
    DEFAULT_GAMMA,
    DEFAULT_HIDDEN_SIZE,
    DEFAULT_M,
    DEFAULT_MARKOV_RANK,
    DEFAULT_MODEL_SEED,
    DEFAULT_ROUNDS,
    DEFAULT_STAGE_ROWS,
    DEFAULT_SUSPICIOUS,
    DEFAULT_TEMPERATURE_WEIGHT,
    DEFAULT_TEMPERATURES,
    DEFAULT_TRUNCATED,
    DEFAULT_VOCAB_SIZE,
    GREEDY,
    ParameterSet,
)
from reference import (
    HEAD_KINDS,
    SamplingInfo,
    ToyDraftModel,
    Truncation,
    check_sampling_info,
    make_toy_draft_model,
    prepare_block,
    teacher_forced_logits,
)
from reference.decode import DraftContext
from reference.target_model import MarkovTargetModel, make_markov_target
from reference.verifier import derived_seeds

MAX_JOINT_CELLS = 1 << 16  # V**m cells of the enumerated joint
# The oracle's drafters lean on the previous token (W1 x 3): the lever the double walk
# pulls. At scale 1 the rnn head's q hardly moves with it (docs/statistics.md).
PREV_EMBEDDING_SCALE = 3.0
NEAR_ROWS = 1_000  # rows per head of the targets near the draft: its defects show directly


@dataclass(frozen=True)
class TargetSpec:
    """One target the oracle decodes against, by its distance from the drafters' law.

    ``draft_weight`` 0: an independent random Markov target, the drafters on inputs
    that depend on the anchor (far: most drafts are rejected and the verifier's
    residual draw, close to the target, hides much of a draft defect). Above 0: the
    drafters on context-free inputs, where a stateless head's draft law is a
    first-order chain ``D``, and target logits ``(1 - w) L + w D`` (``w = 1``: the
    drafter's own law, nearly every draft accepted, a draft defect seen directly).
    ``rows`` per head (``None``: the config's ``rows``; never more than those).
    """

    name: str
    draft_weight: float
    rows: int | None = None

    @property
    def anchor_dependent(self) -> bool:
        return self.draft_weight == 0


FAR = TargetSpec("far", 0.0)
DEFAULT_TARGETS = (
    FAR,
    TargetSpec("mid", 0.5, rows=NEAR_ROWS),
    TargetSpec("near", 1.0, rows=NEAR_ROWS),
)


class StatsError(ValueError):
    """A statistical-oracle configuration that cannot be run."""


@dataclass(frozen=True)
class StatsConfig:
    """Everything that defines one oracle run.

    ``rows`` independent rows per head kind; row ``i`` takes the ``i % len``-th of the
    row parameter sets (``row_sets``): one per entry of ``temperatures`` (0 marks a
    greedy row, ``top_k = 1``; the others truncate nothing), then, at the targets
    ``truncated_targets`` names, each of ``truncated``, every temperature's set taking
    ``temperature_weight`` rows for each row of a truncated set (the truncated sets
    run at a smaller stated depth; the temperature groups keep most of their rows).
    Every row runs ``rounds`` draft-verify rounds (more if it still lacks ``m`` tokens).
    ``model_seed`` fixes drafters, target and context; ``seed`` fixes the anchors, the
    samplers' noise and the verifier's draws.
    ``targets``: the targets decoded against, the first the one power is drawn at.
    ``restage``: odd rounds draft their rows in several calls of other sizes, each
    with other requests staged in its slots (``life_batches``); off, every round is
    one call of every row in order (one set of parameters for the instance's life).
    ``verifier_noise``: each sampler's drafter and its verifier on its server's own
    plumbing, from one seed (``BuiltSampler.decode_streams``), or on independent
    streams (a control).
    ``suspicious`` and ``stage_rows``: when the family's p-value is below ``suspicious``
    but not decisive, the strongest test is decoded again on fresh rows, one stage per
    entry of ``stage_rows`` at most (``harness.oracles.sequential``; ``()``: no stage).
    ``law``: the law a request samples from without speculation, which the exact laws
    follow (``ORACLE_LAWS``): ours (``reference.request_law``), or the server's own where
    the verifier is the server's (``JudgedOnItsLaw``).
    """

    rows: int = DEFAULT_ROWS
    m: int = DEFAULT_M
    rounds: int = DEFAULT_ROUNDS
    gamma: int = DEFAULT_GAMMA
    vocab_size: int = DEFAULT_VOCAB_SIZE
    hidden_size: int = DEFAULT_HIDDEN_SIZE
    markov_rank: int = DEFAULT_MARKOV_RANK
    head_kinds: tuple[str, ...] = HEAD_KINDS
    temperatures: tuple[float, ...] = DEFAULT_TEMPERATURES
    truncated: tuple[ParameterSet, ...] = DEFAULT_TRUNCATED
    truncated_targets: tuple[str, ...] = (FAR.name,)
    temperature_weight: int = DEFAULT_TEMPERATURE_WEIGHT
    alpha: float = DEFAULT_ALPHA
    seed: int = 0
    model_seed: int = DEFAULT_MODEL_SEED
    target_logit_scale: float = 1.0
    prev_embedding_scale: float = PREV_EMBEDDING_SCALE
    device: str = "cpu"
    targets: tuple[TargetSpec, ...] = DEFAULT_TARGETS
    restage: bool = True
    verifier_noise: VerifierNoise = DEFAULT_VERIFIER_NOISE
    suspicious: float = DEFAULT_SUSPICIOUS
    stage_rows: tuple[int, ...] = DEFAULT_STAGE_ROWS
    law: str = OUR_LAW  # the law each group's committed tokens are judged against

    def __post_init__(self) -> None:
        object.__setattr__(self, "temperatures", tuple(float(t) for t in self.temperatures))
        object.__setattr__(self, "truncated", tuple(self.truncated))
        object.__setattr__(self, "truncated_targets", tuple(self.truncated_targets))
        object.__setattr__(self, "stage_rows", tuple(self.stage_rows))
        object.__setattr__(self, "head_kinds", tuple(self.head_kinds))
        object.__setattr__(self, "targets", tuple(self.targets))
        self.validate()

    def validate(self) -> None:
        if self.law not in ORACLE_LAWS:
            raise StatsError(f"law must be one of {sorted(ORACLE_LAWS)}, got {self.law!r}")
        if not isinstance(self.verifier_noise, VerifierNoise):
            raise StatsError(
                f"verifier_noise must be one of {[v.value for v in VerifierNoise]}, "
                f"got {self.verifier_noise!r}"
            )
        for name in (
            "rows",
            "rounds",
            "gamma",
            "vocab_size",
            "hidden_size",
            "markov_rank",
            "temperature_weight",
        ):
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
        if not all(isinstance(s, ParameterSet) for s in self.truncated):
            raise StatsError(f"truncated must hold ParameterSet values, got {self.truncated!r}")
        try:
            check_sampling_info(sampling_info_of(self.truncated))
        except ValueError as error:
            raise StatsError(f"truncated: {error}") from None
        if not 0 < self.alpha < 1:
            raise StatsError(f"alpha must be in (0, 1), got {self.alpha!r}")
        if not 0 < self.suspicious < 0.5:
            raise StatsError(f"suspicious must be in (0, 0.5), got {self.suspicious!r}")
        for rows in self.stage_rows:
            if not isinstance(rows, int) or isinstance(rows, bool) or rows <= 0:
                raise StatsError(f"stage rows must be positive integers, got {self.stage_rows}")
        if not self.prev_embedding_scale > 0:
            raise StatsError(
                f"prev_embedding_scale must be positive, got {self.prev_embedding_scale}"
            )
        if not self.target_logit_scale > 0:
            raise StatsError(f"target_logit_scale must be positive, got {self.target_logit_scale}")
        names = [t.name for t in self.targets]
        if not names or len(set(names)) != len(names):
            raise StatsError(f"targets must be distinct by name and not empty, got {names}")
        for target in self.targets:
            if not 0 <= target.draft_weight <= 1:
                raise StatsError(
                    f"target {target.name!r}: draft_weight must be in [0, 1], "
                    f"got {target.draft_weight!r}"
                )
            if target.rows is not None and (not isinstance(target.rows, int) or target.rows <= 0):
                raise StatsError(
                    f"target {target.name!r}: rows must be a positive integer, got {target.rows!r}"
                )

    def target_rows(self, target: TargetSpec) -> int:
        """Rows per head at ``target``: its own, never more than ``rows``."""
        return self.rows if target.rows is None else min(target.rows, self.rows)

    def for_target(self, target: TargetSpec) -> StatsConfig:
        """The config of one target's problem: its rows, and only it; the truncated sets
        where ``truncated_targets`` names it."""
        truncated = self.truncated if target.name in self.truncated_targets else ()
        return replace(self, rows=self.target_rows(target), targets=(target,), truncated=truncated)

    def truncated_at(self) -> tuple[str, ...]:
        """The targets of this config whose rows take the truncated sets."""
        if not self.truncated:
            return ()
        return tuple(t.name for t in self.targets if t.name in self.truncated_targets)

    @property
    def row_sets(self) -> tuple[ParameterSet, ...]:
        """The cycle of parameter sets rows take in turn: the temperatures', then
        ``truncated`` (the temperatures' ``temperature_weight`` times over when there is
        one, so each keeps that many rows per row of a truncated set)."""
        temperatures = tuple(
            ParameterSet(t, top_k=1 if t == GREEDY else 0) for t in self.temperatures
        )
        if not self.truncated_at():
            return temperatures
        return temperatures * self.temperature_weight + self.truncated

    @property
    def temperature_rows(self) -> int:
        """The part of ``rows`` the temperature sets take: all of it without a truncated
        set, else their share of the cycle (``row_sets``)."""
        sets = self.row_sets
        temperature_sets = sum(1 for s in sets if s not in self.truncated)
        return self.rows * temperature_sets // len(sets)

    def groups_at(self, target: TargetSpec) -> tuple[ParameterSet, ...]:
        """The parameter-set groups of ``target``'s rows."""
        return self.for_target(target).groups

    @property
    def groups(self) -> tuple[ParameterSet, ...]:
        """The parameter-set groups, in first-seen order."""
        return tuple(dict.fromkeys(self.row_sets))

    def describe(self) -> str:
        targets = ", ".join(
            f"{t.name} (draft weight {t.draft_weight:g}, {self.target_rows(t)} rows per head)"
            for t in self.targets
        )
        return (
            f"targets {targets} x {len(self.head_kinds)} heads "
            f"({', '.join(self.head_kinds)}), groups {', '.join(map(group_label, self.groups))}"
            f"{self.truncated_depth()}, "
            f"{self.rounds} rounds per row ({'restaged' if self.restage else 'one call'} "
            f"on odd rounds), V={self.vocab_size}, gamma={self.gamma}, "
            f"H={self.hidden_size}, r={self.markov_rank}, family alpha={self.alpha:g}, "
            f"stages {'/'.join(map(str, self.stage_rows)) or 'none'} rows below family p "
            f"{self.suspicious:g}, "
            f"seed={self.seed}, model seed={self.model_seed}, "
            f"verifier noise: {self.verifier_noise.value} ({self.verifier_noise.description})"
        )

    def truncated_depth(self) -> str:
        """Where the truncated sets run and at what depth, as one clause ("" without any)."""
        at = self.truncated_at()
        if not at:
            return ""
        return (
            f" (the truncated sets at {', '.join(at)} only, one row each per "
            f"{self.temperature_weight} of a temperature group)"
        )


def group_label(group: ParameterSet) -> str:
    return group.label


def sampling_info_of(
    sets: Sequence[ParameterSet], *, device: str | torch.device = "cpu"
) -> SamplingInfo:
    """One request per parameter set, in order; no top-k staged as ``TOP_K_ALL``, as the
    matrix's cases and a server stage it (a server's convention reads ``top_k <= 1`` as
    greedy)."""
    return SamplingInfo.from_lists(
        temperatures=[s.temperature for s in sets],
        top_ks=[s.top_k or TOP_K_ALL for s in sets],
        top_ps=[s.top_p for s in sets],
        min_ps=[s.min_p for s in sets],
        device=device,
    )


def group_truncation(group: ParameterSet, *, device: torch.device) -> Truncation:
    """A group's truncation as scalars, rounded as the decode stages it (float32 top-p
    and min-p read in float64), so the exact law truncates what the verifier truncates."""
    staged = sampling_info_of([group]).truncation
    return Truncation(
        top_ks=staged.top_ks[0].to(device),
        top_ps=staged.top_ps[0].to(device, torch.float64),
        min_ps=staged.min_ps[0].to(device, torch.float64),
    )


DEFAULT_CONFIG = StatsConfig()


@dataclass(frozen=True)
class StatsProblem:
    """The fixed part of one target's run, built once from its config
    (``StatsConfig.for_target``: its rows, and that target only)."""

    config: StatsConfig
    oracle_config: StatsConfig  # the whole oracle's, every target: what it was built from
    drafters: dict[str, ToyDraftModel]  # by head kind
    targets: dict[str, MarkovTargetModel]  # by head kind (the same one when far)
    context: DraftContext
    sampling_info: SamplingInfo
    row_group: torch.Tensor  # [rows] int64, index into config.groups
    transition: dict[str, torch.Tensor]  # by head: [G, V, V] float64, p(x | prev) per group
    expected_joint: dict[str, torch.Tensor]  # by head: [G, V**m], the first m tokens

    @property
    def target(self) -> TargetSpec:
        return self.config.targets[0]


def build_problems(config: StatsConfig) -> tuple[StatsProblem, ...]:
    """One problem per target of ``config``, in its order (the same drafters in each)."""
    drafters = build_drafters(config)
    return tuple(
        build_problem(config, target=target, drafters=drafters) for target in config.targets
    )


def build_drafters(config: StatsConfig) -> dict[str, ToyDraftModel]:
    """One drafter per head kind from ``config.model_seed``, on the config's device."""
    drafter_seed = derived_seeds(config.model_seed, 3)[0]
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
        drafters[kind] = drafter.to(torch.device(config.device))
    return drafters


def far_target(config: StatsConfig) -> MarkovTargetModel:
    """The config's far target, on the CPU: its Markov target from ``model_seed`` (the
    near ones mix it with the drafter's own law)."""
    _, target_seed, _ = derived_seeds(config.model_seed, 3)
    return make_markov_target(
        vocab_size=config.vocab_size, seed=target_seed, logit_scale=config.target_logit_scale
    )


def build_problem(
    oracle_config: StatsConfig,
    *,
    target: TargetSpec | None = None,
    drafters: dict[str, ToyDraftModel] | None = None,
) -> StatsProblem:
    """The problem of one target of ``oracle_config`` (default its first): drafters,
    target and context from ``model_seed``, independent streams, all drawn on the CPU;
    the rows' sampling parameters and the exact laws."""
    spec = target if target is not None else oracle_config.targets[0]
    config = oracle_config.for_target(spec)
    device = torch.device(config.device)
    _, _, context_seed = derived_seeds(config.model_seed, 3)
    drafters = drafters if drafters is not None else build_drafters(config)
    far = far_target(config)
    context = DraftContext(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        gamma=config.gamma,
        sample_from_anchor=True,
        seed=context_seed,
        anchor_dependent=spec.anchor_dependent,
    ).to(device)
    targets = {
        kind: far.to(device)
        if spec.anchor_dependent
        else MarkovTargetModel(
            (1 - spec.draft_weight) * far.transition_logits
            + spec.draft_weight * first_step_logits(drafters[kind], context=context, config=config)
        ).to(device)
        for kind in config.head_kinds
    }
    groups = config.groups
    sets = row_sets(config)
    sampling_info = sampling_info_of(sets, device=device)
    transitions = {
        kind: group_transitions(t, groups=groups, law=config.law) for kind, t in targets.items()
    }
    return StatsProblem(
        config=config,
        oracle_config=oracle_config,
        drafters=drafters,
        targets=targets,
        context=context,
        sampling_info=sampling_info,
        row_group=torch.tensor([groups.index(s) for s in sets], device=device),
        transition=transitions,
        expected_joint={
            kind: torch.stack(
                [t.joint_of(law.to(t.device), m=config.m) for law in transitions[kind]]
            ).cpu()
            for kind, t in targets.items()
        },
    )


def group_transitions(
    target: MarkovTargetModel, *, groups: Sequence[ParameterSet], law: str = OUR_LAW
) -> torch.Tensor:
    """``p(x | prev)`` of every parameter-set group: ``[G, V, V]`` float64 on the CPU,
    under ``law`` (``ORACLE_LAWS``: ours, ``reference.request_law``, or a server's own)."""
    if law == VLLM_LAW:
        from harness.upstream.vllm_laws import Request, sampler_law

        requests = [Request.of(g) for g in groups]
        return sampler_law(target.transition_logits, requests=requests).to(torch.float64)
    every_token = torch.arange(target.vocab_size, device=target.device)
    return torch.stack(
        [
            target.next_token_probs(
                every_token,
                temperatures=torch.tensor(g.temperature, dtype=torch.float64, device=target.device),
                greedy_mask=torch.tensor(g.greedy, device=target.device),
                truncation=group_truncation(g, device=target.device),
            )
            for g in groups
        ]
    ).cpu()


def first_step_logits(
    drafter: ToyDraftModel, *, context: DraftContext, config: StatsConfig
) -> torch.Tensor:
    """``D[prev]``: the drafter's corrected logits at step 0 after each anchor ``[V, V]``
    float64. On context-free inputs that is a stateless head's law at every step."""
    anchors = torch.arange(config.vocab_size, device=context.anchor_embedding.device)
    with torch.no_grad():
        block = prepare_block(
            model=drafter,
            gamma=config.gamma,
            max_bs=config.vocab_size,
            hidden_states=context.hidden_states(anchors),
            input_ids=context.input_ids(anchors),
        )
        tokens = torch.zeros(config.vocab_size, config.gamma, dtype=torch.int64)
        corrected = teacher_forced_logits(model=drafter, block=block, tokens=tokens.to(anchors))
    return corrected[:, 0].to(torch.float64).cpu()  # [V, V]


def row_sets(config: StatsConfig) -> list[ParameterSet]:
    """Each row's parameter set: row ``i`` takes ``row_sets[i % len]``."""
    sets = config.row_sets
    return [sets[i % len(sets)] for i in range(config.rows)]
