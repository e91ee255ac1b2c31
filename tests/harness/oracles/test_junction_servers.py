"""The releases' lives across the junction (docs/design.md, "A life across the
junction"): the release's own sampler as the drafter and its server's own verifier
entered on the slot buffers its server keeps (``harness.oracles.junction_servers``).
The real releases pass; each planted server defect, on the release's buffers, is killed
by the check that should kill it; a server that clears slots lazily passes. The
``upstream`` tests need the released sglang, the ``vllm`` ones the released vLLM
(``tox run -e vllm``); both skip without them, with the loader's reason."""

from __future__ import annotations

import pytest
import torch

from harness.oracles.junction import JunctionServer, Poison, Request, RequestState
from harness.oracles.junction_judge import JUNCTION_ROWS, judge_junction
from harness.oracles.junction_servers import (
    BlockwiseServer,
    VllmRejectionServer,
    junction_server,
)
from harness.plugins.implementations import parse_impl_spec
from harness.upstream.loaders import sglang_loader, vllm_loader
from reference.target_model import MarkovTargetModel
from reference.verifier import DraftBlock, VerifyResult

SMALL = 300  # rows a state for the exact checks on sglang's life
VLLM_ROWS = 24  # rows a state under Triton's interpreter: the exact checks need no more

if vllm_loader.unavailable_reason() is None:
    vllm_loader.load_vllm()  # at collection: its import sets process-wide variables once


def _stale_logits(base: type[JunctionServer]) -> type[JunctionServer]:
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


def _placeholders_verified(base: type[JunctionServer]) -> type[JunctionServer]:
    """Every row is verified as drafted: a joining or resumed row's placeholder drafts
    (whatever its slot holds) as real tokens."""

    class PlaceholdersVerified(base):  # type: ignore[valid-type, misc]
        def verify(
            self, slots: torch.Tensor, *, target: MarkovTargetModel, requests: list[Request]
        ) -> VerifyResult:
            self.drafted[slots] = True
            return super().verify(slots, target=target, requests=requests)

    return PlaceholdersVerified


def _inherited(base: type[JunctionServer], buffer: str) -> type[JunctionServer]:
    """A request taking a slot keeps the slot's previous seed (or position)."""

    class InheritedKey(base):  # type: ignore[valid-type, misc]
        def admit(self, slot: int, request: Request) -> None:
            kept = getattr(self, buffer)[slot].clone()
            super().admit(slot, request)
            getattr(self, buffer)[slot] = kept

    return InheritedKey


def _leaked_output(base: type[JunctionServer]) -> type[JunctionServer]:
    """A request taking a slot starts from the slot's output row."""

    class LeakedOutput(base):  # type: ignore[valid-type, misc]
        def admit(self, slot: int, request: Request) -> None:
            super().admit(slot, request)
            self.last_tokens[slot] = self.outputs[slot, 0]

    return LeakedOutput


def _lazy_clearing(base: type[JunctionServer]) -> type[JunctionServer]:
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
    (_stale_logits, "junction_leftovers", {RequestState.REUSED.value, RequestState.RESUMED.value}),
    (_placeholders_verified, "junction_leftovers", EVERY_STATE - {RequestState.STEADY.value}),
    (lambda base: _inherited(base, "seeds"), "junction_keys", EVERY_STATE),
    (lambda base: _inherited(base, "positions"), "junction_keys", EVERY_STATE),
    (_leaked_output, "junction_leftovers", EVERY_STATE),
]
PLANTED_IDS = ["stale-logits", "placeholders", "seed", "position", "leaked-output"]


def test_each_verifier_has_its_server_and_ours_stands_in_for_the_rest() -> None:
    assert junction_server("vllm-rejection") is VllmRejectionServer
    assert junction_server("sglang-blockwise") is BlockwiseServer
    assert junction_server("chain") is JunctionServer
    assert junction_server("no such verifier") is JunctionServer
    for server in (VllmRejectionServer, BlockwiseServer):
        assert set(server.VERIFIER_READS) <= set(server.KEPT)
        assert "draft_logits" in server.VERIFIER_READS


