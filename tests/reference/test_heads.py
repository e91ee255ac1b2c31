"""Markov heads (reference.heads): the walk, its teacher-forced twin and the fused greedy path.

The gated and rnn steps are written out here from the heads' weights, so the walk is
checked against the per-kind formulas rather than against itself.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from reference import (
    HEAD_KINDS,
    MarkovHead,
    exponential_race_torch,
    greedy_step,
    make_markov_head,
)
from reference.step_samplers import StepSampler

VOCAB, RANK, HIDDEN = 11, 4, 6
BS, LENGTH = 3, 5
NEAR_TIE_GAP = 1e-3  # top-two gap below which fp32 accumulation order may flip an argmax


def _head(kind: str, *, seed: int = 0, dtype: torch.dtype = torch.float32) -> MarkovHead:
    return make_markov_head(
        kind, vocab_size=VOCAB, rank=RANK, hidden_size=HIDDEN, seed=seed, dtype=dtype
    )


def _block(
    *, bs: int = BS, length: int = LENGTH, seed: int = 0, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded (base_logits [bs, L, V], anchor [bs], hidden_states [bs, L, H])."""
    generator = torch.Generator().manual_seed(seed)
    base_logits = torch.randn(bs, length, VOCAB, generator=generator).to(dtype)
    anchor = torch.randint(VOCAB, (bs,), generator=generator)
    hidden_states = torch.randn(bs, length, HIDDEN, generator=generator).to(dtype)
    return base_logits, anchor, hidden_states


def _seeded_race(*, bs: int, length: int, seed: int) -> StepSampler:
    """A step sampler that races on pre-drawn noise, so every walk sees the same draws."""
    generator = torch.Generator().manual_seed(seed)
    noise = torch.empty(length, bs, VOCAB).exponential_(generator=generator)  # [L, bs, V]
    temperatures = torch.linspace(0.5, 1.5, bs)
    greedy_mask = torch.arange(bs) == 0  # row 0 greedy, the others sampled

    def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
        return exponential_race_torch(
            step_logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=noise[step_idx]
        )

    return sample_step


# -- shapes and arguments --------------------------------------------------------------------


@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("length", [0, 1, LENGTH])
def test_sample_block_returns_tokens_bs_by_l_and_corrected_bs_by_l_by_v(
    kind: str, length: int
) -> None:
    base_logits, anchor, hidden_states = _block(length=length)
    tokens, corrected = _head(kind).sample_block(
        base_logits, first_prev_tokens=anchor, hidden_states=hidden_states, sampler=greedy_step
    )
    assert tokens.dtype == torch.int64
    assert tokens.shape == (BS, length)
    assert corrected is not None
    assert corrected.dtype == base_logits.dtype
    assert corrected.shape == (BS, length, VOCAB)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_collect_corrected_false_returns_no_corrected_logits(kind: str) -> None:
    base_logits, anchor, hidden_states = _block()
    head = _head(kind)
    tokens, corrected = head.sample_block(
        base_logits,
        first_prev_tokens=anchor,
        hidden_states=hidden_states,
        sampler=greedy_step,
        collect_corrected=False,
    )
    assert corrected is None
    want, _ = head.sample_block(
        base_logits, first_prev_tokens=anchor, hidden_states=hidden_states, sampler=greedy_step
    )
    assert torch.equal(tokens, want)


def test_vanilla_head_ignores_hidden_states() -> None:
    base_logits, anchor, hidden_states = _block()
    head = _head("vanilla")
    without = head.sample_block(
        base_logits,
        first_prev_tokens=anchor,
        hidden_states=None,
        sampler=_seeded_race(bs=BS, length=LENGTH, seed=1),
    )
    with_random = head.sample_block(
        base_logits,
        first_prev_tokens=anchor,
        hidden_states=hidden_states * 100,
        sampler=_seeded_race(bs=BS, length=LENGTH, seed=1),
    )
    assert torch.equal(without[0], with_random[0])
    assert without[1] is not None and with_random[1] is not None
    assert torch.equal(without[1], with_random[1])


@pytest.mark.parametrize("kind", ["gated", "rnn"])
def test_hidden_state_heads_reject_missing_hidden_states(kind: str) -> None:
    base_logits, anchor, _ = _block()
    with pytest.raises(ValueError, match=f"{kind} Markov head requires hidden_states"):
        _head(kind).sample_block(
            base_logits, first_prev_tokens=anchor, hidden_states=None, sampler=greedy_step
        )


