"""vLLM 0.33's drafter and verifier on its own randomness (docs/upstream.md, "The
server's own randomness").

One request's seed and positions key both the draft's Gumbel noise and the verifier's
draws; the package keeps the two Murmur3 streams apart with its drafting salt (and the
step mixed into the seed). ``noise_shared_with_verifier`` holds every call's observed
draft keys against the verifier's: the package passes, a drafter without the salt
(``DraftKeyedAsVerifier``) fails it and no other lossless check, a correct drafter of
another precision (``Float64Gumbel``) passes. In a decode on the server's plumbing the
drafter and ``vllm-rejection`` read the same seeds and positions, round after round.
Every shape is tiny: the kernels run under Triton's interpreter.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest
import torch

from harness.case import make_case
from harness.defaults import VerifierNoise
from harness.oracles.decode import decode_rows
from harness.oracles.problem import DEFAULT_CONFIG, build_problems
from harness.pipeline.checks import tier_of
from harness.pipeline.checks.plumbing import keyed_draws_apart
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.conventions import WORD, KeyedDraws
from harness.plugins.implementations import Implementation
from harness.upstream.loaders.vllm_loader import GUMBEL_MODULE, load_vllm
from harness.upstream.vllm_plumbing import keyed_draws
from harness.upstream.vllm_rejection import VLLM_REJECTION
from reference.decode import DraftCall
from reference.verifier import CHAIN_VERIFIER, Verifier

pytestmark = pytest.mark.vllm

# Row 1 is greedy: it draws no noise, and no key of its is judged.
CASE = make_case(
    bs=2,
    gamma=3,
    vocab_size=16,
    hidden_size=16,
    markov_rank=8,
    greedy_rows=(False, True),
    max_bs=3,
    seed=15,
)
# Two rows (T = 1 and greedy), two rounds, the far target, the vanilla head: 12 programs.
DECODE = replace(
    DEFAULT_CONFIG,
    rows=2,
    rounds=2,
    m=2,
    head_kinds=("vanilla",),
    temperatures=(1.0, 0.0),
    targets=DEFAULT_CONFIG.targets[:1],
    restage=False,
)


@pytest.fixture(scope="module")
def defects() -> ModuleType:
    from tests.plugins import vllm_defects  # imports the installed package

    return vllm_defects


def _lossless_failures(sampler_class: type) -> tuple[set[str], Any]:
    run = run_case(CASE, [Implementation("under-test", sampler_class, "test")])
    checks = evaluate_run(run, require_observable=False).checks["under-test"]
    by_name = {c.name: c for c in checks}
    failing = {c.name for c in checks if c.status == "fail" and tier_of(c.name) == "lossless"}
    return failing, by_name["noise_shared_with_verifier"]


def test_the_package_keeps_the_draft_keys_off_the_verifiers(defects: ModuleType) -> None:
    failing, check = _lossless_failures(defects.DSparkSpeculator)
    assert failing == set()
    assert check.status == "pass"
    assert "3 draft draws and the verifier's residual and bonus draws of 2 request(s)" in (
        check.detail
    )
    assert "Philox (tl.rand)" in check.detail  # the coins: another function


def test_a_drafter_without_the_salt_reads_the_verifiers_keys(defects: ModuleType) -> None:
    failing, check = _lossless_failures(defects.DraftKeyedAsVerifier)
    assert failing == {"noise_shared_with_verifier"}
    assert check.positions == ((0, 0),)  # step 0 of the sampled row: the seed is unmixed
    assert "the one the verifier reads for the residual or bonus draw of request 0" in (
        check.detail
    )


def test_a_float64_drafter_is_apart_and_lossless(defects: ModuleType) -> None:
    failing, check = _lossless_failures(defects.Float64Gumbel)
    assert failing == set() and check.status == "pass"


def test_equal_keys_are_the_same_noise_and_the_salt_makes_other_noise() -> None:
    """What the check calls a meeting is one noise vector: the package's draw of a
    draft's step 0 without the salt gives the token the verifier-side draw (no cache, no
    flag) gives on the same logits, at every seed and position; with the salt it does not."""
    gumbel_sample = load_vllm().gumbel_sample
    generator = torch.Generator().manual_seed(3)
    rows, vocab = 16, 16
    logits = torch.randn(rows, vocab, generator=generator)
    slots = torch.arange(rows)
    temperature = torch.ones(rows)
    seeds = torch.randint(0, 2**62, (rows,), generator=generator)
    positions = torch.randint(0, 2**20, (rows,), generator=generator)
    cache = torch.empty(rows, 1, vocab)
    column = torch.tensor(0, dtype=torch.int32)

    def draft(drafting: bool) -> torch.Tensor:
        return gumbel_sample(
            logits, slots, temperature, seeds, positions, apply_temperature=True,
            is_drafting=drafting, logits_cache=cache, logits_cache_col=column,
        )  # fmt: skip

    verifier_side = gumbel_sample(
        logits, slots, temperature, seeds, positions, apply_temperature=False,
        is_drafting=False,
    )  # fmt: skip
    assert torch.equal(draft(False), verifier_side)
    assert not torch.equal(draft(True), verifier_side)


def _decode(
    sampler_class: type, *, verifier: Verifier
) -> tuple[Any, list[tuple[DraftCall, KeyedDraws, torch.Tensor]]]:
    problem = build_problems(replace(DECODE, verifier_noise=VerifierNoise.SHARED))[0]
    calls: list[tuple[DraftCall, KeyedDraws, torch.Tensor]] = []

    def observer_of(built: Any) -> Any:
        def seen(call: DraftCall) -> None:
            assert built.plumbing is not None
            keyed = keyed_draws(built._reads, max_bs=built.max_bs, verifier=built._call_verifier)
            rows = call.rows
            requests = torch.stack([built.plumbing.seeds[rows], built.plumbing.positions[rows]])
            calls.append((call, keyed, requests.clone()))

        return seen

    result = decode_rows(
        sampler_class,
        problem=problem,
        head_kind="vanilla",
        seed=0,
        verifier=verifier,
        observer_of=observer_of,
    )
    return result, calls


@pytest.mark.parametrize("verifier", [VLLM_REJECTION, CHAIN_VERIFIER], ids=lambda v: v.name)
def test_the_drafter_reads_each_requests_seed_and_anchor_position(
    defects: ModuleType, verifier: Verifier
) -> None:
    """Each call draws step ``s`` of request ``r`` at (the request's seed with ``s`` mixed
    in, its anchor position plus ``s`` plus the salt), the anchor moving on by the tokens
    the verifier committed; the result says it ran on vLLM's own randomness."""
    gumbel = importlib.import_module(GUMBEL_MODULE)
    salt = int(gumbel._DRAFT_NOISE_SALT.value)
    result, calls = _decode(defects.DSparkSpeculator, verifier=verifier)
    assert result.shared_noise and result.server == f"vLLM {load_vllm().version}"
    assert [call.round for call, _, _ in calls] == [0, 1]
    anchors = [requests[1] for _, _, requests in calls]
    assert torch.equal(anchors[0], torch.zeros(2, dtype=torch.int64))
    committed = (result.round_blocks[0] >= 0).sum(dim=1)
    assert torch.equal(anchors[1], anchors[0] + committed)  # moved on by what was committed
    assert torch.equal(calls[0][2][0], calls[1][2][0])  # one seed per request, every round
    for _, keyed, (seeds, positions) in calls:
        assert [(k.row, k.step) for k in keyed.draft] == [(0, s) for s in range(DECODE.gamma)]
        for key in keyed.draft:
            assert key.seed == int(seeds[key.row]) ^ (key.step << 32)  # the step mixed in
            assert key.position == int(positions[key.row]) + key.step
            assert key.word == (key.position + salt) % WORD
        assert keyed_draws_apart(keyed, bs=2, gamma=DECODE.gamma).status == "pass"
        assert [(r.seed, r.first, r.last) for r in keyed.verifier] == [
            (int(seeds[row]), 0, int(positions[row]) + DECODE.gamma) for row in range(2)
        ]


def test_the_drafter_without_the_salt_meets_its_verifier_in_every_round(
    defects: ModuleType,
) -> None:
    _, calls = _decode(defects.DraftKeyedAsVerifier, verifier=VLLM_REJECTION)
    for _, keyed, _ in calls:
        check = keyed_draws_apart(keyed, bs=2, gamma=DECODE.gamma)
        assert check.status == "fail" and check.positions == ((0, 0),)
