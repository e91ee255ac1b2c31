"""The reference side of the statistical oracle: chain verifier, target model, decode loop.

Exact properties where the math is exact (deterministic acceptance, enumeration,
greedy paths); fixed-seed chi-square checks at ``ALPHA`` where it is not.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.oracles.gof import pearson_fit
from reference import ReferenceDraftSampler, SamplingInfo, ToyDraftModel, make_toy_draft_model
from reference.decode import DecodeResult, DraftContext, speculative_decode
from reference.streams import VerifierNoise
from reference.target_model import MarkovTargetModel, make_markov_target
from reference.verifier import (
    CHAIN_VERIFIER,
    DraftBlock,
    VerifyResult,
    VerifyRound,
    VerifyStep,
    chain_verify,
    draft_distribution,
    read_draft_block,
    sample_categorical,
)

ALPHA = 1e-6  # fixed seeds: a false alarm at this level is a one-in-a-million event
VOCAB, GAMMA, HIDDEN, RANK = 6, 3, 16, 8
TOP_K_ALL = 1 << 30


def chi2_p_value(observed: torch.Tensor, expected_probs: torch.Tensor) -> float:
    """Pearson p-value over cells with positive probability (all expected >= 5 here)."""
    keep = expected_probs > 0
    assert int(observed[~keep].sum()) == 0, "observations in cells of probability 0"
    assert bool((observed.sum() * expected_probs[keep] >= 5).all())
    fit = pearson_fit(observed[keep].unsqueeze(0), expected_probs=expected_probs[keep].unsqueeze(0))
    return fit.p_value


def random_probs(*shape: int, generator: torch.Generator, scale: float = 1.5) -> torch.Tensor:
    logits = torch.randn(*shape, generator=generator, dtype=torch.float64) * scale
    return torch.softmax(logits, dim=-1)


# -- sample_categorical ---------------------------------------------------------------------------
def test_sample_categorical_follows_the_weights_and_skips_zero_weight_tokens() -> None:
    weights = torch.tensor([0.0, 3.0, 0.0, 1.0, 6.0, 0.0], dtype=torch.float64)
    rows = 200_000
    draws = sample_categorical(weights.expand(rows, -1), generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=weights.numel()).double()
    assert counts[weights == 0].sum() == 0
    assert chi2_p_value(counts, weights / weights.sum()) > ALPHA


# -- draft_distribution ---------------------------------------------------------------------------
def test_draft_distribution_is_tempered_softmax_on_sampled_rows_and_one_hot_on_greedy() -> None:
    corrected = torch.randn(3, GAMMA, VOCAB, generator=torch.Generator().manual_seed(1))
    temperatures = torch.tensor([0.5, 1.0, 1e-5])
    greedy = torch.tensor([False, False, True])
    q = draft_distribution(corrected, temperatures=temperatures, greedy_mask=greedy)
    assert q.dtype == torch.float64
    for row in range(2):
        torch.testing.assert_close(
            q[row], torch.softmax(corrected[row].double() / float(temperatures[row]), dim=-1)
        )
    expected_one_hot = torch.nn.functional.one_hot(corrected[2].argmax(-1), VOCAB).double()
    assert torch.equal(q[2], expected_one_hot)


# -- chain_verify ---------------------------------------------------------------------------------
def test_drafts_drawn_from_the_target_itself_are_always_accepted() -> None:
    generator = torch.Generator().manual_seed(2)
    p = random_probs(500, GAMMA + 1, VOCAB, generator=generator)
    drafts = torch.multinomial(p[:, :GAMMA].reshape(-1, VOCAB), 1, generator=generator)
    result = chain_verify(
        target_probs=p,
        draft_probs=p[:, :GAMMA],
        draft_tokens=drafts.view(500, GAMMA),
        generator=generator,
    )
    assert torch.equal(result.num_committed, torch.full((500,), GAMMA + 1))
    assert torch.equal(result.committed[:, :GAMMA], drafts.view(500, GAMMA))


def test_a_draft_the_target_calls_impossible_is_replaced_and_ends_the_round() -> None:
    generator = torch.Generator().manual_seed(3)
    p = random_probs(4, GAMMA + 1, VOCAB, generator=generator)
    q = random_probs(4, GAMMA, VOCAB, generator=generator)
    drafts = torch.zeros(4, GAMMA, dtype=torch.int64)
    p[:, 0, 0] = 0.0  # first draft (token 0) impossible under the target
    p[:, 0] /= p[:, 0].sum(-1, keepdim=True)
    result = chain_verify(target_probs=p, draft_probs=q, draft_tokens=drafts, generator=generator)
    assert torch.equal(result.num_committed, torch.ones(4, dtype=torch.int64))
    assert bool((result.committed[:, 0] != 0).all())
    assert bool((result.committed[:, 1:] == -1).all())


def test_greedy_verification_accepts_exactly_the_matching_prefix_then_the_target_argmax() -> None:
    target_tokens = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [5, 0, 1, 2]])  # [bs, gamma+1]
    drafts = torch.tensor([[1, 2, 3], [1, 5, 3], [0, 0, 1]])  # all, 1, 0 accepted
    one_hot = torch.nn.functional.one_hot
    result = chain_verify(
        target_probs=one_hot(target_tokens, VOCAB).double(),
        draft_probs=one_hot(drafts, VOCAB).double(),
        draft_tokens=drafts,
        generator=torch.Generator().manual_seed(4),
    )
    assert result.num_committed.tolist() == [4, 2, 1]
    assert result.committed.tolist() == [[1, 2, 3, 4], [1, 2, -1, -1], [5, -1, -1, -1]]


def test_chain_verification_is_lossless_on_every_committed_position() -> None:
    """Drafts drawn from q position by position; committed position k follows p_k
    among the rows that reach it (p and q fixed per position, so no context)."""
    rows = 200_000
    generator = torch.Generator().manual_seed(5)
    p = random_probs(1, GAMMA + 1, VOCAB, generator=generator).expand(rows, -1, -1)
    q = random_probs(1, GAMMA, VOCAB, generator=generator, scale=2.5).expand(rows, -1, -1)
    drafts = torch.stack(
        [
            torch.multinomial(q[0, k], rows, replacement=True, generator=generator)
            for k in range(GAMMA)
        ],
        dim=1,
    )
    result = chain_verify(target_probs=p, draft_probs=q, draft_tokens=drafts, generator=generator)
    for k in range(GAMMA + 1):
        reached = result.num_committed > k
        counts = torch.bincount(result.committed[reached, k], minlength=VOCAB).double()
        assert chi2_p_value(counts, p[0, k]) > ALPHA, f"position {k}"
    accept_rate = 1 - 0.5 * float((p[0, :GAMMA] - q[0]).abs().sum(-1).mean())
    assert 0 < accept_rate < 1  # the check above saw both acceptances and rejections


def test_chain_verify_draws_only_from_its_own_generator() -> None:
    generator = torch.Generator().manual_seed(6)
    p = random_probs(64, GAMMA + 1, VOCAB, generator=generator)
    q = random_probs(64, GAMMA, VOCAB, generator=generator)
    drafts = torch.randint(0, VOCAB, (64, GAMMA), generator=generator)
    global_state = torch.get_rng_state()
    first, second = (
        chain_verify(
            target_probs=p,
            draft_probs=q,
            draft_tokens=drafts,
            generator=torch.Generator().manual_seed(7),
        )
        for _ in range(2)
    )
    assert torch.equal(torch.get_rng_state(), global_state)
    assert torch.equal(first.committed, second.committed)


# -- target model ---------------------------------------------------------------------------------
def brute_force_joint(
    target: MarkovTargetModel, *, m: int, temperature: float, greedy: bool
) -> torch.Tensor:
    every = torch.arange(target.vocab_size)
    conditional = target.next_token_probs(
        every,
        temperatures=torch.tensor(temperature, dtype=torch.float64),
        greedy_mask=torch.tensor(greedy),
    )  # [V, V]
    joint = torch.zeros(target.vocab_size**m, dtype=torch.float64)
    for anchor in range(target.vocab_size):
        for cell, path in enumerate(itertools.product(range(target.vocab_size), repeat=m)):
            prob, prev = 1.0 / target.vocab_size, anchor
            for token in path:
                prob, prev = prob * float(conditional[prev, token]), token
            joint[cell] += prob
    return joint


@pytest.mark.parametrize(("temperature", "greedy"), [(1.0, False), (0.5, False), (0.0, True)])
def test_target_joint_matches_brute_force_enumeration(temperature: float, greedy: bool) -> None:
    target = make_markov_target(vocab_size=4, seed=8)
    joint = target.joint_probs(m=3, temperature=temperature, greedy=greedy)
    torch.testing.assert_close(
        joint, brute_force_joint(target, m=3, temperature=temperature, greedy=greedy)
    )
    torch.testing.assert_close(joint.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_target_block_rows_condition_on_anchor_then_drafts_at_each_rows_temperature() -> None:
    target = make_markov_target(vocab_size=VOCAB, seed=9)
    anchors = torch.tensor([0, 5])
    drafts = torch.tensor([[1, 2, 3], [4, 4, 0]])
    temperatures = torch.tensor([0.7, 1e-5], dtype=torch.float64)
    greedy = torch.tensor([False, True])
    block = target.block_probs(
        anchor_tokens=anchors, draft_tokens=drafts, temperatures=temperatures, greedy_mask=greedy
    )
    assert block.shape == (2, GAMMA + 1, VOCAB)
    prev = torch.cat([anchors.unsqueeze(1), drafts], dim=1)
    logits = target.transition_logits
    torch.testing.assert_close(block[0], torch.softmax(logits[prev[0]] / 0.7, dim=-1))
    one_hot = torch.nn.functional.one_hot(logits[prev[1]].argmax(-1), VOCAB).double()
    assert torch.equal(block[1], one_hot)


# -- decode loop ----------------------------------------------------------------------------------
def decode_setup(
    *, rows: int, head_kind: str, temperatures: list[float]
) -> tuple[ToyDraftModel, MarkovTargetModel, DraftContext, SamplingInfo]:
    model = make_toy_draft_model(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        markov_rank=RANK,
        head_kind=head_kind,
        sample_from_anchor=True,
        seed=10,
    )
    target = make_markov_target(vocab_size=VOCAB, seed=11)
    context = DraftContext(
        vocab_size=VOCAB, hidden_size=HIDDEN, gamma=GAMMA, sample_from_anchor=True, seed=12
    )
    row_temps = [temperatures[i % len(temperatures)] for i in range(rows)]
    sampling_info = SamplingInfo.from_lists(
        temperatures=row_temps, top_ks=[1 if t == 0 else TOP_K_ALL for t in row_temps]
    )
    return model, target, context, sampling_info


def run_decode(
    sampler_class: type,
    *,
    rows: int,
    m: int,
    seed: int,
    head_kind: str,
    temperatures: list[float],
) -> tuple[DecodeResult, MarkovTargetModel, SamplingInfo]:
    model, target, context, sampling_info = decode_setup(
        rows=rows, head_kind=head_kind, temperatures=temperatures
    )
    sampler = sampler_class(model=model, gamma=GAMMA, max_bs=rows, device="cpu")
    return (
        speculative_decode(
            sampler=sampler,
            target=target,
            context=context,
            sampling_info=sampling_info,
            m=m,
            seed=seed,
        ),
        target,
        sampling_info,
    )


def test_draft_hidden_states_depend_on_the_anchor_and_the_query_row() -> None:
    context = DraftContext(
        vocab_size=VOCAB, hidden_size=HIDDEN, gamma=GAMMA, sample_from_anchor=True, seed=13
    )
    hidden = context.hidden_states(torch.tensor([2, 2, 3])).view(3, GAMMA, HIDDEN)
    assert torch.equal(hidden[0], hidden[1])
    assert not torch.equal(hidden[0], hidden[2])
    assert not torch.equal(hidden[0, 0], hidden[0, 1])
    assert context.input_ids(torch.tensor([2, 3])).tolist() == [2, 0, 0, 3, 0, 0]


@pytest.mark.parametrize("head_kind", ["vanilla", "gated", "rnn"])
def test_decode_fills_m_tokens_per_row_reproducibly_and_leaves_the_global_rng_alone(
    head_kind: str,
) -> None:
    global_state = torch.get_rng_state()
    first, _, _ = run_decode(
        FixedSampler, rows=300, m=5, seed=14, head_kind=head_kind, temperatures=[1.0, 0.0]
    )
    assert torch.equal(torch.get_rng_state(), global_state)
    second, _, _ = run_decode(
        FixedSampler, rows=300, m=5, seed=14, head_kind=head_kind, temperatures=[1.0, 0.0]
    )
    assert first.committed.shape == (300, 5)
    assert bool(((first.committed >= 0) & (first.committed < VOCAB)).all())
    assert torch.equal(first.committed, second.committed)
    assert 1 <= first.rounds <= 5
    assert bool(((first.accepted_lengths >= 0) & (first.accepted_lengths <= GAMMA)).all())


def test_greedy_rows_commit_exactly_the_target_greedy_path() -> None:
    decoded, target, _ = run_decode(
        FixedSampler, rows=400, m=6, seed=15, head_kind="vanilla", temperatures=[0.0]
    )
    greedy_next = target.transition_logits.argmax(-1)  # [V]
    committed = decoded.committed
    assert torch.equal(committed[:, 1:], greedy_next[committed[:, :-1]])


def test_reference_sampler_decodes_to_the_target_joint() -> None:
    """The whole loop at a fixed seed: the single-pass reference sampler is lossless."""
    rows, m = 60_000, 2
    decoded, target, _ = run_decode(
        ReferenceDraftSampler, rows=rows, m=m, seed=16, head_kind="gated", temperatures=[1.0]
    )
    cells = decoded.committed[:, 0] * VOCAB + decoded.committed[:, 1]
    counts = torch.bincount(cells, minlength=VOCAB**m).double()
    expected = target.joint_probs(m=m, temperature=1.0, greedy=False)
    assert chi2_p_value(counts, expected) > ALPHA
    assert 0 < decoded.mean_accepted_length < GAMMA


class StagingCounter(FixedSampler):
    """Counts staging and calls: the server stages before every call it makes."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.events: list[str] = []

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        self.events.append("stage")
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        self.events.append("call")
        super().__call__(hidden_states, input_ids)


