"""One torch generator, checked exactly: every draw is placed in its seed's stream by the
generator's state, and a call that reads the server's stream outside the stretch it
moved the generator over fails ``torch_stream_shared_with_verifier`` and nothing else
of the lossless tier; the correct designs that touch the generator pass every lossless
check."""

from __future__ import annotations

import pytest
import torch

from harness.case import make_case
from harness.pipeline.check_result import Tier
from harness.pipeline.checks import CHECK_TIERS
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.pipeline.torch_stream import WORDS_PER_BLOCK, StreamSpot, spot_of
from harness.plugins.implementations import Implementation
from tests.plugins.shared_stream_defects import (
    TORCH_GENERATOR_CORRECT,
    TORCH_GENERATOR_COUPLINGS,
    ReseededGeneratorSampler,
)

NAME = "torch_stream_shared_with_verifier"
SHAPE = {"bs": 4, "gamma": 4, "vocab_size": 64, "hidden_size": 16, "markov_rank": 8}
CASE = make_case(**SHAPE, greedy_rows=(False, True, False, False), seed=11, name="folded")
GREEDY = make_case(**SHAPE, greedy_rows=(True,) * 4, seed=12, name="greedy rows only")


# -- where a state stands ---------------------------------------------------------------------
def test_a_seeded_generator_stands_at_word_zero_of_its_seed() -> None:
    assert spot_of(torch.Generator().manual_seed(77).get_state()) == StreamSpot(77, 0)


@pytest.mark.parametrize(
    ("draws", "words"),
    [
        ([(5, torch.float32)], 5),  # one 32-bit word per float32
        ([(5, torch.float32), (3, torch.float64)], 11),  # two per float64
        ([(WORDS_PER_BLOCK, torch.float32)], WORDS_PER_BLOCK),  # the first block's last
        ([(WORDS_PER_BLOCK + 1, torch.float32)], WORDS_PER_BLOCK + 1),  # the next block's first
        ([(3000, torch.float64), (7, torch.float32)], 6007),
    ],
)
def test_a_state_is_placed_at_the_words_drawn_since_seeding(
    draws: list[tuple[int, torch.dtype]], words: int
) -> None:
    generator = torch.Generator().manual_seed(5)
    for count, dtype in draws:
        torch.rand(count, dtype=dtype, generator=generator)
    assert spot_of(generator.get_state()) == StreamSpot(5, words)


def test_a_clone_and_a_generator_seeded_alike_stand_in_the_same_stream() -> None:
    server = torch.Generator().manual_seed(9)
    torch.rand(40, generator=server)
    clone = torch.Generator()
    clone.set_state(server.get_state())
    rebuilt = torch.Generator().manual_seed(9)
    assert spot_of(clone.get_state()) == spot_of(server.get_state()) == StreamSpot(9, 40)
    assert spot_of(rebuilt.get_state()) == StreamSpot(9, 0)
    assert spot_of(torch.Generator().manual_seed(9 ^ 1).get_state()).seed != 9


def test_a_state_that_is_no_generators_is_refused() -> None:
    with pytest.raises(ValueError, match="not a CPU generator's state: 16 bytes"):
        spot_of(torch.zeros(16, dtype=torch.uint8))


# -- the check ---------------------------------------------------------------------------------
def lossless_failures(sampler: type, case: object = CASE) -> dict[str, str]:
    planted = Implementation("planted", sampler, f"tests.plugins:{sampler.__name__}")
    checks = evaluate_run(run_case(case, [planted]), require_observable=False).checks["planted"]
    return {c.name: c.detail for c in checks if c.failed and CHECK_TIERS[c.name] is Tier.LOSSLESS}


@pytest.mark.parametrize("name", list(TORCH_GENERATOR_COUPLINGS))
def test_a_coupling_through_the_generator_fails_the_exact_check_alone(name: str) -> None:
    failures = lossless_failures(TORCH_GENERATOR_COUPLINGS[name])
    assert set(failures) == {NAME}, failures
    said = failures[NAME]
    assert said.startswith("the call's draw ") and "of the server's stream (seed 11)" in said
    assert "the verifier draws words" in said  # what the verifier reads next, named


def test_the_evidence_names_the_draw_its_generator_and_the_words() -> None:
    clone = TORCH_GENERATOR_COUPLINGS["clones-the-generator"]
    rewind = TORCH_GENERATOR_COUPLINGS["rewinds-the-generator"]
    # 4 x 4 float64 uniforms are 32 words; the clone reads the next 32, the rewind leaves
    # the generator one float64 (2 words) past where its block began
    assert lossless_failures(clone)[NAME] == (
        "the call's draw 1 (rand [4, 4] (call), a generator of its own) read words 32..63 of "
        "the server's stream (seed 11): the call left the generator at word 32, so the "
        "verifier draws words 32..63 next"
    )
    assert lossless_failures(rewind)[NAME] == (
        "the call's draw 0 (rand [4, 4] (call), torch's generator) read words 0..31 of the "
        "server's stream (seed 11): the call left the generator at word 2, so the verifier "
        "draws words 2..31 next"
    )


@pytest.mark.parametrize("name", list(TORCH_GENERATOR_CORRECT))
def test_a_design_that_touches_the_generator_without_sharing_passes(name: str) -> None:
    assert lossless_failures(TORCH_GENERATOR_CORRECT[name]) == {}


def test_greedy_rows_only_give_the_check_nothing_to_judge() -> None:
    sampler = TORCH_GENERATOR_COUPLINGS["peeks-ahead"]
    planted = Implementation("planted", sampler, "tests.plugins:VerifierUniformsSampler")
    checks = evaluate_run(run_case(GREEDY, [planted]), require_observable=False).checks
    (check,) = [c for c in checks["planted"] if c.name == NAME]
    assert check.status == "skip" and check.detail == "no sampled rows"


class DrawsAtConstructionThenReseeds(ReseededGeneratorSampler):
    """Moves torch's generator on by 16 words at construction; its calls then read the
    stream from word 0 again."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        torch.rand(8, dtype=torch.float64)


def test_a_draw_of_words_drawn_before_the_call_is_named() -> None:
    said = lossless_failures(DrawsAtConstructionThenReseeds)[NAME]
    assert said.startswith(
        "the call's draw 0 (rand [4, 4] (call), a generator of its own) read words 0..31 of "
        "the server's stream (seed 11): the staging found the generator at word 16, so words "
        "0..15 were drawn before the call (by the verifier, in a decode)"
    )
