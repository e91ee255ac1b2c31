"""Planted junction servers over any server's buffers (``harness.oracles.junction``,
``harness.oracles.junction_servers``): each factory takes a server class and returns it
with one defect a real server could ship, or one difference that loses nothing
(docs/design.md, "A life across the junction")."""

from __future__ import annotations

import torch

from harness.oracles.junction import JunctionServer, Request, RequestState
from harness.oracles.junction_servers import VllmRejectionServer
from reference.target_model import MarkovTargetModel
from reference.verifier import DraftBlock, VerifyResult


def stale_logits(base: type[JunctionServer]) -> type[JunctionServer]:
    """A slot taken over keeps the previous request's draft logits for the new request's
    first drafts: the release's verifier scores them with another request's law."""

    class StaleDraftLogits(base):  # type: ignore[valid-type, misc]
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.taken_over: set[int] = set()
            self.ever_used: set[int] = set()

        def admit(self, slot: int, request: Request) -> None:
            super().admit(slot, request)
            self.taken_over |= {slot} & self.ever_used
            self.ever_used.add(slot)

        def store_drafts(
            self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]
        ) -> None:
            kept = [s for s in slots.tolist() if s in self.taken_over]
            old = self.draft_logits[kept].clone()
            super().store_drafts(slots, block, requests)
            self.draft_logits[kept] = old
            self.taken_over -= set(kept)

    return StaleDraftLogits


def placeholders_verified(base: type[JunctionServer]) -> type[JunctionServer]:
    """Every row is verified as drafted: a joining or resumed row's placeholder drafts
    (whatever its slot holds) as real tokens. On vLLM's server its verifier's guard goes
    too: from 0.32 its gather marks the draft rows of a request still in its prefill
    ``-1``, which its rejection rejects; the gather before it did not."""

    class PlaceholdersVerified(base):  # type: ignore[valid-type, misc]
        def verify(
            self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
        ) -> VerifyResult:
            self.drafted[slots] = True
            if isinstance(self, VllmRejectionServer):
                self.batch.gather_draft_sampled = None
            return super().verify(slots, target=target, requests=requests)

    return PlaceholdersVerified


def inherited(base: type[JunctionServer], part: str) -> type[JunctionServer]:
    """A request taking a slot keeps the slot's previous seed (or position), in the
    buffers its server keeps them in (``JunctionServer.read_key``)."""

    class InheritedKey(base):  # type: ignore[valid-type, misc]
        def admit(self, slot: int, request: Request) -> None:
            kept = self.read_key(slot)
            super().admit(slot, request)
            self.write_key(slot, kept, part=part)

    return InheritedKey


def leaked_output(base: type[JunctionServer]) -> type[JunctionServer]:
    """A request taking a slot starts from what the slot's output buffer holds: our
    server's output row; on vLLM's, the slot's tokens as the previous request left them,
    read as the new request's next input (its last sampled token and the prompt token
    its prefill computes next)."""

    class LeakedOutput(base):  # type: ignore[valid-type, misc]
        def admit(self, slot: int, request: Request) -> None:
            if not isinstance(self, VllmRejectionServer):
                super().admit(slot, request)
                self.last_tokens[slot] = self.outputs[slot, 0]
                return
            left = self.all_token_ids[slot].clone()
            super().admit(slot, request)
            nxt = int(self.num_computed_tokens[slot])
            self.all_token_ids[slot, nxt] = left[nxt]
            self.last_sampled_tokens[slot] = int(left[nxt])

    return LeakedOutput


def lazy_clearing(base: type[JunctionServer]) -> type[JunctionServer]:
    """Clears the buffers of the slots freed since its last drafts, if still free, one
    step late; it never reads them."""

    class LazyClearing(base):  # type: ignore[valid-type, misc]
        def __init__(self, **kwargs: object) -> None:
            super().__init__(**kwargs)
            self.freed: set[int] = set()

        def release(self, slot: int) -> None:
            super().release(slot)
            self.freed.add(slot)

        def admit(self, slot: int, request: Request) -> None:
            self.freed.discard(slot)
            super().admit(slot, request)

        def store_drafts(
            self, slots: torch.Tensor, block: DraftBlock, requests: list[Request]
        ) -> None:
            super().store_drafts(slots, block, requests)
            cleared = torch.tensor(sorted(self.freed), dtype=torch.int64)
            for name in self.KEPT:
                getattr(self, name)[cleared] = 0
            self.freed.clear()

    return LazyClearing


EVERY_STATE = {state.value for state in RequestState}
# (the planted server, the check that kills it, the states that may expose it first: the
# steady requests take poisoned slots, so a slot's old key or output shows there too)
PLANTED = [
    (stale_logits, "junction_leftovers", {RequestState.REUSED.value, RequestState.RESUMED.value}),
    (placeholders_verified, "junction_leftovers", EVERY_STATE - {RequestState.STEADY.value}),
    (lambda base: inherited(base, "seed"), "junction_keys", EVERY_STATE),
    (lambda base: inherited(base, "position"), "junction_keys", EVERY_STATE),
    (leaked_output, "junction_leftovers", EVERY_STATE),
]
PLANTED_IDS = ["stale-logits", "placeholders", "seed", "position", "leaked-output"]
