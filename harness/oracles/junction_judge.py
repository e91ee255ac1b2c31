"""A life across the junction, judged (docs/design.md, "A life across the junction").

``judge_junction`` builds the sampler under test once, in its own calling convention,
and lives ``harness.oracles.junction``'s life twice from the same seeds: the primary
life starts from one poison and leaves a freed slot's buffers as the request left them;
its twin starts from another poison and poisons a freed slot as soon as it is freed.
Three things are judged:

- ``junction_leftovers`` (exact): every request commits the very same tokens in both
  lives, so no committed token depends on a poisoned value or on what another request
  left in a slot;
- ``junction_keys`` (exact): every row the verifier drew for was keyed by its own
  request's seed and position;
- ``junction_law`` (statistical): per request state (steady, joining, reused slot,
  resumed), the judged segments' transitions against the target's exact law at each
  request's temperature (``pearson_fit``, strata: temperature group, position, previous
  token), Holm over the states at the family's alpha, each with the fraction of its
  rows a fixed-token defect must reach to be seen (``detection_fraction``);

and every drafter call of the primary life is held to the exact per-call checks
(``harness.oracles.percall``). A sampler that raises, built or called, fails ``ran``
(as in the checks' matrix): the life ends there, with nothing else judged.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from harness.case import TOP_K_ALL
from harness.defaults import JUNCTION_ROWS, MIN_JUNCTION_ROWS  # judged rows a state
from harness.devices import intra_op_threads
from harness.oracles.decode import built_draft_block, cpu_threads, oracle_case, oracle_sampler
from harness.oracles.defaults import DEFAULT_ALPHA, GREEDY, ParameterSet
from harness.oracles.fits import CountTable
from harness.oracles.gof import holm_rejections, pearson_fit
from harness.oracles.junction import (
    PREEMPT_STEP,
    PRIMARY_POISON,
    TWIN_POISON,
    JunctionLife,
    JunctionPlan,
    JunctionServer,
    Poison,
    Request,
    RequestState,
    live_junction,
)
from harness.oracles.percall import CallChecker
from harness.oracles.power import TARGET_POWER, detection_fraction
from harness.oracles.problem import FAR, StatsConfig, build_problem, group_transitions
from harness.pipeline.call import raised_error
from harness.pipeline.call_findings import HeldCalls
from reference import SamplingInfo
from reference.decode import DraftCall, draft_batch
from reference.verifier import DraftBlock

JUNCTION_GROUPS = (GREEDY, 0.7, 1.3)
JUNCTION_HEAD = "vanilla"


@dataclass(frozen=True)
class StateLaw:
    """One request state's law test: its segments, p-value and detection bound."""

    state: str
    rows: int
    p_value: float
    dof: int
    rejected: bool
    bound: float | None  # fraction of its rows a fixed-token defect must reach (power 0.99)


@dataclass(frozen=True)
class JunctionVerdict:
    """A life across the junction, judged."""

    sampler: str
    server: str
    steps: int
    calls: int
    batch_sizes: tuple[int, ...]
    laws: tuple[StateLaw, ...]
    leftovers: str | None  # the first request committing differently in the twin life
    keys: str | None  # the first row verified under another request's key
    held: HeldCalls
    alpha: float
    kept: tuple[str, ...]  # the buffers the server keeps between steps
    verifier_reads: tuple[str, ...]  # those of them the verifier reads
    incomplete: int = 0  # judged segments short of m tokens (a life that lost a request)
    # per failed exact check, the state of the request that exposed it
    exposed_in: tuple[tuple[str, str], ...] = ()
    raised: str | None = None  # the sampler raised, built or called: the life ended there

    @property
    def ok(self) -> bool:
        return not self.failed_checks()

    def failed_checks(self) -> list[str]:
        if self.raised is not None:
            return ["ran"]
        failed = [
            c
            for c, bad in (("junction_leftovers", self.leftovers), ("junction_keys", self.keys))
            if bad
        ]
        failed += (
            ["junction_law"] if any(law.rejected for law in self.laws) or self.incomplete else []
        )
        failed += [f.check for f in self.held.findings]
        return failed

    def lines(self) -> list[str]:
        """The verdict in words: what ran, each state's rows and bound, what failed."""
        sizes = ", ".join(map(str, self.batch_sizes))
        out = [
            f"life across the junction: {self.sampler} on {self.server}, {self.steps} steps, "
            f"{self.calls} drafter calls (batch sizes {sizes}), {self.held.calls} calls held "
            "to the per-call checks",
            f"  buffers kept between steps: {', '.join(self.kept)}; the verifier reads "
            f"{', '.join(self.verifier_reads)}; all poisoned before the first step",
        ]
        for law in self.laws:
            bound = (
                "no bound" if law.bound is None else f"a fixed token on {law.bound:.1%} of its rows"
            )
            out.append(
                f"  {law.state}: {law.rows} rows, p = {law.p_value:.3g} (dof {law.dof}), "
                f"{'REJECTED' if law.rejected else 'fits'}; sees {bound}"
            )
        out.append(
            f"  leftovers: {self.leftovers or 'every request commits the same in the twin life'}"
        )
        out.append(f"  keys: {self.keys or 'every row drawn under its own request key'}")
        out += [f"  {f.check}: {f.describe()}" for f in self.held.findings]
        out += [] if self.raised is None else [f"  ran: {self.raised}"]
        failed = ", ".join(self.failed_checks())
        out.append(f"verdict: {'lossless' if self.ok else 'NOT lossless: ' + failed}")
        return out


