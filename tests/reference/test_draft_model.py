"""The toy draft model and the anchor layouts (reference.draft_model, reference.block)."""

from __future__ import annotations

import pytest
import torch

from reference import (
    LmHead,
    ToyDraftModel,
    drop_anchor_row,
    greedy_step,
    make_markov_head,
    make_toy_draft_model,
    prepare_block,
    query_rows_per_request,
)

VOCAB, HIDDEN, RANK = 13, 8, 4
GAMMA, MAX_BS = 3, 4
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _model(
    *,
    sample_from_anchor: bool = True,
    head_kind: str = "vanilla",
    dtype: torch.dtype = torch.float32,
    vocab_padding: int = 0,
) -> ToyDraftModel:
    return make_toy_draft_model(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        markov_rank=RANK,
        head_kind=head_kind,
        sample_from_anchor=sample_from_anchor,
        seed=0,
        dtype=dtype,
        vocab_padding=vocab_padding,
    )


def _call_inputs(
    *, bs: int, q: int, dtype: torch.dtype = torch.float32, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded hidden_states ``[bs*q, H]`` and input_ids ``[bs*q]`` int64."""
    generator = torch.Generator().manual_seed(seed)
    hidden_states = torch.randn(bs * q, HIDDEN, generator=generator).to(dtype)
    input_ids = torch.randint(VOCAB, (bs * q,), generator=generator)
    return hidden_states, input_ids


# -- lm_head and base logits ----------------------------------------------------------------


def test_org_vocab_size_crops_a_padded_lm_head() -> None:
    model = _model(vocab_padding=5)
    assert model.lm_head.weight.shape == (VOCAB + 5, HIDDEN)
    assert model.vocab_size == VOCAB
    hidden, _ = _call_inputs(bs=2, q=GAMMA)
    logits, _ = model.compute_base_logits(hidden)
    full = hidden @ model.lm_head.weight.t()  # [N, V_padded]
    assert logits.shape == (2 * GAMMA, VOCAB)
    assert torch.equal(logits, full[:, :VOCAB])


@pytest.mark.parametrize("org_vocab_size", [0, VOCAB + 1])
def test_lm_head_rejects_an_org_vocab_size_outside_the_padded_vocab(org_vocab_size: int) -> None:
    with pytest.raises(ValueError, match="org_vocab_size must be in"):
        LmHead(torch.zeros(VOCAB, HIDDEN), org_vocab_size=org_vocab_size)


def test_negative_vocab_padding_raises() -> None:
    with pytest.raises(ValueError, match="vocab_padding must be >= 0"):
        _model(vocab_padding=-1)


def test_model_rejects_a_markov_head_of_another_vocab() -> None:
    head = make_markov_head("vanilla", vocab_size=VOCAB + 1, rank=RANK, hidden_size=HIDDEN, seed=0)
    lm_head = LmHead(torch.zeros(VOCAB + 1, HIDDEN), org_vocab_size=VOCAB)
    with pytest.raises(ValueError, match="markov head vocab"):
        ToyDraftModel(lm_head=lm_head, markov_head=head, sample_from_anchor=True)


@pytest.mark.parametrize("rows", [1, 7])
def test_compute_base_logits_is_rows_by_vocab_with_no_tap(rows: int) -> None:
    model = _model()
    logits, tap = model.compute_base_logits(torch.randn(rows, HIDDEN))
    assert logits.shape == (rows, VOCAB)
    assert tap is None


def test_seeded_model_construction_is_deterministic() -> None:
    first, second = _model().state_dict(), _model().state_dict()
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_kind", ["vanilla", "gated", "rnn"])
def test_model_builds_and_walks_in_every_cpu_float_dtype(
    dtype: torch.dtype, head_kind: str
) -> None:
    model = _model(dtype=dtype, head_kind=head_kind)
    assert model.dtype == dtype
    assert all(param.dtype == dtype for param in model.parameters())
    hidden_states, input_ids = _call_inputs(bs=2, q=GAMMA, dtype=dtype)
    block = prepare_block(
        model=model, gamma=GAMMA, max_bs=MAX_BS, hidden_states=hidden_states, input_ids=input_ids
    )
    assert block.base_logits.dtype == dtype
    assert bool(block.base_logits.isfinite().all())
    tokens, corrected = model.markov_head.sample_block(
        block.base_logits,
        first_prev_tokens=block.anchor_tokens,
        hidden_states=block.sample_hidden,
        sampler=greedy_step,
    )
    assert tokens.shape == (2, GAMMA)
    assert corrected is not None and corrected.dtype == dtype
    assert bool(corrected.isfinite().all())


# -- anchor layouts -------------------------------------------------------------------------


@pytest.mark.parametrize(("sample_from_anchor", "q"), [(True, GAMMA), (False, GAMMA + 1)])
def test_query_rows_per_request_is_gamma_or_gamma_plus_one(
    sample_from_anchor: bool, q: int
) -> None:
    assert query_rows_per_request(gamma=GAMMA, sample_from_anchor=sample_from_anchor) == q


def test_drop_anchor_row_takes_rows_1_to_gamma_of_each_request() -> None:
    bs = 3
    hidden_states = torch.arange(bs * (GAMMA + 1) * 2, dtype=torch.float32).view(-1, 2)
    dropped = drop_anchor_row(hidden_states, bs=bs, gamma=GAMMA)
    assert dropped.shape == (bs, GAMMA, 2)
    assert dropped.is_contiguous()
    for b in range(bs):
        first = b * (GAMMA + 1) + 1
        assert torch.equal(dropped[b], hidden_states[first : first + GAMMA])


@pytest.mark.parametrize("sample_from_anchor", [True, False])
@pytest.mark.parametrize("bs", [1, MAX_BS])
def test_prepare_block_applies_the_anchor_layout(sample_from_anchor: bool, bs: int) -> None:
    model = _model(sample_from_anchor=sample_from_anchor)
    q = query_rows_per_request(gamma=GAMMA, sample_from_anchor=sample_from_anchor)
    hidden_states, input_ids = _call_inputs(bs=bs, q=q)
    block = prepare_block(
        model=model, gamma=GAMMA, max_bs=MAX_BS, hidden_states=hidden_states, input_ids=input_ids
    )
    first_sampled_row = 0 if sample_from_anchor else 1
    rows = torch.tensor(
        [b * q + first_sampled_row + k for b in range(bs) for k in range(GAMMA)]
    )  # the rows the lm_head and the head see, request-major
    assert block.bs == bs
    assert torch.equal(block.anchor_tokens, input_ids[torch.arange(bs) * q])
    assert block.anchor_tokens.dtype == torch.int64
    assert torch.equal(block.sample_hidden, hidden_states[rows].view(bs, GAMMA, HIDDEN))
    assert block.base_logits.shape == (bs, GAMMA, VOCAB)
    want_logits, _ = model.compute_base_logits(hidden_states[rows])
    assert torch.equal(block.base_logits, want_logits.view(bs, GAMMA, VOCAB))


def test_prepare_block_accepts_int32_input_ids_and_returns_int64_anchors() -> None:
    hidden_states, input_ids = _call_inputs(bs=2, q=GAMMA)
    block = prepare_block(
        model=_model(),
        gamma=GAMMA,
        max_bs=MAX_BS,
        hidden_states=hidden_states,
        input_ids=input_ids.int(),
    )
    assert block.anchor_tokens.dtype == torch.int64
    assert torch.equal(block.anchor_tokens, input_ids[torch.arange(2) * GAMMA])


@pytest.mark.parametrize(
    ("hidden_states", "input_ids", "message"),
    [
        pytest.param(
            torch.zeros(2 * GAMMA + 1, HIDDEN),
            torch.zeros(2 * GAMMA + 1, dtype=torch.int64),
            "not a positive multiple of the 3 query rows",
            id="rows-not-divisible-by-q",
        ),
        pytest.param(
            torch.zeros(0, HIDDEN),
            torch.zeros(0, dtype=torch.int64),
            "not a positive multiple",
            id="no-rows",
        ),
        pytest.param(
            torch.zeros((MAX_BS + 1) * GAMMA, HIDDEN),
            torch.zeros((MAX_BS + 1) * GAMMA, dtype=torch.int64),
            "exceeds max_bs=4",
            id="bs-over-max-bs",
        ),
        pytest.param(
            torch.zeros(2 * GAMMA, HIDDEN),
            torch.zeros(2 * GAMMA + 1, dtype=torch.int64),
            "input_ids must be \\[6\\]",
            id="input-ids-wrong-length",
        ),
        pytest.param(
            torch.zeros(2 * GAMMA, HIDDEN),
            torch.zeros(2, GAMMA, dtype=torch.int64),
            "input_ids must be \\[6\\]",
            id="input-ids-2d",
        ),
        pytest.param(
            torch.zeros(2 * GAMMA, HIDDEN),
            torch.zeros(2 * GAMMA),
            "input_ids must be int64 or int32, got torch.float32",
            id="input-ids-float",
        ),
        pytest.param(
            torch.zeros(2 * GAMMA, HIDDEN + 1),
            torch.zeros(2 * GAMMA, dtype=torch.int64),
            "hidden_states must be \\[bs\\*3, H=8\\]",
            id="hidden-width-mismatch",
        ),
        pytest.param(
            torch.zeros(2, GAMMA, HIDDEN),
            torch.zeros(2 * GAMMA, dtype=torch.int64),
            "hidden_states must be \\[bs\\*3, H=8\\]",
            id="hidden-3d",
        ),
    ],
)
def test_prepare_block_rejects_bad_inputs_naming_the_problem(
    hidden_states: torch.Tensor, input_ids: torch.Tensor, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        prepare_block(
            model=_model(),
            gamma=GAMMA,
            max_bs=MAX_BS,
            hidden_states=hidden_states,
            input_ids=input_ids,
        )


def test_prepare_block_names_q_of_the_non_anchor_layout() -> None:
    with pytest.raises(ValueError, match="4 query rows per request"):
        prepare_block(
            model=_model(sample_from_anchor=False),
            gamma=GAMMA,
            max_bs=MAX_BS,
            hidden_states=torch.zeros(2 * GAMMA, HIDDEN),
            input_ids=torch.zeros(2 * GAMMA, dtype=torch.int64),
        )


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.tensor([3, 1]), "strictly increasing"),
        (torch.tensor([1, 1]), "strictly increasing"),
        (torch.tensor([0, VOCAB]), "strictly increasing target ids"),
        (torch.tensor([0, 1], dtype=torch.int32), "must be int64"),
        (torch.arange(VOCAB), "fewer than|0 < Vd < vocab_size"),
    ],
)
def test_a_draft_vocabulary_must_be_sorted_target_ids(ids: torch.Tensor, message: str) -> None:
    model = _model()
    with pytest.raises(ValueError, match=message):
        ToyDraftModel(
            lm_head=model.lm_head,
            markov_head=model.markov_head,
            sample_from_anchor=True,
            draft_vocab_ids=ids,
        )


@pytest.mark.parametrize("draft_vocab", [-1, VOCAB])
def test_make_toy_draft_model_names_a_bad_draft_vocab(draft_vocab: int) -> None:
    with pytest.raises(ValueError, match=r"draft_vocab must be 0 \(the full vocabulary\)"):
        make_toy_draft_model(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            markov_rank=RANK,
            head_kind="vanilla",
            sample_from_anchor=True,
            seed=0,
            draft_vocab=draft_vocab,
        )
