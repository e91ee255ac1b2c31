"""The torch exponential race (reference.exponential_race_torch) and the step samplers around it.

The race must draw from ``softmax(logits / T)`` (checked with a fixed-seed chi-square test),
put greedy rows on the argmax whatever the noise, break exact ties toward the lowest index,
and, as the folded sampler, refill its noise buffer on every step call.
"""

from __future__ import annotations

import pytest
import torch

from harness.oracles.gof import pearson_fit
from reference import exponential_race_torch, folded_race_sampler, greedy_step

ALPHA = 1e-6  # chi-square significance level: a false alarm once in a million seeds
NUM_DRAWS = 100_000
RACE_LOGITS = torch.tensor([1.0, 0.5, 0.0, -0.5, -1.0, 0.2])  # [V=6], fixed on purpose


def _race_counts(*, logits: torch.Tensor, temperature: float, seed: int) -> torch.Tensor:
    """Counts ``[V]`` of ``NUM_DRAWS`` races: one row per draw, same logits, independent noise."""
    generator = torch.Generator().manual_seed(seed)
    vocab = logits.shape[0]
    rows = logits.expand(NUM_DRAWS, vocab)  # [N, V]
    noise = torch.empty(NUM_DRAWS, vocab).exponential_(generator=generator)  # [N, V]
    tokens = exponential_race_torch(
        rows,
        temperatures=torch.full((NUM_DRAWS,), temperature),
        greedy_mask=torch.zeros(NUM_DRAWS, dtype=torch.bool),
        noise=noise,
    )
    return torch.bincount(tokens, minlength=vocab)