class SamplerRaised(Exception):
    """The sampler under test raised in a life: built (``call`` None) or at its
    ``call``-th drafter call (from 0)."""

    def __init__(self, error: Exception, *, call: int | None) -> None:
        raised = raised_error(error)
        at = "while it was built" if call is None else f"at drafter call {call}"
        super().__init__(f"the sampler raised {at}: {raised.summary()} ({raised.where})")


def state_tables(
    life: JunctionLife, *, transition: torch.Tensor, groups: tuple[float, ...], m: int
) -> tuple[dict[RequestState, CountTable], int]:
    """Per state, the judged segments' transition counts ``[G*m*V, V]`` (strata: group,
    position, previous token) and their exact law; and how many segments fell short."""
    vocab = transition.shape[-1]
    observed = {
        s: torch.zeros(len(groups) * m * vocab, vocab, dtype=torch.float64) for s in RequestState
    }
    expected = {s: torch.zeros_like(observed[s]) for s in RequestState}
    incomplete = 0
    for request in life.requests:
        group = groups.index(request.temperature)
        for segment in request.segments:
            tokens = request.committed[segment.start : segment.start + m]
            if len(tokens) < m:
                incomplete += 1
                continue
            previous = segment.anchor
            for position, token in enumerate(tokens):
                stratum = (group * m + position) * vocab + previous
                observed[segment.state][stratum, token] += 1
                expected[segment.state][stratum] = transition[group, previous]
                previous = token
    tables = {
        s: CountTable(
            group=s.value, test="junction", observed=observed[s], expected_probs=expected[s]
        )
        for s in RequestState
    }
    return tables, incomplete


def state_at(request: Request, token: int) -> str:
    """The state of the segment ``request``'s committed token ``token`` falls in."""
    within = [seg for seg in request.segments if seg.start <= token]
    return within[-1].state.value if within else "never admitted"


def _first_difference(primary: JunctionLife, twin: JunctionLife) -> tuple[str, str] | None:
    """The state and the words of the first request committing differently in the twin."""
    for a, b in zip(primary.requests, twin.requests, strict=True):
        if a.committed != b.committed:
            at = next(
                (
                    i
                    for i, (x, y) in enumerate(zip(a.committed, b.committed, strict=False))
                    if x != y
                ),
                min(len(a.committed), len(b.committed)),
            )
            state = state_at(a, at)
            return state, (
                f"request {a.id} ({state}) commits {a.committed[at : at + 1]} at token {at} "
                f"with the slots as requests left them, {b.committed[at : at + 1]} with them "
                "poisoned: a committed token read a value no step wrote for it"
            )
    return None


def _first_foreign_key(server: JunctionServer, life: JunctionLife) -> tuple[str, str] | None:
    """The state and the words of the first row drawn under another request's key."""
    by_id = {request.id: request for request in life.requests}
    for request, seed, position, own_seed, own_position in server.keys_read:
        if (seed, position) != (own_seed, own_position):
            state = state_at(by_id[request], own_position - 1)
            return state, (
                f"request {request} ({state}) verified under seed {seed}, position "
                f"{position}; its own are seed {own_seed}, position {own_position}"
            )
    return None


