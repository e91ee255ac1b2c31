"""A server's life across the junction of the drafter and the verifier (docs/design.md,
"A life across the junction").

The drafter and the verifier meet in buffers the server keeps between steps: the draft
tokens and their ``q``, each slot's seed and position, its output row and the token
the next step starts from. ``JunctionServer`` is our convention's server at that
junction: ``max_bs`` slots, each buffer one row a slot, the verifier's draws keyed per
request by ``(seed, position)`` (``keyed_uniforms``), a row without drafts (a request
whose prompt had one token left, or that resumed) verified with none, so it commits one
token from the target. ``live_junction`` drives the sampler under test (any sampler of
a calling convention, built once at ``max_bs = slots``) and the server through a life
of at least ``MIN_STEPS`` steps of drafter then verifier, in which requests join
(among them ones with exactly one prompt token left, and ones with a prefill chunk
before it, sharing the batch with decode rows, their draft rows placeholders), leave,
have their slots taken by new requests with the buffers as the old one left them, are
preempted and resumed, and the greedy/sampled mix changes from wave to wave. Every
request's judged segment (its first ``m`` tokens after joining, or after resuming) is
kept with the state it was in, for ``harness.oracles.junction_judge``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from harness.case import TOP_K_ALL
from harness.oracles.defaults import GREEDY
from reference import SamplingInfo
from reference.target_model import MarkovTargetModel
from reference.verifier import DraftBlock, VerifyResult, chain_verify_at, draft_distribution

MIN_STEPS = 8  # drafter-then-verifier steps of a life, at least
PREEMPT_STEP = 2  # the step after which the steady requests are preempted
RESUME_AFTER = 2  # steps a preempted request waits before it resumes
ARRIVAL_STEPS = (1, 3, 5)  # steps at which waves of new requests arrive


# A server whose batch building the harness does not run from its release: what runs.
HARNESS_BATCH_BUILDING = (
    "the harness's scheduler and slot buffers (harness.oracles.junction) stand in for the "
    "server's batch building (which slot a request takes, its request states, input batch "
    "and prepare kernels); the verifier is entered on them"
)


class RequestState(enum.Enum):
    """What a request's judged segment followed."""

    STEADY = "steady"  # in the batch from the start, decoding
    JOINING = "joining"  # joined mid-life into a slot no request had used
    REUSED = "reused slot"  # joined mid-life into a slot another request had left
    RESUMED = "resumed"  # preempted, then resumed (its prompt and tokens recomputed)


@dataclass(frozen=True)
class Poison:
    """The values every buffer holds before the first step (and, in a twin life, a
    freed slot's buffers as soon as it is freed): valid ids and a valid law, so a read
    of them changes what is committed instead of raising."""

    token: int
    probs: str  # "uniform" or "one-hot" (on ``token``)
    seed: int
    position: int


PRIMARY_POISON = Poison(token=-1, probs="uniform", seed=0x5EED, position=0)
TWIN_POISON = Poison(token=0, probs="one-hot", seed=0xBAD5EED, position=4093)


