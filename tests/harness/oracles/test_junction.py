"""A life across the junction of the drafter and the verifier (docs/design.md, "A life
across the junction"): the life itself, each planted server defect killed by the check
that should kill it, and servers that differ from ours without losing anything."""

from __future__ import annotations

import pytest
import torch

from fixed import DsparkDraftSampler as Fixed
from harness.oracles.junction import (
    MIN_STEPS,
    PREEMPT_STEP,
    PRIMARY_POISON,
    JunctionPlan,
    JunctionServer,
    Request,
    RequestState,
    keyed_uniforms,
    plan_requests,
)
from harness.oracles.junction_judge import JUNCTION_ROWS, judge_junction
from legacy import DsparkDraftSampler as Legacy
from reference.target_model import MarkovTargetModel
from reference.verifier import DraftBlock, VerifyResult, categorical_at
from tests.plugins.junction_servers import inherited, lazy_clearing, leaked_output

SMALL = 300  # rows a state for the exact checks, which need no statistics


class StaleDraftProbs(JunctionServer):
    """A slot taken over keeps the previous request's q for the new request's first
    drafts: the verifier scores them with another request's law."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.taken_over: set[int] = set()
        self.ever_used: set[int] = set()

    def admit(self, slot: int, request: Request) -> None:
        super().admit(slot, request)
        if slot in self.ever_used:
            self.taken_over.add(slot)
        self.ever_used.add(slot)

    def store_drafts(self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]) -> None:
        kept = [s for s in slots.tolist() if s in self.taken_over]
        old = self.draft_probs[kept].clone()
        super().store_drafts(slots, block, requests)
        self.draft_probs[kept] = old
        self.taken_over -= set(kept)


class PlaceholdersVerified(JunctionServer):
    """Rows without drafts are verified against whatever their draft rows hold."""

    def verify(
        self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
    ) -> VerifyResult:
        return self.verify_rows(slots, gamma=self.gamma, target=target, requests=requests)


# A request taking a slot keeps the slot's previous seed (or position), or starts from
# its output row (tests/plugins/junction_servers.py, on our server's buffers).
InheritedKey = inherited(JunctionServer, "seed")
InheritedPosition = inherited(JunctionServer, "position")
LeakedOutput = leaked_output(JunctionServer)

# Clears freed slots one step late, never reading them (tests/plugins/junction_servers.py).
LazyClearing = lazy_clearing(JunctionServer)


class ResampledPlaceholders(JunctionServer):
    """Fills a row without drafts with drafts sampled from the target law (its own
    keyed stream), with ``q = p``, and verifies every row as drafted."""

    def verify(
        self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
    ) -> VerifyResult:
        by_slot = {r.slot: r for r in requests}
        empty = slots[~self.drafted[slots]]
        if len(empty):
            temperatures = torch.tensor(
                [by_slot[int(s)].temperature for s in empty], dtype=torch.float64
            )
            uniforms = keyed_uniforms(self.seeds[empty] ^ 0x7A11, self.positions[empty], self.gamma)
            previous = self.last_tokens[empty]
            for step in range(self.gamma):
                p = target.next_token_probs(
                    previous, temperatures=temperatures, greedy_mask=temperatures == 0
                )  # [n, V]
                token = categorical_at(p, uniforms=uniforms[:, step])
                self.draft_tokens[empty, step], self.draft_probs[empty, step] = token, p
                previous = token
        return self.verify_rows(slots, gamma=self.gamma, target=target, requests=requests)


def test_the_life_has_every_state_of_a_server() -> None:
    plan = JunctionPlan(rows=12, m=2, gamma=4, groups=(0.0, 0.7, 1.3), seed=3)
    target = MarkovTargetModel(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))
    arrivals = plan_requests(plan, target=target)
    joining = [r for step, wave in arrivals.items() if step >= 0 for r in wave]
    assert {r.prompt_left for r in joining} == {1, 2}  # one token left, or a chunk first
    mixes = [{r.temperature == 0 for r in wave} for wave in arrivals.values()]
    assert mixes == [{True, False}, {False}, {True, False}, {True}]
    verdict = judge_junction(Fixed, rows=SMALL)
    assert verdict.steps >= MIN_STEPS and len(set(verdict.batch_sizes)) > 2
    assert {law.state for law in verdict.laws} == {s.value for s in RequestState}
    assert all(law.rows >= SMALL for law in verdict.laws)
    assert verdict.incomplete == 0 and verdict.held.calls == verdict.calls


def test_keyed_uniforms_are_a_function_of_the_key_alone() -> None:
    seeds, positions = torch.tensor([1, 1, 2]), torch.tensor([5, 6, 5])
    drawn = keyed_uniforms(seeds, positions, 4)
    assert torch.equal(drawn[0], keyed_uniforms(seeds[:1], positions[:1], 4)[0])
    assert len({tuple(row) for row in drawn.tolist()}) == 3
    assert bool(((drawn >= 0) & (drawn < 1)).all())


def test_our_server_and_sampler_pass_the_life_at_full_rows() -> None:
    verdict = judge_junction(Fixed, rows=JUNCTION_ROWS)
    assert verdict.ok, "\n".join(verdict.lines())
    assert all(law.rows >= JUNCTION_ROWS and law.bound is not None for law in verdict.laws)


def test_legacy_shows_the_bug_in_the_life() -> None:
    verdict = judge_junction(Legacy, rows=SMALL)
    assert "teacher_forcing" in verdict.failed_checks()


@pytest.mark.parametrize(
    ("server", "check"),
    [
        (StaleDraftProbs, "junction_leftovers"),
        (PlaceholdersVerified, "junction_leftovers"),
        (InheritedKey, "junction_keys"),
        (InheritedPosition, "junction_keys"),
        (LeakedOutput, "junction_leftovers"),
    ],
)
def test_each_planted_server_defect_is_killed(server: type[JunctionServer], check: str) -> None:
    verdict = judge_junction(Fixed, rows=SMALL, server_class=server)
    assert check in verdict.failed_checks(), "\n".join(verdict.lines())


@pytest.mark.parametrize("server", [LazyClearing, ResampledPlaceholders])
def test_servers_that_differ_without_losing_anything_pass(server: type[JunctionServer]) -> None:
    verdict = judge_junction(Fixed, rows=JUNCTION_ROWS, server_class=server)
    assert verdict.ok, "\n".join(verdict.lines())


def test_the_poison_is_a_valid_value_that_changes_outcomes() -> None:
    server = JunctionServer(slots=2, gamma=3, vocab_size=8, poison=PRIMARY_POISON)
    assert int(server.draft_tokens.max()) < 8 and torch.allclose(
        server.draft_probs.sum(-1), torch.ones(2, 3, dtype=torch.float64)
    )


@pytest.mark.parametrize(("rows", "m"), [(1, 2), (SMALL, 0), (SMALL, PREEMPT_STEP + 2)])
def test_a_life_too_small_to_plan_is_refused_naming_the_argument(rows: int, m: int) -> None:
    with pytest.raises(ValueError, match="^rows must be 2 or more" if rows < 2 else "^m must be"):
        judge_junction(Fixed, rows=rows, m=m)


def test_a_slot_key_is_written_by_part_and_another_part_is_refused() -> None:
    server = JunctionServer(slots=2, gamma=3, vocab_size=8, poison=PRIMARY_POISON)
    server.write_key(1, (7, 9), part="position")
    assert server.read_key(1) == (PRIMARY_POISON.seed, 9)
    with pytest.raises(ValueError, match="part must be 'seed' or 'position', got 'slot'"):
        server.write_key(0, (1, 2), part="slot")


class RaisesAtItsThirdCall(Fixed):
    """The fixed sampler, until its third call raises."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls == 3:
            raise RuntimeError("third call")
        super().__call__(hidden_states, input_ids)


class RaisesWhenBuilt(Fixed):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise ValueError("no config")


@pytest.mark.parametrize(
    ("sampler", "said"),
    [
        (RaisesAtItsThirdCall, "the sampler raised at drafter call 2: RuntimeError: third call"),
        (RaisesWhenBuilt, "the sampler raised while it was built: ValueError: no config"),
    ],
)
def test_a_sampler_that_raises_fails_ran_and_its_life_ends(sampler: type, said: str) -> None:
    """As in the checks' matrix, a sampler that raises, built or called, fails ``ran``:
    its life ends there and nothing else is judged or claimed."""
    verdict = judge_junction(sampler, rows=SMALL)
    assert verdict.raised is not None and verdict.raised.startswith(said)
    assert verdict.failed_checks() == ["ran"] and not verdict.ok
    assert verdict.laws == () and verdict.lines()[-1] == "verdict: NOT lossless: ran"