def judge_junction(
    sampler_class: type,
    *,
    rows: int = JUNCTION_ROWS,
    seed: int = 0,
    server_class: type[JunctionServer] = JunctionServer,
    alpha: float = DEFAULT_ALPHA,
    m: int = 2,
) -> JunctionVerdict:
    """Live the junction's life with ``sampler_class`` as the drafter and
    ``server_class`` as the server, twice (``PRIMARY_POISON`` with leftovers, then
    ``TWIN_POISON`` poisoning freed slots), and judge it."""
    if rows < MIN_JUNCTION_ROWS:
        raise ValueError(f"rows must be {MIN_JUNCTION_ROWS} or more (a state's), got {rows}")
    if not 1 <= m <= PREEMPT_STEP + 1:
        raise ValueError(f"m must be in 1..{PREEMPT_STEP + 1} (judged before preemption), got {m}")
    config = StatsConfig(
        rows=rows,
        m=max(m, 2),
        head_kinds=(JUNCTION_HEAD,),
        temperatures=JUNCTION_GROUPS,
        targets=(FAR,),
    )
    plan = JunctionPlan(rows=rows, m=m, gamma=config.gamma, groups=JUNCTION_GROUPS, seed=seed + 1)
    problem = build_problem(config)
    target = problem.targets[JUNCTION_HEAD]
    case = oracle_case(replace(config, rows=plan.slots), head_kind=JUNCTION_HEAD, seed=seed)
    staged = SamplingInfo.from_lists(  # each call stages its own requests
        temperatures=[1.0] * case.bs, top_ks=[TOP_K_ALL] * case.bs
    )

    def life(
        poison: Poison, repoison: Poison | None, *, hold: bool
    ) -> tuple[JunctionLife, JunctionServer, CallChecker | None]:
        """One life from ``poison``; ``hold``: its drafter calls held to the per-call
        checks (the primary's: the twin's calls are the same)."""
        try:
            built = oracle_sampler(
                sampler_class,
                problem=problem,
                head_kind=JUNCTION_HEAD,
                case=case,
                sampling_info=staged,
            )
        except Exception as error:  # the sampler's own code: its construction failed
            raise SamplerRaised(error, call=None) from error
        held = (
            CallChecker(
                model=problem.drafters[JUNCTION_HEAD],
                built=built,
                target=FAR.name,
                head=JUNCTION_HEAD,
                verifier="junction",
            )
            if hold
            else None
        )

        def drafter(
            slots: torch.Tensor, anchors: torch.Tensor, info: SamplingInfo, index: int
        ) -> DraftBlock:
            try:
                block = draft_batch(
                    built,
                    context=problem.context,
                    anchors=anchors,
                    sampling_info=info,
                    read_draft=built_draft_block,
                )
            except Exception as error:  # the sampler's own call (staging included)
                raise SamplerRaised(error, call=index) from error
            if held is not None:
                held(
                    DraftCall(
                        index=index,
                        round=index,
                        rows=slots,
                        anchors=anchors,
                        context=problem.context,
                        sampling_info=info,
                        block=block,
                    )
                )
            return block

        server = server_class(
            slots=plan.slots, gamma=plan.gamma, vocab_size=config.vocab_size, poison=poison
        )
        with torch.random.fork_rng(devices=[]), intra_op_threads(cpu_threads("cpu")):
            torch.manual_seed(seed)
            lived = live_junction(
                plan, server=server, drafter=drafter, target=target, repoison=repoison
            )
        return lived, server, held

    try:
        primary, server, checker = life(PRIMARY_POISON, None, hold=True)
        twin, _, _ = life(TWIN_POISON, TWIN_POISON, hold=False)
    except SamplerRaised as raised:  # nothing else is judged: its life ended there
        return JunctionVerdict(
            sampler=sampler_class.__qualname__,
            server=server_class.__qualname__,
            steps=0,
            calls=0,
            batch_sizes=(),
            laws=(),
            leftovers=None,
            keys=None,
            held=HeldCalls(),
            alpha=alpha,
            kept=server_class.KEPT,
            verifier_reads=server_class.VERIFIER_READS,
            raised=str(raised),
        )
    assert checker is not None
    sets = [ParameterSet(1.0, top_k=1) if t == GREEDY else ParameterSet(t) for t in JUNCTION_GROUPS]
    transition = group_transitions(target.to("cpu"), groups=sets)
    tables, incomplete = state_tables(primary, transition=transition, groups=JUNCTION_GROUPS, m=m)
    fits = {s: pearson_fit(t.observed, expected_probs=t.expected_probs) for s, t in tables.items()}
    rejected = holm_rejections([f.p_value for f in fits.values()], alpha=alpha)
    level = alpha / len(tables)
    laws = tuple(
        StateLaw(
            state=s.value,
            rows=int(tables[s].observed.sum()) // m,
            p_value=fits[s].p_value,
            dof=fits[s].dof,
            rejected=r,
            bound=detection_fraction(tables[s], level=level, power=TARGET_POWER),
        )
        for s, r in zip(tables, rejected, strict=True)
    )
    leftovers = _first_difference(primary, twin)
    keys = _first_foreign_key(server, primary)
    exposed = (("junction_leftovers", leftovers), ("junction_keys", keys))
    return JunctionVerdict(
        sampler=sampler_class.__qualname__,
        server=server_class.__qualname__,
        steps=primary.steps,
        calls=primary.calls,
        batch_sizes=tuple(primary.batch_sizes),
        laws=laws,
        leftovers=None if leftovers is None else leftovers[1],
        keys=None if keys is None else keys[1],
        held=checker.held(),
        alpha=alpha,
        kept=server_class.KEPT,
        verifier_reads=server_class.VERIFIER_READS,
        incomplete=incomplete,
        exposed_in=tuple((check, found[0]) for check, found in exposed if found is not None),
    )