def test_decode_stages_the_sampling_parameters_before_every_round() -> None:
    model, target, context, sampling_info = decode_setup(
        rows=50, head_kind="vanilla", temperatures=[1.0]
    )
    sampler = StagingCounter(model=model, gamma=GAMMA, max_bs=50, device="cpu")
    decoded = speculative_decode(
        sampler=sampler,
        target=target,
        context=context,
        sampling_info=sampling_info,
        m=2,
        seed=17,
        min_rounds=3,
    )
    assert decoded.rounds >= 3
    assert sampler.events == ["stage", "call"] * decoded.rounds


def test_round_records_hold_every_committed_token_and_chain_the_anchors() -> None:
    decoded, _, _ = run_decode(
        FixedSampler, rows=200, m=3, seed=18, head_kind="rnn", temperatures=[0.7, 0.0]
    )
    rounds, rows = decoded.rounds, 200
    assert decoded.round_blocks.shape == (rounds, rows, GAMMA + 1)
    assert decoded.round_anchors.shape == (rounds, rows)
    committed = decoded.round_blocks >= 0
    # committed tokens are a prefix of each round's block
    assert torch.equal(committed, committed.long().cummin(dim=2).values.bool())
    count = committed.sum(dim=2)  # [rounds, rows]
    last = decoded.round_blocks.gather(2, (count - 1).unsqueeze(2)).squeeze(2)
    assert torch.equal(decoded.round_anchors[1:], last[:-1])  # next anchor = last committed
    # the first m committed tokens are the rounds' tokens in order
    stream = [decoded.round_blocks[:, i][committed[:, i]] for i in range(rows)]
    assert torch.equal(decoded.committed, torch.stack([s[:3] for s in stream]))


