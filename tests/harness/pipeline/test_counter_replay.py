"""Counter replay searches a call's fresh counters (docs/upstream.md, "Replaying
counter-based noise"): draws at another fresh counter, or through another transform of
fresh counters' words, are named and never a lossless failure; a draw at a counter the
stream handed out before, or at the next call's, is one, unless the key check proves a
counter past the call fresh (docs/upstream.md, "Fresh counters"). Synthetic results, no
package needed (the sglang samplers that make each happen: tests/harness/upstream/
test_plumbing_checks.py)."""

from __future__ import annotations

import torch

from harness.case import build_inputs, case_block, make_case
from harness.pipeline.check_result import Skip
from harness.pipeline.checks.noise import counter_stream_replay, proven_fresh, replay_counters
from harness.pipeline.checks.subject import Subject
from harness.pipeline.runner import CaseRun, ImplResult
from harness.plugins.conventions import CounterReads, NoiseCounter

CASE = make_case(bs=2, gamma=3, vocab_size=16, hidden_size=8, markov_rank=4, seed=5)
INPUTS = build_inputs(CASE)
RUN = CaseRun(case=CASE, inputs=INPUTS, block=case_block(CASE, INPUTS), results={})
TOKENS = torch.tensor([[1, 2, 3], [4, 5, 6]])
OTHER = torch.tensor([[9, 9, 9], [9, 9, 9]])  # what a counter's race gives: not the tokens


def _result(
    replays: dict[int, torch.Tensor], *, start: int, end: int, reads: CounterReads | None
) -> ImplResult:
    return ImplResult(
        name="synthetic",
        tokens=TOKENS,
        noise_counter=NoiseCounter(key=7, start=start, end=end),
        counter_replay=replays.get(start, OTHER),
        stream_replays=replays,
        counter_reads=reads,
    )


def test_the_package_layout_replays_at_the_block_counter() -> None:
    result = _result({3: TOKENS}, start=3, end=4, reads=CounterReads(own=(3,), other=()))
    outcome = counter_stream_replay(Subject(RUN, result))
    assert (outcome.status, outcome.detail) == (
        "pass",
        "replayed from the declared counter stream (3)",
    )


def test_steps_at_the_next_fresh_counter_pass_with_the_layout_named() -> None:
    at_next = torch.where(torch.arange(3) == 0, OTHER, TOKENS)  # steps 1.. drawn at 4
    at_start = torch.where(torch.arange(3) == 0, TOKENS, OTHER)  # step 0 drawn at 3
    result = _result(
        {3: at_start, 4: at_next}, start=3, end=5, reads=CounterReads(own=(3, 4), other=())
    )
    replayed = replay_counters(result)
    assert replayed.counters == (3, 4) and bool(replayed.explained.all())
    outcome = counter_stream_replay(Subject(RUN, result))
    assert outcome.status == "pass"
    assert "draws at counters 3, 4: not the package's layout" in outcome.detail


def test_a_counter_past_the_call_is_not_searched() -> None:
    result = _result({3: OTHER, 5: TOKENS}, start=3, end=4, reads=None)  # 5: not fresh
    outcome = counter_stream_replay(Subject(RUN, result))
    assert outcome.status == "fail"
    assert "no fresh counter of the declared noise stream (3..3)" in outcome.detail
    assert len(outcome.positions) == TOKENS.numel()


def test_another_transform_of_fresh_words_is_left_to_the_oracle() -> None:
    result = _result({3: OTHER}, start=3, end=4, reads=CounterReads(own=(), other=(3,)))
    outcome = counter_stream_replay(Subject(RUN, result))
    assert (outcome.status, outcome.skip) == ("skip", Skip.NOT_VISIBLE)
    assert "another transform of the stream's words at fresh counter(s) 3" in outcome.detail


def test_a_read_outside_the_fresh_counters_fails_whatever_the_transform() -> None:
    before = _result({3: OTHER, 1: TOKENS}, start=3, end=4, reads=CounterReads(own=(1,), other=()))
    outcome = counter_stream_replay(Subject(RUN, before))
    assert outcome.status == "fail"
    assert "draws at counter(s) [1] handed out before this call (reused noise)" in outcome.detail
    after = _result({3: TOKENS}, start=3, end=4, reads=CounterReads(own=(3,), other=(4,)))
    outcome = counter_stream_replay(Subject(RUN, after))
    assert outcome.status == "fail"
    assert "[4] past where the call left the counter (the next call's)" in outcome.detail


def _next_call(reads: tuple[int, ...]) -> ImplResult:
    """The instance's next call: began at 4, read ``reads``."""
    return ImplResult(
        name="synthetic",
        noise_counter=NoiseCounter(key=7, start=4, end=5),
        counter_reads=CounterReads(own=reads, other=()),
    )


def test_a_counter_past_the_call_that_no_other_call_reads_is_proven_fresh() -> None:
    past = _result({3: OTHER, 4: TOKENS}, start=3, end=4, reads=CounterReads(own=(4,), other=()))
    subject = Subject(RUN, past, other_calls=(_next_call((5,)),))
    assert proven_fresh(subject) == {4}
    outcome = counter_stream_replay(subject)
    assert outcome.status == "pass"
    assert (
        "counter(s) 4 past where the call left the counter, proven fresh: read by no other "
        "draft call and no verifier draw"
    ) in outcome.detail


def test_a_counter_past_the_call_that_another_call_reads_is_reused() -> None:
    past = _result({3: OTHER, 4: TOKENS}, start=3, end=4, reads=CounterReads(own=(4,), other=()))
    for others in [(_next_call((4,)),), ()]:  # read again, or no other call to prove it by
        subject = Subject(RUN, past, other_calls=others)
        assert proven_fresh(subject) == frozenset()
        outcome = counter_stream_replay(subject)
        assert outcome.status == "fail"
        assert "[4] past where the call left the counter (the next call's)" in outcome.detail


def test_a_counter_the_verifier_reads_under_the_same_key_is_not_fresh() -> None:
    past = _result({3: OTHER, 4: TOKENS}, start=3, end=4, reads=CounterReads(own=(4,), other=()))
    shared = ImplResult(
        **{**past.__dict__, "verifier_counter": NoiseCounter(key=7, start=0, end=5)}
    )
    assert proven_fresh(Subject(RUN, shared, other_calls=(_next_call((5,)),))) == frozenset()
    apart = ImplResult(**{**past.__dict__, "verifier_counter": NoiseCounter(key=8, start=0, end=5)})
    assert proven_fresh(Subject(RUN, apart, other_calls=(_next_call((5,)),))) == {4}


def test_an_other_call_whose_reads_were_not_seen_proves_nothing() -> None:
    past = _result({3: OTHER, 4: TOKENS}, start=3, end=4, reads=CounterReads(own=(4,), other=()))
    unseen = ImplResult(name="synthetic", noise_counter=NoiseCounter(key=7, start=4, end=5))
    assert proven_fresh(Subject(RUN, past, other_calls=(unseen,))) == frozenset()
