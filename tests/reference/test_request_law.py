"""The law a request samples from without speculation (reference.request_law), by hand.

Order: temperature, then top-k, top-p and min-p each read from the tempered
probabilities before any truncation, then renormalisation; equal probabilities rank
by token id, lowest first.
"""

from __future__ import annotations

import pytest
import torch

from reference import Truncation, truncated_probs, truncation_mask

PROBS = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64)  # ranks: 1, 3, 2, 0


def _mask(probs: torch.Tensor, *, k: int = 0, p: float = 1.0, min_p: float = 0.0) -> list[bool]:
    return truncation_mask(
        probs,
        top_ks=torch.tensor(k),
        top_ps=torch.tensor(p, dtype=torch.float64),
        min_ps=torch.tensor(min_p, dtype=torch.float64),
    ).tolist()


@pytest.mark.parametrize(
    ("params", "kept"),
    [
        pytest.param({}, [True, True, True, True], id="none"),
        pytest.param({"k": 2}, [False, True, False, True], id="top-k 2"),
        pytest.param({"k": 1}, [False, True, False, False], id="top-k 1 is greedy"),
        pytest.param({"k": 9}, [True, True, True, True], id="top-k above V"),
        # mass above: 0.4 -> 0, 0.3 -> 0.4, 0.2 -> 0.7, 0.1 -> 0.9
        pytest.param({"p": 0.5}, [False, True, False, True], id="top-p keeps the crossing token"),
        pytest.param({"p": 0.3}, [False, True, False, False], id="top-p keeps the top rank"),
        pytest.param({"min_p": 0.5}, [False, True, True, True], id="min-p keeps the equal"),
        pytest.param({"min_p": 0.6}, [False, True, False, True], id="min-p"),
        # top-p reads the mass before top-k: 0.5 keeps ranks 0-1, top-k 3 keeps ranks 0-2
        pytest.param({"k": 3, "p": 0.5}, [False, True, False, True], id="top-k and top-p"),
        pytest.param({"k": 3, "min_p": 0.6}, [False, True, False, True], id="top-k and min-p"),
    ],
)
def test_each_truncation_keeps_the_tokens_written_out_by_hand(
    params: dict, kept: list[bool]
) -> None:
    assert _mask(PROBS, **params) == kept


def test_ties_at_a_boundary_keep_the_lowest_token_ids() -> None:
    tied = torch.tensor([0.2, 0.3, 0.3, 0.2], dtype=torch.float64)  # ranks: 2, 0, 1, 3
    assert _mask(tied, k=1) == [False, True, False, False]
    assert _mask(tied, k=3) == [True, True, True, False]
    # mass above: 0.3 -> 0, 0.3 -> 0.3, 0.2 (id 0) -> 0.6, 0.2 (id 3) -> 0.8
    assert _mask(tied, p=0.6) == [True, True, True, False]


def test_truncated_probs_renormalise_what_is_kept_per_row() -> None:
    probs = torch.stack([PROBS, PROBS.flip(0)])  # [2, V]
    law = Truncation(
        top_ks=torch.tensor([2, 0]),
        top_ps=torch.tensor([1.0, 1.0], dtype=torch.float64),
        min_ps=torch.tensor([0.0, 0.6], dtype=torch.float64),
    ).apply(probs)
    expected = torch.tensor([[0, 4 / 7, 0, 3 / 7], [3 / 7, 0, 4 / 7, 0]], dtype=torch.float64)
    torch.testing.assert_close(law, expected)  # 0.4 / (0.4 + 0.3): rounded, not exact
    assert torch.equal(
        truncated_probs(
            PROBS,
            top_ks=torch.tensor(0),
            top_ps=torch.tensor(1.0).double(),
            min_ps=torch.tensor(0.0).double(),
        ),
        PROBS,
    )


@pytest.mark.parametrize(
    ("top_k", "top_p", "min_p", "drops"),
    [
        (0, 1.0, 0.0, False),
        (1, 1.0, 0.0, False),  # greedy: the argmax either way
        (4, 1.0, 0.0, False),  # top-k V keeps every token
        (3, 1.0, 0.0, True),
        (0, 0.9, 0.0, True),
        (0, 1.0, 0.1, True),
    ],
)
def test_a_truncation_says_whether_it_drops_a_token(
    top_k: int, top_p: float, min_p: float, drops: bool
) -> None:
    truncation = Truncation(
        top_ks=torch.tensor([0, top_k]),
        top_ps=torch.tensor([1.0, top_p]),
        min_ps=torch.tensor([0.0, min_p]),
    )
    assert truncation.truncates(vocab_size=4) is drops
    if not drops and top_k != 1:  # then it is the identity on every row
        probs = torch.stack([PROBS, PROBS])
        assert torch.equal(truncation.apply(probs), probs)