@pytest.mark.parametrize("kind", ["gated", "rnn"])
@pytest.mark.parametrize("bad_shape", [(BS, LENGTH, HIDDEN + 1), (BS, LENGTH + 1, HIDDEN)])
def test_hidden_state_heads_reject_a_hidden_width_or_length_mismatch(
    kind: str, bad_shape: tuple[int, int, int]
) -> None:
    base_logits, anchor, _ = _block()
    with pytest.raises(ValueError, match=r"needs hidden_states of shape \(3, 5, 6\)"):
        _head(kind).sample_block(
            base_logits,
            first_prev_tokens=anchor,
            hidden_states=torch.zeros(bad_shape),
            sampler=greedy_step,
        )
    with pytest.raises(ValueError, match="hidden_states"):
        _head(kind).apply_block_logits(
            base_logits,
            token_ids=torch.zeros(BS, LENGTH, dtype=torch.int64),
            hidden_states=torch.zeros(bad_shape),
        )


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_sample_block_rejects_base_logits_of_the_wrong_vocab_or_rank(kind: str) -> None:
    _, anchor, hidden_states = _block()
    for bad in (torch.zeros(BS, LENGTH, VOCAB + 1), torch.zeros(BS * LENGTH, VOCAB)):
        with pytest.raises(ValueError, match="base_logits must be"):
            _head(kind).sample_block(
                bad, first_prev_tokens=anchor, hidden_states=hidden_states, sampler=greedy_step
            )


# -- the step math, written out -----------------------------------------------------------


def _written_out_walk(
    head: MarkovHead,
    base_logits: torch.Tensor,
    *,
    anchor: torch.Tensor,
    hidden_states: torch.Tensor,
    sampler: StepSampler,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-kind step formulas as a plain loop over the head's weights."""
    w1, w2 = head.W1.weight, head.W2.weight  # [V, r], [V, r]
    bs, length, _ = base_logits.shape
    state = torch.zeros(bs, RANK)  # rnn only
    prev = anchor
    tokens, corrected = [], []
    for k in range(length):
        embedding = w1[prev]  # [bs, r]
        h_k = hidden_states[:, k]  # [bs, H]
        if head.kind == "vanilla":
            bias = embedding @ w2.t()
        elif head.kind == "gated":
            gate_in = torch.cat([h_k, embedding], dim=-1)  # [bs, H + r]
            gate = torch.sigmoid(torch.addmm(head.gate.bias, gate_in, head.gate.weight.t()))
            bias = (gate * embedding) @ w2.t()
        else:
            joint_in = torch.cat([state, embedding, h_k], dim=-1)  # [bs, 2r + H]
            joint = torch.addmm(head.joint.bias, joint_in, head.joint.weight.t())  # [bs, 3r]
            a, c, o = joint[:, :RANK], joint[:, RANK : 2 * RANK], joint[:, 2 * RANK :]
            g = torch.sigmoid(a)
            state = g * state + (1 - g) * torch.tanh(c)
            bias = torch.tanh(o) @ w2.t()
        step_logits = base_logits[:, k] + bias  # [bs, V]
        prev = sampler(step_logits, k)
        corrected.append(step_logits)
        tokens.append(prev)
    return torch.stack(tokens, dim=1), torch.stack(corrected, dim=1)


@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_walk_equals_the_step_formulas_written_out_in_float32(kind: str, seed: int) -> None:
    base_logits, anchor, hidden_states = _block(bs=6, seed=seed)
    head = _head(kind, seed=seed)
    tokens, corrected = head.sample_block(
        base_logits,
        first_prev_tokens=anchor,
        hidden_states=hidden_states,
        sampler=_seeded_race(bs=6, length=LENGTH, seed=seed),
    )
    want_tokens, want_corrected = _written_out_walk(
        head,
        base_logits,
        anchor=anchor,
        hidden_states=hidden_states,
        sampler=_seeded_race(bs=6, length=LENGTH, seed=seed),
    )
    assert torch.equal(tokens, want_tokens)
    assert torch.equal(corrected, want_corrected)


def test_rnn_state_carries_across_the_block() -> None:
    """The same (prev token, hidden state) at two steps gives two different biases."""
    head = _head("rnn")
    base_logits = torch.zeros(1, 3, VOCAB)
    hidden_states = torch.ones(1, 3, HIDDEN)
    corrected = head.apply_block_logits(
        base_logits, token_ids=torch.full((1, 3), 2), hidden_states=hidden_states
    )
    assert not torch.equal(corrected[:, 0], corrected[:, 1])
    assert not torch.equal(corrected[:, 1], corrected[:, 2])


# -- teacher forcing ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_teacher_forcing_with_the_walks_previous_tokens_reproduces_its_corrected_logits(
    kind: str, dtype: torch.dtype
) -> None:
    base_logits, anchor, hidden_states = _block(bs=6, dtype=dtype)
    head = _head(kind, dtype=dtype)
    tokens, corrected = head.sample_block(
        base_logits,
        first_prev_tokens=anchor,
        hidden_states=hidden_states,
        sampler=_seeded_race(bs=6, length=LENGTH, seed=2),
    )
    previous = torch.cat([anchor.unsqueeze(1), tokens[:, :-1]], dim=1)  # [bs, L]
    rebuilt = head.apply_block_logits(base_logits, token_ids=previous, hidden_states=hidden_states)
    assert corrected is not None
    assert torch.equal(rebuilt, corrected)


