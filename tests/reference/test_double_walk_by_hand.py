"""The double walk, small enough to check by hand.

Every number is written out below, and the comments do the arithmetic:

- V = 4 tokens, gamma = 2 steps, bs = 2 requests: row 0 sampled at T = 1, row 1 greedy.
- The lm_head weight is the identity (H = V), so a query row's hidden state *is* its
  base logits, and the anchor layout is ``sample_from_anchor=True`` (gamma rows per
  request, the anchor's row first).
- The vanilla Markov head's ``W1`` is the identity (r = V), so the bias added after the
  previous token ``p`` is row ``p`` of ``BIAS`` (``W2.weight = BIAS.T``): after ``p``,
  token ``(p + 1) % 4`` gets +2.
- Every ``Exp(1)`` draw is a literal. A sampled row's token is ``argmax(exp(logit) / E)``
  (the softmax's normaliser is the same for the whole row); with ``E`` 1 at one token and
  100 at the others, that token wins whenever the logits differ by less than
  ``ln 100 = 4.6``, and here they differ by at most 2. So each noise row below names the
  token it picks. Greedy rows race with ``E = 1``: their noise is ignored.

Legacy walks twice and keeps ``corrected_out`` from walk 1 but ``out`` from walk 2; fixed
walks once. Both are the real samplers (``legacy``, ``fixed``) on a real reference head.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

import fixed
import legacy
from reference import LmHead, SamplingInfo, ToyDraftModel, make_markov_head

V, GAMMA, BS = 4, 2, 2
X = 100.0  # a noise entry that loses the race

BIAS = torch.tensor(  # [prev, V]: row p is the bias after token p
    [
        [0.0, 2.0, 0.0, 0.0],  # after 0: token 1 +2
        [0.0, 0.0, 2.0, 0.0],  # after 1: token 2 +2
        [0.0, 0.0, 0.0, 2.0],  # after 2: token 3 +2
        [2.0, 0.0, 0.0, 0.0],  # after 3: token 0 +2
    ]
)
BASE = torch.tensor(  # [bs, gamma, V]: the base logits, one row per request and step
    [
        [[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]],  # row 0 (sampled)
        [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]],  # row 1 (greedy)
    ]
)
ANCHORS = torch.tensor([0, 2])  # [bs]: the token before step 0

# The Exp(1) draws, in the order they are drawn: one [bs, V] tensor per step of a walk.
NOISE = [
    # walk 1, step 0: row 0 picks 2 (row 1 is greedy: raced, it would pick 0)
    torch.tensor([[X, X, 1.0, X], [1.0, X, X, X]]),
    # walk 1, step 1: row 0 picks 0
    torch.tensor([[1.0, X, X, X], [1.0, X, X, X]]),
    # walk 2, step 0: row 0 picks 3
    torch.tensor([[X, X, X, 1.0], [1.0, X, X, X]]),
    # walk 2, step 1: row 0 picks 1
    torch.tensor([[X, 1.0, X, X], [1.0, X, X, X]]),
]

# Walk 1's step logits: base + BIAS[previous token].
WALK_1_LOGITS = torch.tensor(
    [
        [
            [1.0, 2.0, 0.0, 0.0],  # step 0 after the anchor 0: [1,0,0,0] + [0,2,0,0]; picks 2
            [0.0, 1.0, 0.0, 2.0],  # step 1 after 2: [0,1,0,0] + [0,0,0,2]; picks 0
        ],
        [
            [0.0, 1.0, 0.0, 2.0],  # step 0 after the anchor 2: [0,1,0,0] + [0,0,0,2]; argmax 3
            [2.0, 0.0, 1.0, 0.0],  # step 1 after 3: [0,0,1,0] + [2,0,0,0]; argmax 0
        ],
    ]
)
WALK_1_TOKENS = torch.tensor([[2, 0], [3, 0]])
# Walk 2, row 0: step 0 has the same logits [1,2,0,0] and draws 3; step 1 is then
# [0,1,0,0] + BIAS[3] = [2,1,0,0] and draws 1. Row 1 is greedy: the same 3, 0 as walk 1.
WALK_2_TOKENS = torch.tensor([[3, 1], [3, 0]])


def _drafter() -> ToyDraftModel:
    head = make_markov_head("vanilla", vocab_size=V, rank=V, hidden_size=V, seed=0)
    with torch.no_grad():  # the seeded weights, overwritten with the literals above
        head.W1.weight.copy_(torch.eye(V))
        head.W2.weight.copy_(BIAS.T)  # W2(W1[p]) = BIAS.T @ e_p = BIAS[p]
    return ToyDraftModel(
        lm_head=LmHead(torch.eye(V), org_vocab_size=V),  # base logits = hidden states
        markov_head=head,
        sample_from_anchor=True,
    )


class Proposal:
    """One call of a sampler on the example: its buffers, each walk's tokens, the noise
    it drew, and the drafter it ran on."""

    def __init__(self, sampler_class: type, monkeypatch: pytest.MonkeyPatch) -> None:
        self.drafter = _drafter()
        self.walk_tokens: list[torch.Tensor] = []
        self.draws = 0
        noise: Iterator[torch.Tensor] = iter(NOISE)

        def literal_exponential_(
            tensor: torch.Tensor, *args: object, **kwargs: object
        ) -> torch.Tensor:
            self.draws += 1
            return tensor.copy_(next(noise))

        head = self.drafter.markov_head
        sample_block = head.sample_block

        def recorded_walk(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
            tokens, corrected = sample_block(*args, **kwargs)
            self.walk_tokens.append(tokens.clone())
            return tokens, corrected

        monkeypatch.setattr(torch.Tensor, "exponential_", literal_exponential_)
        monkeypatch.setattr(head, "sample_block", recorded_walk)
        sampler = sampler_class(model=self.drafter, gamma=GAMMA, max_bs=BS, device="cpu")
        # top_k 1 makes a row greedy: row 0 samples at T = 1, row 1 is greedy
        sampler.stage_sampling_params(
            bs=BS, sampling_info=SamplingInfo.from_lists(temperatures=[1.0, 1.0], top_ks=[4, 1])
        )
        hidden_states = BASE.reshape(BS * GAMMA, V)  # [bs*gamma, H]: the identity lm_head
        input_ids = torch.tensor([0, 0, 2, 0])  # [bs*gamma]: each request's anchor, then a mask
        with torch.inference_mode():
            sampler(hidden_states, input_ids)
        assert sampler.corrected_out is not None  # folded sampling keeps the step logits
        self.out = sampler.out.view(BS, GAMMA)
        self.corrected_out = sampler.corrected_out.view(BS, GAMMA, V)

    def teacher_forced(self) -> torch.Tensor:
        """The step logits rebuilt from ``out``: step 0 after the anchor, step 1 after
        ``out[:, 0]``."""
        previous = torch.stack([ANCHORS, self.out[:, 0]], dim=1)  # [bs, gamma]
        with torch.inference_mode():
            return self.drafter.markov_head.apply_block_logits(
                BASE, token_ids=previous, hidden_states=None
            )


def test_legacy_emits_walk_2s_tokens_beside_walk_1s_logits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposal = Proposal(legacy.DsparkDraftSampler, monkeypatch)
    assert proposal.draws == 4  # 2 walks x gamma = 2 steps
    assert torch.equal(proposal.walk_tokens[0], WALK_1_TOKENS)
    assert torch.equal(proposal.walk_tokens[1], WALK_2_TOKENS)
    assert torch.equal(proposal.out, torch.tensor([[3, 1], [3, 0]]))  # walk 2's
    assert torch.equal(proposal.corrected_out, WALK_1_LOGITS)  # walk 1's


def test_fixed_emits_the_tokens_of_its_one_walk_beside_that_walks_logits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposal = Proposal(fixed.DsparkDraftSampler, monkeypatch)
    assert proposal.draws == 2  # 1 walk x gamma = 2 steps: the first two noise tensors
    assert len(proposal.walk_tokens) == 1
    assert torch.equal(proposal.out, torch.tensor([[2, 0], [3, 0]]))  # walk 1's
    assert torch.equal(proposal.corrected_out, WALK_1_LOGITS)  # walk 1's


def test_legacys_out_rebuilds_another_step_1_row_than_its_corrected_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proposal = Proposal(legacy.DsparkDraftSampler, monkeypatch)
    rebuilt = proposal.teacher_forced()
    # Row 0, step 1 follows out[0, 0] = 3: [0,1,0,0] + BIAS[3] = [2,1,0,0]. The verifier
    # reads corrected_out[0, 1] = [0,1,0,2], the logits after walk 1's token 2: it scores
    # token 1 with a law it was not drawn from.
    assert torch.equal(rebuilt[0, 1], torch.tensor([2.0, 1.0, 0.0, 0.0]))
    assert torch.equal(proposal.corrected_out[0, 1], torch.tensor([0.0, 1.0, 0.0, 2.0]))
    # Step 0 follows the anchor in both walks, and the greedy row draws alike: they agree.
    assert torch.equal(rebuilt[:, 0], proposal.corrected_out[:, 0])
    assert torch.equal(rebuilt[1], proposal.corrected_out[1])


def test_fixeds_out_rebuilds_its_corrected_out_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    proposal = Proposal(fixed.DsparkDraftSampler, monkeypatch)
    # Row 0, step 1 follows out[0, 0] = 2: [0,1,0,0] + BIAS[2] = [0,1,0,2], as kept.
    assert torch.equal(proposal.teacher_forced(), proposal.corrected_out)
    assert torch.equal(proposal.teacher_forced(), WALK_1_LOGITS)