def keyed_uniforms(seeds: torch.Tensor, positions: torch.Tensor, count: int) -> torch.Tensor:
    """``[n, count]`` float64 uniforms in [0, 1), one stream per request keyed by its
    ``(seed, position)`` ``[n]`` each (splitmix64 of the key and the draw's index)."""
    seed = seeds.cpu().numpy().astype(np.uint64)[:, None]
    position = positions.cpu().numpy().astype(np.uint64)[:, None]
    index = np.arange(count, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        x = (seed * np.uint64(0x9E3779B97F4A7C15)) ^ (position << np.uint64(24)) ^ index
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return torch.from_numpy((x >> np.uint64(11)).astype(np.float64) * 2.0**-53)


KEY_PARTS = ("seed", "position")  # a slot key's parts, in ``read_key``'s order


def key_part(part: str) -> int:
    """The index of ``part`` in a slot key (``KEY_PARTS``)."""
    if part not in KEY_PARTS:
        raise ValueError(f"part must be 'seed' or 'position', got {part!r}")
    return KEY_PARTS.index(part)


@dataclass(frozen=True)
class Segment:
    """A judged stretch of a request: the state it followed, where it starts in the
    request's committed tokens, and the token before it."""

    state: RequestState
    start: int
    anchor: int


@dataclass
class Request:
    """One request of the life, as the scheduler knows it."""

    id: int
    seed: int
    temperature: float  # GREEDY (0): a greedy request
    anchor: int  # the last token of its prompt
    budget: int  # tokens it commits before it leaves
    prompt_left: int  # prompt tokens still to compute (the last one samples)
    committed: list[int] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    slot: int | None = None

    @property
    def position(self) -> int:
        """The position of its next token (its prompt counts as one)."""
        return 1 + len(self.committed)

    @property
    def last_token(self) -> int:
        return self.committed[-1] if self.committed else self.anchor


class JunctionServer:
    """Our convention's server at the junction: the buffers it keeps a slot between
    steps, what it writes when a request takes a slot, what the drafter leaves there,
    and what the verifier reads. A server that wrote less, or read more, is a subclass."""

    # The buffers it keeps a slot between steps, and which of them the verifier reads.
    KEPT: tuple[str, ...] = (
        "draft_tokens",
        "draft_probs",
        "seeds",
        "positions",
        "outputs",
        "last_tokens",
    )
    VERIFIER_READS: tuple[str, ...] = (
        "draft_tokens",
        "draft_probs",
        "seeds",
        "positions",
        "last_tokens",
    )
    VERIFIER = "chain"  # the verifier it enters (harness.oracles.verifiers' name)
    # what of a release's server stands in, in words
    STANDS_IN: tuple[str, ...] = (HARNESS_BATCH_BUILDING,)

    def __init__(self, *, slots: int, gamma: int, vocab_size: int, poison: Poison) -> None:
        self.gamma, self.vocab_size = gamma, vocab_size
        self.allocate(slots)
        self.drafted = torch.zeros(slots, dtype=torch.bool)  # [S]: drafts await verification
        # per verified row: (request, seed and position read, the request's own)
        self.keys_read: list[tuple[int, int, int, int, int]] = []
        self.poison_slots(torch.arange(slots), poison)

    def allocate(self, slots: int) -> None:
        """The buffers it keeps, a row a slot (``KEPT``)."""
        gamma, vocab_size = self.gamma, self.vocab_size
        self.draft_tokens = torch.empty(slots, gamma, dtype=torch.int64)  # [S, gamma]
        self.draft_probs = torch.empty(slots, gamma, vocab_size, dtype=torch.float64)
        self.seeds = torch.empty(slots, dtype=torch.int64)  # [S]
        self.positions = torch.empty(slots, dtype=torch.int64)  # [S]
        self.outputs = torch.empty(slots, gamma + 1, dtype=torch.int64)  # [S, gamma+1]
        self.last_tokens = torch.empty(slots, dtype=torch.int64)  # [S]: the next anchor

    def poison_probs(self, poison: Poison) -> torch.Tensor:
        """``[V]`` float64: the poison's law (uniform, or one-hot on its token)."""
        token = poison.token % self.vocab_size
        if poison.probs == "one-hot":
            return torch.nn.functional.one_hot(torch.tensor(token), self.vocab_size).double()
        return torch.full((self.vocab_size,), 1.0 / self.vocab_size, dtype=torch.float64)

    def poison_slots(self, slots: torch.Tensor, poison: Poison) -> None:
        """Fill the slots' buffers with ``poison`` (ids taken modulo the vocabulary)."""
        token = poison.token % self.vocab_size
        self.draft_tokens[slots] = token
        self.draft_probs[slots] = self.poison_probs(poison)
        self.seeds[slots], self.positions[slots] = poison.seed, poison.position
        self.outputs[slots], self.last_tokens[slots] = token, token

    def take_slot(self, free: list[int]) -> int:
        """The slot a request that joins or resumes takes, of ``free`` (ascending): the
        lowest (the life's scheduler decides)."""
        return free[0]

    def read_key(self, slot: int) -> tuple[int, int]:
        """The seed and position ``slot`` holds, as its buffers keep them."""
        return int(self.seeds[slot]), int(self.positions[slot])

    def write_key(self, slot: int, key: tuple[int, int], *, part: str) -> None:
        """Write ``part`` ("seed" or "position") of ``key`` (``read_key``'s) into
        ``slot``'s buffers."""
        index = key_part(part)
        (self.seeds, self.positions)[index][slot] = key[index]

    def admit(self, slot: int, request: Request) -> None:
        """A request takes ``slot``: its key and the token its next step starts from."""
        self.seeds[slot], self.positions[slot] = request.seed, request.position
        self.last_tokens[slot] = request.last_token
        self.drafted[slot] = False

    def release(self, slot: int) -> None:
        """A request left ``slot``: nothing is cleared (the next request overwrites)."""
        self.drafted[slot] = False

    def prefill_chunk(self, slots: torch.Tensor) -> None:
        """``slots`` ``[n]`` compute a chunk of their prompt this step, sampling nothing;
        a server whose batch holds them (vLLM's) schedules them with the next ``verify``."""
        del slots  # this server's verifier never sees a chunk

    def store_drafts(self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]) -> None:
        """What the drafter wrote for ``slots`` ``[n]``: its tokens and their ``q``."""
        del requests  # the server writes every drafted slot alike
        self.draft_tokens[slots] = block.tokens.cpu()
        self.draft_probs[slots] = draft_distribution(
            block.step_logits, temperatures=block.temperatures, greedy_mask=block.greedy_mask
        ).cpu()
        self.drafted[slots] = True

    def verify(
        self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
    ) -> VerifyResult:
        """Verify the rows of ``slots`` ``[n]``: a drafted row against its stored drafts,
        any other with none (one token from the target); draws keyed per request."""
        with_drafts = self.drafted[slots]
        committed = torch.full((len(slots), self.gamma + 1), -1, dtype=torch.int64)
        counts = torch.zeros(len(slots), dtype=torch.int64)
        for mask, gamma in ((with_drafts, self.gamma), (~with_drafts, 0)):
            rows = slots[mask]
            if not len(rows):
                continue
            verdict = self.verify_rows(rows, gamma=gamma, target=target, requests=requests)
            committed[mask, : gamma + 1] = verdict.committed
            counts[mask] = verdict.num_committed
        return VerifyResult(committed=committed, num_committed=counts)

    def verify_rows(
        self,
        rows: torch.Tensor,
        *,
        gamma: int,
        target: MarkovTargetModel,
        requests: list[Request],
    ) -> VerifyResult:
        """Chain verification of ``rows`` ``[n]`` against their first ``gamma`` stored
        drafts, at their temperatures, from the keys in their slots."""
        by_slot = {r.slot: r for r in requests}
        temperatures = torch.tensor(
            [by_slot[int(s)].temperature for s in rows], dtype=torch.float64
        )
        greedy = temperatures == GREEDY
        drafts = self.draft_tokens[rows, :gamma]
        target_probs = target.block_probs(
            anchor_tokens=self.last_tokens[rows],
            draft_tokens=drafts,
            temperatures=temperatures,
            greedy_mask=greedy,
        )  # [n, gamma+1, V]
        seeds, positions = self.seeds[rows], self.positions[rows]
        self.keys_read += [
            (by_slot[slot].id, seed, position, by_slot[slot].seed, by_slot[slot].position)
            for slot, seed, position in zip(
                rows.tolist(), seeds.tolist(), positions.tolist(), strict=True
            )
        ]
        uniforms = keyed_uniforms(seeds, positions, gamma + 1)  # [n, gamma+1]
        return chain_verify_at(
            target_probs=target_probs,
            draft_probs=self.draft_probs[rows, :gamma],
            draft_tokens=drafts,
            accept_uniforms=uniforms[:, :gamma],
            residual_uniforms=uniforms[:, gamma],
        )

    def write_outputs(self, slots: torch.Tensor, verdict: VerifyResult) -> None:
        """The verified rows' output rows, next anchors and positions."""
        self.outputs[slots] = verdict.committed
        last = verdict.committed.gather(1, (verdict.num_committed - 1).unsqueeze(1)).squeeze(1)
        self.last_tokens[slots] = last
        self.positions[slots] += verdict.num_committed
        self.drafted[slots] = False