def test_apply_block_logits_rejects_token_ids_of_the_wrong_shape() -> None:
    base_logits, _, _ = _block()
    with pytest.raises(ValueError, match="token_ids must be"):
        _head("vanilla").apply_block_logits(
            base_logits,
            token_ids=torch.zeros(BS, LENGTH + 1, dtype=torch.int64),
            hidden_states=None,
        )


# -- the fused greedy path ------------------------------------------------------------------


def _top_two_gap(corrected: torch.Tensor) -> float:
    top2 = torch.topk(corrected.float(), 2, dim=-1).values  # [bs, L, 2]
    return float((top2[..., 0] - top2[..., 1]).min())


@given(
    seed=st.integers(0, 2**16),
    bs=st.integers(1, 5),
    length=st.integers(0, 6),
    logit_scale=st.sampled_from([0.5, 2.0, 8.0]),
)
def test_fused_greedy_equals_the_greedy_walk_in_float32_without_near_ties(
    seed: int, bs: int, length: int, logit_scale: float
) -> None:
    base_logits, anchor, _ = _block(bs=bs, length=length, seed=seed)
    base_logits = base_logits * logit_scale
    head = _head("vanilla", seed=seed)
    walk_tokens, corrected = head.sample_block(
        base_logits, first_prev_tokens=anchor, hidden_states=None, sampler=greedy_step
    )
    assert corrected is not None
    assume(length == 0 or _top_two_gap(corrected) > NEAR_TIE_GAP)
    fused_tokens = head.sample_block_greedy_fused(base_logits, first_prev_tokens=anchor)
    assert fused_tokens is not None
    assert fused_tokens.dtype == torch.int64
    assert torch.equal(fused_tokens, walk_tokens)


@pytest.mark.parametrize("kind", ["gated", "rnn"])
def test_hidden_state_heads_have_no_fused_greedy_path(kind: str) -> None:
    base_logits, anchor, _ = _block()
    assert _head(kind).sample_block_greedy_fused(base_logits, first_prev_tokens=anchor) is None


def test_fused_greedy_may_legitimately_differ_from_the_loop_on_a_bf16_near_tie() -> None:
    """Base 256.0 for both tokens, step biases 0.5 vs 0.6: in fp32 token 1 wins, but bf16
    (spacing 2 at 256) rounds both step logits to 256.0 and the loop's tie goes to token 0."""
    head = make_markov_head(
        "vanilla", vocab_size=2, rank=1, hidden_size=1, seed=0, dtype=torch.bfloat16
    )
    with torch.no_grad():
        head.W1.weight.copy_(torch.ones(2, 1))
        head.W2.weight.copy_(torch.tensor([[0.5], [0.6]]))
    base_logits = torch.full((1, 3, 2), 256.0, dtype=torch.bfloat16)  # [bs, L, V]
    anchor = torch.tensor([0])

    loop_tokens, corrected = head.sample_block(
        base_logits, first_prev_tokens=anchor, hidden_states=None, sampler=greedy_step
    )
    fused_tokens = head.sample_block_greedy_fused(base_logits, first_prev_tokens=anchor)
    fp32_step = base_logits.float() + head.W1.weight.float()[anchor] @ head.W2.weight.float().t()

    assert corrected is not None
    assert bool((corrected == 256.0).all())  # the bf16 step logits tie exactly
    assert torch.equal(loop_tokens, torch.zeros(1, 3, dtype=torch.int64))
    assert torch.equal(fp32_step.argmax(dim=-1), torch.ones(1, 3, dtype=torch.int64))
    assert fused_tokens is not None
    assert torch.equal(fused_tokens, fp32_step.argmax(dim=-1))
    assert not torch.equal(fused_tokens, loop_tokens)


# -- construction ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_seeded_head_construction_is_deterministic(kind: str) -> None:
    same_a, same_b = _head(kind, seed=7).state_dict(), _head(kind, seed=7).state_dict()
    other = _head(kind, seed=8).state_dict()
    assert same_a.keys() == same_b.keys() == other.keys()
    for name in same_a:
        assert torch.equal(same_a[name], same_b[name]), name
        assert not torch.equal(same_a[name], other[name]), name


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_head_construction_does_not_touch_the_global_rng(kind: str) -> None:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        before = torch.random.get_rng_state()
        _head(kind)
        assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_head_weights_have_the_requested_dtype_and_no_grad(kind: str) -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for param in _head(kind, dtype=dtype).parameters():
            assert param.dtype == dtype
            assert not param.requires_grad


def test_unknown_head_kind_raises() -> None:
    with pytest.raises(ValueError, match="unknown Markov head kind 'lstm'"):
        make_markov_head("lstm", vocab_size=VOCAB, rank=RANK, hidden_size=HIDDEN, seed=0)


@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("rank", [0, -1])
def test_non_positive_rank_raises(kind: str, rank: int) -> None:
    with pytest.raises(ValueError, match="markov rank must be positive"):
        make_markov_head(kind, vocab_size=VOCAB, rank=rank, hidden_size=HIDDEN, seed=0)
