"""The releases' lives across the junction (docs/design.md, "A life across the
junction"): the release's own sampler as the drafter and its server's own verifier
entered on the slot buffers its server keeps (``harness.oracles.junction_servers``).
The real releases pass; each planted server defect (``tests/plugins/junction_servers.py``),
on the release's buffers, is killed by the check that should kill it; a server that
clears slots lazily passes. The ``upstream`` tests need the released sglang, the ``vllm``
ones the released vLLM (``tox run -e vllm``); both skip without them, with the loader's
reason."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

from harness.oracles.junction import HARNESS_BATCH_BUILDING, JunctionServer, Poison, Request
from harness.oracles.junction_judge import JUNCTION_ROWS, judge_junction
from harness.oracles.junction_servers import (
    BlockwiseServer,
    VllmRejectionServer,
    junction_server,
)
from harness.plugins.implementations import parse_impl_spec
from harness.upstream.loaders import sglang_loader, vllm_loader
from tests.plugins.junction_servers import PLANTED, PLANTED_IDS, lazy_clearing

if vllm_loader.unavailable_reason() is None:
    vllm_loader.load_vllm()  # at collection: its import sets process-wide variables once


@dataclass(frozen=True)
class Release:
    """A released server at the junction: its sampler's spec, its junction server, the
    loader that says whether it is here, and the rows a state its lives run (the full
    life, and the exact checks', which need no statistics)."""

    spec: str
    server: type[JunctionServer]
    loader: Any
    rows: int
    exact_rows: int


SGLANG = Release("s=sglang", BlockwiseServer, sglang_loader, JUNCTION_ROWS, 300)
# vLLM's drafter and verifier under Triton's interpreter: the exact checks' rows only
VLLM = Release("v=vllm:dense", VllmRejectionServer, vllm_loader, 24, 24)
RELEASES = [
    pytest.param(SGLANG, marks=pytest.mark.upstream, id="sglang"),
    pytest.param(VLLM, marks=pytest.mark.vllm, id="vllm"),
]


def _sampler(release: Release) -> type:
    reason = release.loader.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return parse_impl_spec(release.spec).sampler_class


def test_each_verifier_has_its_server_and_ours_stands_in_for_the_rest() -> None:
    assert junction_server("vllm-rejection") is VllmRejectionServer
    assert junction_server("sglang-blockwise") is BlockwiseServer
    assert junction_server("chain") is JunctionServer
    assert junction_server("no such verifier") is JunctionServer
    for server in (VllmRejectionServer, BlockwiseServer):
        assert set(server.VERIFIER_READS) <= set(server.KEPT)
        assert "draft_logits" in server.VERIFIER_READS
    # vLLM's batch building runs from its release; the harness's stands in elsewhere
    assert HARNESS_BATCH_BUILDING not in VllmRejectionServer.STANDS_IN
    assert HARNESS_BATCH_BUILDING in BlockwiseServer.STANDS_IN
    assert HARNESS_BATCH_BUILDING in JunctionServer.STANDS_IN


@pytest.mark.parametrize("release", RELEASES)
def test_the_release_buffers_are_poisoned_with_each_poisons_own_values(release: Release) -> None:
    """Before the first step every slot of a buffer the verifier reads holds the poison;
    the twin's poison differs in each, so a read of one changes what is committed."""
    _sampler(release)
    one, other = Poison(3, "uniform", 1, 2), Poison(5, "one-hot", 7, 9)
    kw = {"slots": 2, "gamma": 2, "vocab_size": 8}
    a, b = release.server(**kw, poison=one), release.server(**kw, poison=other)
    for name in release.server.VERIFIER_READS:
        assert not torch.equal(getattr(a, name), getattr(b, name)), name
    assert bool(torch.isfinite(a.draft_logits).all() and torch.isfinite(b.draft_logits).all())


@pytest.mark.vllm
def test_vllms_slots_and_what_a_joining_request_finds_are_its_request_states() -> None:
    """The slot a request takes is the one the release's ``RequestState`` pops from its
    free list (the last), and its ``add_request`` clears the slot's draft tokens and
    writes the prompt; what it leaves alone (the slot's last sampled token) stays."""
    _sampler(VLLM)
    server = VllmRejectionServer(slots=4, gamma=2, vocab_size=8, poison=Poison(3, "uniform", 1, 2))
    assert server.take_slot([0, 1, 2, 3]) == 3
    joining = Request(id=0, seed=11, temperature=0.7, anchor=5, budget=2, prompt_left=1)
    server.admit(3, joining)
    assert server.take_slot([0, 1, 2]) == 2
    assert server.draft_tokens[3].tolist() == [0, 0]  # poisoned with 3, cleared
    assert server.all_token_ids[3, :2].tolist() == [6, 5]  # the filler, then the anchor
    assert int(server.num_computed_tokens[3]) == 1  # one prompt token left
    assert int(server.last_sampled_tokens[3]) == 3  # not cleared: a prefill never reads it
    assert server.read_key(3)[0] == 11
    assert abs(float(server.temperatures[3]) - 0.7) < 1e-6


@pytest.mark.parametrize("release", RELEASES)
def test_the_release_passes_its_life_on_its_own_verifier(release: Release) -> None:
    verdict = judge_junction(_sampler(release), rows=release.rows, server_class=release.server)
    assert verdict.ok, "\n".join(verdict.lines())
    assert all(law.rows >= release.rows for law in verdict.laws)
    if release.rows >= JUNCTION_ROWS:
        assert all(law.bound is not None for law in verdict.laws)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("planted", "check", "exposed"), PLANTED, ids=PLANTED_IDS)
def test_each_planted_defect_on_the_releases_server_is_killed(
    release: Release, planted: Any, check: str, exposed: set[str]
) -> None:
    sampler = _sampler(release)
    verdict = judge_junction(sampler, rows=release.exact_rows, server_class=planted(release.server))
    assert check in verdict.failed_checks(), "\n".join(verdict.lines())
    assert dict(verdict.exposed_in)[check] in exposed


@pytest.mark.parametrize("release", RELEASES)
def test_the_releases_server_clearing_slots_lazily_passes(release: Release) -> None:
    server = lazy_clearing(release.server)
    verdict = judge_junction(_sampler(release), rows=release.rows, server_class=server)
    assert verdict.ok, "\n".join(verdict.lines())
