"""Counter replay searches a call's fresh counters (docs/upstream.md, "Replaying
counter-based noise"): draws at another fresh counter, or through another transform of
fresh counters' words, are named and never a lossless failure; a draw at a counter the
stream handed out before, or at the next call's, is one. Synthetic results, no package
needed (the sglang samplers that make each happen: tests/harness/upstream/
test_plumbing_checks.py)."""

from __future__ import annotations

import torch

from harness.case import build_inputs, case_block, make_case
from harness.pipeline.check_result import Skip
from harness.pipeline.checks.noise import counter_stream_replay, replay_counters
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
    outcome = counter_stream_replay(RUN, result)
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
    outcome = counter_stream_replay(RUN, result)
    assert outcome.status == "pass"
    assert "draws at counters 3, 4: not the package's layout" in outcome.detail


def test_a_counter_past_the_call_is_not_searched() -> None:
    result = _result({3: OTHER, 5: TOKENS}, start=3, end=4, reads=None)  # 5: not fresh
    outcome = counter_stream_replay(RUN, result)
    assert outcome.status == "fail"
    assert "no fresh counter of the declared noise stream (3..3)" in outcome.detail
    assert len(outcome.positions) == TOKENS.numel()


def test_another_transform_of_fresh_words_is_left_to_the_oracle() -> None:
    result = _result({3: OTHER}, start=3, end=4, reads=CounterReads(own=(), other=(3,)))
    outcome = counter_stream_replay(RUN, result)
    assert (outcome.status, outcome.skip) == ("skip", Skip.NOT_VISIBLE)
    assert "another transform of the stream's words at fresh counter(s) 3" in outcome.detail


def test_a_read_outside_the_fresh_counters_fails_whatever_the_transform() -> None:
    before = _result({3: OTHER, 1: TOKENS}, start=3, end=4, reads=CounterReads(own=(1,), other=()))
    outcome = counter_stream_replay(RUN, before)
    assert outcome.status == "fail"
    assert "draws at counter(s) [1] handed out before this call (reused noise)" in outcome.detail
    after = _result({3: TOKENS}, start=3, end=4, reads=CounterReads(own=(3,), other=(4,)))
    outcome = counter_stream_replay(RUN, after)
    assert outcome.status == "fail"
    assert "[4] past where the call left the counter (the next call's)" in outcome.detail
