"""Block sampler functions (functional plug-ins): one correct, one with a planted defect.

``race_block`` is the reference's single walk written as a function: fresh ``Exp(1)``
noise per step, the exponential race, and the walk's own corrected logits returned
(greedy, drawing nothing, in a greedy fold).
``multinomial_block`` is DeepSpec-style (softmax + multinomial): lossless, but it draws
different random numbers than the reference. ``two_walk_block`` returns the corrected
logits of one walk and the tokens of another: the double-walk bug as a function.
``wrong_shape_block`` returns tokens of the wrong shape.
"""

from __future__ import annotations

import torch

from reference import MarkovHead, exponential_race
from reference.step_samplers import StepSampler, greedy_step


def _race_sampler(
    *, temperatures: torch.Tensor, greedy_mask: torch.Tensor, folded_sampling: bool
) -> StepSampler:
    if not folded_sampling:  # a greedy fold draws no noise
        return greedy_step

    def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
        del step_idx  # fresh noise on every step
        noise = torch.empty(step_logits.shape, dtype=torch.float32, device=step_logits.device)
        return exponential_race(
            step_logits,
            temperatures=temperatures,
            greedy_mask=greedy_mask,
            noise=noise.exponential_(),
        )

    return sample_step


def race_block(
    *,
    base_logits: torch.Tensor,
    anchor_tokens: torch.Tensor,
    hidden_states: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    markov_head: MarkovHead,
    folded_sampling: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One walk with the exponential race: the reference, as a function."""
    return markov_head.sample_block(
        base_logits,
        first_prev_tokens=anchor_tokens,
        hidden_states=hidden_states,
        sampler=_race_sampler(
            temperatures=temperatures, greedy_mask=greedy_mask, folded_sampling=folded_sampling
        ),
    )


def multinomial_block(
    *,
    base_logits: torch.Tensor,
    anchor_tokens: torch.Tensor,
    hidden_states: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    markov_head: MarkovHead,
    folded_sampling: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """DeepSpec-style: ``multinomial(softmax(l / T))`` on sampled rows, argmax on greedy."""
    del folded_sampling  # greedy rows take the argmax either way

    def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
        del step_idx
        probs = torch.softmax(step_logits.float() / temperatures.unsqueeze(-1), dim=-1)
        drawn = torch.multinomial(probs, num_samples=1).squeeze(-1)
        return torch.where(greedy_mask, torch.argmax(step_logits, dim=-1), drawn)

    return markov_head.sample_block(
        base_logits,
        first_prev_tokens=anchor_tokens,
        hidden_states=hidden_states,
        sampler=sample_step,
    )


def two_walk_block(
    *,
    base_logits: torch.Tensor,
    anchor_tokens: torch.Tensor,
    hidden_states: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    markov_head: MarkovHead,
    folded_sampling: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Planted defect: corrected logits from walk 1, tokens from walk 2."""
    walk = {
        "first_prev_tokens": anchor_tokens,
        "hidden_states": hidden_states,
        "sampler": _race_sampler(
            temperatures=temperatures, greedy_mask=greedy_mask, folded_sampling=folded_sampling
        ),
    }
    _, corrected = markov_head.sample_block(base_logits, **walk)
    tokens, _ = markov_head.sample_block(base_logits, **walk)
    return tokens, corrected


def wrong_shape_block(
    *,
    base_logits: torch.Tensor,
    anchor_tokens: torch.Tensor,
    hidden_states: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
    markov_head: MarkovHead,
    folded_sampling: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Planted defect: tokens flattened to ``[bs*gamma]``."""
    tokens, corrected = race_block(
        base_logits=base_logits,
        anchor_tokens=anchor_tokens,
        hidden_states=hidden_states,
        temperatures=temperatures,
        greedy_mask=greedy_mask,
        markov_head=markov_head,
        folded_sampling=folded_sampling,
    )
    return tokens.reshape(-1), corrected


def positional_block(base_logits: torch.Tensor, anchor_tokens: torch.Tensor) -> None:
    """Not a block sampler function: positional, and missing four keywords."""
    del base_logits, anchor_tokens