def test_the_release_buffers_are_poisoned_with_each_poisons_own_values() -> None:
    """Before the first step every slot of a buffer the verifier reads holds the poison;
    the twin's poison differs in each, so a read of one changes what is committed."""
    one, other = Poison(3, "uniform", 1, 2), Poison(5, "one-hot", 7, 9)
    kw = {"slots": 2, "gamma": 2, "vocab_size": 8}
    a = VllmRejectionServer(**kw, poison=one)  # vLLM itself is loaded on the first verify
    b = VllmRejectionServer(**kw, poison=other)
    for name in VllmRejectionServer.VERIFIER_READS:
        assert not torch.equal(getattr(a, name), getattr(b, name)), name
    assert bool(torch.isfinite(a.draft_logits).all() and torch.isfinite(b.draft_logits).all())


# -- sglang: the installed release's sampler and BlockwiseRejection ------------------------
needs_sglang = pytest.mark.upstream


@pytest.fixture(scope="module")
def sglang_sampler() -> type:
    reason = sglang_loader.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return parse_impl_spec("s=sglang").sampler_class


@needs_sglang
def test_sglang_passes_its_life_at_full_depth(sglang_sampler: type) -> None:
    verdict = judge_junction(sglang_sampler, rows=JUNCTION_ROWS, server_class=BlockwiseServer)
    assert verdict.ok, "\n".join(verdict.lines())
    assert all(law.rows >= JUNCTION_ROWS and law.bound is not None for law in verdict.laws)


@needs_sglang
@pytest.mark.parametrize(("planted", "check", "exposed"), PLANTED, ids=PLANTED_IDS)
def test_each_planted_defect_on_sglangs_server_is_killed(
    sglang_sampler: type, planted: object, check: str, exposed: set[str]
) -> None:
    server = planted(BlockwiseServer)  # type: ignore[operator]
    verdict = judge_junction(sglang_sampler, rows=SMALL, server_class=server)
    assert check in verdict.failed_checks(), "\n".join(verdict.lines())
    assert dict(verdict.exposed_in)[check] in exposed


@needs_sglang
def test_sglangs_server_clearing_slots_lazily_passes(sglang_sampler: type) -> None:
    server = _lazy_clearing(BlockwiseServer)
    verdict = judge_junction(sglang_sampler, rows=JUNCTION_ROWS, server_class=server)
    assert verdict.ok, "\n".join(verdict.lines())


# -- vLLM: the installed release's speculator and its own rejection_sample -----------------
needs_vllm = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_sampler() -> type:
    reason = vllm_loader.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return parse_impl_spec("v=vllm:dense").sampler_class


@needs_vllm
def test_vllm_passes_its_life_on_its_own_verifier(vllm_sampler: type) -> None:
    verdict = judge_junction(vllm_sampler, rows=VLLM_ROWS, server_class=VllmRejectionServer)
    assert verdict.ok, "\n".join(verdict.lines())
    assert all(law.rows >= VLLM_ROWS for law in verdict.laws)


@needs_vllm
@pytest.mark.parametrize(("planted", "check", "exposed"), PLANTED, ids=PLANTED_IDS)
def test_each_planted_defect_on_vllms_server_is_killed(
    vllm_sampler: type, planted: object, check: str, exposed: set[str]
) -> None:
    server = planted(VllmRejectionServer)  # type: ignore[operator]
    verdict = judge_junction(vllm_sampler, rows=VLLM_ROWS, server_class=server)
    assert check in verdict.failed_checks(), "\n".join(verdict.lines())
    assert dict(verdict.exposed_in)[check] in exposed


@needs_vllm
def test_vllms_server_clearing_slots_lazily_passes(vllm_sampler: type) -> None:
    verdict = judge_junction(
        vllm_sampler, rows=VLLM_ROWS, server_class=_lazy_clearing(VllmRejectionServer)
    )
    assert verdict.ok, "\n".join(verdict.lines())
