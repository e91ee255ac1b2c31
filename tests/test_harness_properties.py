"""Properties over the case space: fixed passes every check and equals the reference;
legacy diverges from fixed exactly as the ledger predicts, nothing more, nothing less."""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from harness.pipeline.case import Case
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import builtin_implementations

# Vocabulary sizes around the Triton kernel's 1024-wide tiles, and small ones.
VOCABS = st.one_of(st.integers(1, 64), st.sampled_from([1023, 1024, 1025, 2047, 2048, 2049, 3000]))

TEMPERATURES = st.sampled_from([0.0, 0.3, 1.0, 1.7])


@st.composite
def sampler_cases(draw: st.DrawFn) -> Case:
    bs = draw(st.integers(1, 8))
    folded = draw(st.booleans())
    return Case(
        bs=bs,
        gamma=draw(st.integers(1, 8)),
        vocab_size=draw(VOCABS),
        hidden_size=draw(st.integers(1, 24)),
        markov_rank=draw(st.integers(1, 16)),
        head_kind=draw(st.sampled_from(["vanilla", "gated", "rnn"])),
        sample_from_anchor=draw(st.booleans()),
        dtype=draw(st.sampled_from(["float32", "bfloat16"])),
        folded_sampling=folded,
        fused_greedy=draw(st.booleans()),
        temperatures=tuple(draw(st.lists(TEMPERATURES, min_size=bs, max_size=bs))),
        greedy_rows=tuple(draw(st.lists(st.booleans(), min_size=bs, max_size=bs))),
        confidence=draw(st.booleans()),
        seed=draw(st.integers(0, 10_000)),
    )


@given(sampler_cases())
def test_fixed_passes_every_check_and_legacy_matches_the_ledger(case: Case) -> None:
    note(case.label())
    verdict = evaluate_run(run_case(case, builtin_implementations()), require_observable=False)
    for name in ("reference", "fixed"):
        failed = verdict.failed_checks(name)
        assert not failed, f"{name}: {[(c.name, c.detail) for c in failed]}"
    assert verdict.ledger is not None
    assert verdict.ledger.holds, verdict.ledger.problems