# The drafter of a life: given the slots of one call, their anchors (read from the
# server's buffer), their requests as staged and the call's index, stages them, drafts
# in one call and returns the block the verifier reads (``reference.decode.draft_batch``).
Drafter = Callable[[torch.Tensor, torch.Tensor, SamplingInfo, int], DraftBlock]


@dataclass(frozen=True)
class JunctionPlan:
    """The life: ``rows`` requests a wave (about ``rows`` judged segments per state),
    ``m`` judged tokens a segment, the temperature groups (``GREEDY``: greedy), the seed
    of the requests' anchors, seeds and parameters."""

    rows: int
    m: int
    gamma: int
    groups: tuple[float, ...]
    seed: int

    @property
    def slots(self) -> int:
        """Steady rows, one wave of joining rows and half a wave of room."""
        return 2 * self.rows + self.rows // 2

    @property
    def steady_budget(self) -> int:
        """Long enough to be alive, its segment judged, when it is preempted."""
        return (PREEMPT_STEP + 1) * (self.gamma + 1) + self.m + 1


@dataclass
class JunctionLife:
    """What a life committed: every request, the steps it ran, and the drafter's calls."""

    requests: list[Request]
    steps: int
    calls: int
    batch_sizes: list[int]


def _wave_temperatures(plan: JunctionPlan, wave: int, count: int) -> list[float]:
    """The greedy/sampled mix of a wave: all groups, all sampled, half greedy, all greedy."""
    sampled = [g for g in plan.groups if g != GREEDY] or [1.0]
    if wave == 0:
        return [plan.groups[i % len(plan.groups)] for i in range(count)]
    if wave == 1:
        return [sampled[i % len(sampled)] for i in range(count)]
    if wave == 2:
        return [GREEDY if i % 2 else sampled[i % len(sampled)] for i in range(count)]
    return [GREEDY] * count