def _chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson goodness-of-fit p-value, ``dof = V - 1``, in float64."""
    counts, probs = counts.double(), probs.double()
    assert bool((counts.sum() * probs >= 5).all()), "chi-square needs >= 5 expected draws per cell"
    return pearson_fit(counts.unsqueeze(0), expected_probs=probs.unsqueeze(0)).p_value


@pytest.mark.parametrize(("temperature", "seed"), [(0.5, 11), (1.0, 12), (1.7, 13)])
def test_race_draws_follow_softmax_of_logits_over_temperature(
    temperature: float, seed: int
) -> None:
    counts = _race_counts(logits=RACE_LOGITS, temperature=temperature, seed=seed)
    probs = torch.softmax(RACE_LOGITS.double() / temperature, dim=-1)
    assert _chi_square_p_value(counts, probs) > ALPHA


def test_chi_square_rejects_draws_at_the_wrong_temperature() -> None:
    """The goodness-of-fit test has power: draws at T=1 do not pass for T=1.7."""
    counts = _race_counts(logits=RACE_LOGITS, temperature=1.0, seed=14)
    wrong_probs = torch.softmax(RACE_LOGITS.double() / 1.7, dim=-1)
    assert _chi_square_p_value(counts, wrong_probs) < ALPHA


@pytest.mark.parametrize("temperature", [1e-5, 0.3, 1.0, 4.0])
def test_greedy_rows_take_the_argmax_whatever_the_noise(temperature: float) -> None:
    generator = torch.Generator().manual_seed(3)
    bs, vocab = 16, 33
    logits = torch.randn(bs, vocab, generator=generator) * 3  # [bs, V]
    noise = torch.empty(bs, vocab).exponential_(generator=generator)  # [bs, V]
    tokens = exponential_race_torch(
        logits,
        temperatures=torch.full((bs,), temperature),
        greedy_mask=torch.ones(bs, dtype=torch.bool),
        noise=noise,
    )
    assert tokens.dtype == torch.int64
    assert torch.equal(tokens, torch.argmax(logits, dim=-1))


def test_noise_moves_sampled_rows_but_not_greedy_rows() -> None:
    generator = torch.Generator().manual_seed(4)
    bs, vocab = 64, 8
    logits = torch.randn(1, vocab, generator=generator).expand(bs, vocab)  # [bs, V]
    noise = torch.empty(bs, vocab).exponential_(generator=generator)
    greedy_mask = torch.arange(bs) % 2 == 0
    tokens = exponential_race_torch(
        logits, temperatures=torch.ones(bs), greedy_mask=greedy_mask, noise=noise
    )
    argmax = torch.argmax(logits, dim=-1)
    assert torch.equal(tokens[greedy_mask], argmax[greedy_mask])
    assert not torch.equal(tokens[~greedy_mask], argmax[~greedy_mask])


@pytest.mark.parametrize("greedy", [True, False])
def test_exact_ties_go_to_the_lowest_index(greedy: bool) -> None:
    logits = torch.tensor(
        [
            [0.0, 2.0, 1.0, 2.0, 2.0],
            [3.0, 1.0, 3.0, 0.0, 3.0],
            [-1.0, -1.0, -1.0, -1.0, -1.0],
        ]
    )  # [3, 5]
    noise = torch.full_like(logits, 0.75)  # equal noise keeps the tie exact on sampled rows
    tokens = exponential_race_torch(
        logits,
        temperatures=torch.tensor([1.0, 0.5, 2.0]),
        greedy_mask=torch.full((3,), greedy),
        noise=noise,
    )
    assert torch.equal(tokens, torch.tensor([1, 0, 0]))


def test_greedy_step_is_the_argmax_with_lowest_index_on_ties() -> None:
    logits = torch.tensor([[0.5, 2.0, 2.0], [1.0, -3.0, 0.0], [7.0, 7.0, 7.0]])
    for step_idx in (0, 5):
        tokens = greedy_step(logits, step_idx)
        assert tokens.dtype == torch.int64
        assert torch.equal(tokens, torch.tensor([1, 0, 0]))


def _folded_sampler_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    bs, vocab = 32, 16
    logits = torch.randn(bs, vocab, generator=generator)  # [bs, V]
    temperatures = torch.ones(bs)
    greedy_mask = torch.zeros(bs, dtype=torch.bool)
    return logits, temperatures, greedy_mask


def test_folded_race_sampler_refills_the_noise_buffer_on_every_call() -> None:
    logits, temperatures, greedy_mask = _folded_sampler_inputs()
    noise_buffer = torch.zeros_like(logits)  # [bs, V] float32
    sampler = folded_race_sampler(
        noise_buffer=noise_buffer,
        temperatures=temperatures,
        greedy_mask=greedy_mask,
        backend="torch",
    )
    with torch.random.fork_rng():
        torch.manual_seed(21)
        first_tokens = sampler(logits, 0)
        first_noise = noise_buffer.clone()
        second_tokens = sampler(logits, 0)  # same logits, same step index
        second_noise = noise_buffer.clone()
    with torch.random.fork_rng():
        torch.manual_seed(21)
        expected_first = torch.empty_like(logits).exponential_()
        expected_second = torch.empty_like(logits).exponential_()

    assert torch.equal(first_noise, expected_first)
    assert torch.equal(second_noise, expected_second)  # the buffer holds the last draw
    assert not torch.equal(first_noise, second_noise)
    assert not torch.equal(first_tokens, second_tokens)
    for tokens, noise in ((first_tokens, first_noise), (second_tokens, second_noise)):
        race = exponential_race_torch(
            logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=noise
        )
        assert torch.equal(tokens, race)


def test_folded_race_sampler_leaves_greedy_rows_on_the_argmax() -> None:
    logits, temperatures, _ = _folded_sampler_inputs()
    sampler = folded_race_sampler(
        noise_buffer=torch.empty_like(logits),
        temperatures=temperatures,
        greedy_mask=torch.ones(logits.shape[0], dtype=torch.bool),
        backend="torch",
    )
    with torch.random.fork_rng():
        torch.manual_seed(22)
        for step_idx in range(3):
            assert torch.equal(sampler(logits, step_idx), torch.argmax(logits, dim=-1))