class RecordingChain:
    """The chain verifier, keeping every round it was handed."""

    name = "recording-chain"

    def __init__(self) -> None:
        self.rounds: list[VerifyRound] = []

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        step = CHAIN_VERIFIER.start(noise=noise, device=device)

        def verify(round_: VerifyRound) -> VerifyResult:
            self.rounds.append(round_)
            return step(round_)

        return verify


def test_a_round_drafted_in_several_calls_reaches_the_verifier_once_in_row_order() -> None:
    rows = 30
    model, target, context, sampling_info = decode_setup(
        rows=rows, head_kind="gated", temperatures=[0.7, 0.0, 1.3]
    )
    sampler = FixedSampler(model=model, gamma=GAMMA, max_bs=rows, device="cpu")
    calls = (torch.randperm(rows, generator=torch.Generator().manual_seed(19)).split([1, 12, 17]),)
    read: list[DraftBlock] = []

    def reader(sampler_: object, bs: int) -> DraftBlock:
        block = read_draft_block(sampler_, bs)
        read.append(DraftBlock(**{k: v.clone() for k, v in vars(block).items()}))
        return block

    verifier = RecordingChain()
    decoded = speculative_decode(
        sampler=sampler,
        target=target,
        context=context,
        sampling_info=sampling_info,
        m=2,
        seed=20,
        min_rounds=2,
        batches_of_round=lambda r: calls[0],
        verifier=verifier,
        read_draft=reader,
    )
    assert len(verifier.rounds) == decoded.rounds and len(read) == 3 * decoded.rounds
    for r, round_ in enumerate(verifier.rounds):
        assert torch.equal(round_.anchors, decoded.round_anchors[r])
        for batch, block in zip(calls[0], read[3 * r : 3 * r + 3], strict=True):
            assert block.tokens.shape == (batch.shape[0], GAMMA)  # read at the call's size
            for name, value in vars(block).items():
                assert torch.equal(getattr(round_.draft, name)[batch], value), name
            assert torch.equal(decoded.round_slots[r][batch], torch.arange(batch.shape[0]))
        staged_greedy = round_.draft.greedy_mask
        assert torch.equal(staged_greedy, sampling_info.top_ks <= 1)  # each row's own request