def plan_requests(plan: JunctionPlan, *, target: MarkovTargetModel) -> dict[int, list[Request]]:
    """The requests arriving at each step (``-1``: in the batch before the first step)."""
    generator = torch.Generator().manual_seed(plan.seed)
    waves = {-1: plan.rows, **{step: plan.rows for step in ARRIVAL_STEPS[:2]}}
    waves[ARRIVAL_STEPS[2]] = plan.rows // 2
    arrivals: dict[int, list[Request]] = {}
    next_id = 0
    for wave, (step, count) in enumerate(waves.items()):
        anchors = target.sample_anchors(count, generator=generator).tolist()
        seeds = torch.randint(0, 2**62, (count,), generator=generator).tolist()
        temperatures = _wave_temperatures(plan, wave, count)
        arrivals[step] = [
            Request(
                id=next_id + i,
                seed=seeds[i],
                temperature=temperatures[i],
                anchor=anchors[i],
                budget=plan.steady_budget if step < 0 else plan.m,
                prompt_left=0 if step < 0 else 1 + i % 2,  # the last token, or a chunk first
            )
            for i in range(count)
        ]
        next_id += count
    return arrivals


def _sampling_info(requests: list[Request]) -> SamplingInfo:
    return SamplingInfo.from_lists(
        temperatures=[1.0 if r.temperature == GREEDY else r.temperature for r in requests],
        top_ks=[1 if r.temperature == GREEDY else TOP_K_ALL for r in requests],
    )


def live_junction(
    plan: JunctionPlan,
    *,
    server: JunctionServer,
    drafter: Drafter,
    target: MarkovTargetModel,
    repoison: Poison | None = None,
) -> JunctionLife:
    """Run the life: each step admits the waiting requests into free slots (the lowest
    first), verifies every row that computes a sampling position, commits, lets the
    finished requests leave (and, after ``PREEMPT_STEP``, preempts the steady ones),
    then drafts for every row that decodes next; until every request is done and at
    least ``MIN_STEPS`` steps ran. ``repoison``: a freed slot's buffers are poisoned
    with it as it is freed (the twin life), else left as the request left them."""
    arrivals = plan_requests(plan, target=target)
    requests = [r for wave in arrivals.values() for r in wave]
    free = list(range(plan.slots))
    used: set[int] = set()
    waiting: list[tuple[int, Request]] = []  # (step it may enter, request)
    live: list[Request] = []
    life = JunctionLife(requests=requests, steps=0, calls=0, batch_sizes=[])

    def admit(request: Request, state: RequestState) -> None:
        slot = server.take_slot(free)
        free.remove(slot)
        if state is not RequestState.RESUMED:
            state = RequestState.REUSED if slot in used else state
        request.segments.append(Segment(state, len(request.committed), request.last_token))
        request.slot = slot
        used.add(slot)
        server.admit(slot, request)
        live.append(request)

    def leave(request: Request) -> None:
        slot = request.slot
        assert slot is not None
        server.release(slot)
        if repoison is not None:
            server.poison_slots(torch.tensor([slot]), repoison)
        request.slot = None
        live.remove(request)
        free.append(slot)
        free.sort()

    def draft() -> None:
        decoding = sorted((r for r in live if r.prompt_left == 0), key=lambda r: r.slot or 0)
        if not decoding:
            return
        slots = torch.tensor([r.slot for r in decoding])
        block = drafter(slots, server.last_tokens[slots], _sampling_info(decoding), life.calls)
        server.store_drafts(slots, block, decoding)
        life.calls += 1
        life.batch_sizes.append(len(decoding))

    for request in arrivals[-1]:
        admit(request, RequestState.STEADY)
    draft()
    step = 0
    while step < MIN_STEPS or waiting or live or any(step <= s for s in arrivals):
        waiting += [(step, r) for r in arrivals.get(step, [])]
        while waiting and waiting[0][0] <= step and free:
            _, request = waiting.pop(0)
            admit(request, RequestState.RESUMED if request.committed else RequestState.JOINING)
        chunk = [r for r in live if r.prompt_left > 1]  # a prefill chunk: nothing sampled
        for request in chunk:
            request.prompt_left -= 1
        if chunk:
            server.prefill_chunk(torch.tensor(sorted(r.slot or 0 for r in chunk)))
        sampling = sorted((r for r in live if r not in chunk), key=lambda r: r.slot or 0)
        if sampling or chunk:  # a server that batches chunks runs them with its verify
            slots = torch.tensor([r.slot for r in sampling], dtype=torch.int64)
            verdict = server.verify(slots, target=target, requests=sampling)
            server.write_outputs(slots, verdict)
            for request, row, count in zip(
                sampling, verdict.committed.tolist(), verdict.num_committed.tolist(), strict=True
            ):
                request.committed += row[:count]
                request.prompt_left = 0
        for request in [r for r in live if len(r.committed) >= r.budget]:
            leave(request)
        if step == PREEMPT_STEP:
            for request in [r for r in live if r.segments[-1].state is RequestState.STEADY]:
                leave(request)
                request.prompt_left, request.budget = 1, len(request.committed) + plan.m
                waiting.append((step + RESUME_AFTER, request))
        draft()
        step += 1
    life.steps = step
    return life
