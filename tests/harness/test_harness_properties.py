"""Properties over the case space (reduced draft vocabularies among them): fixed passes
every check and equals the reference; legacy diverges from fixed exactly as the ledger
predicts, nothing more, nothing less."""

from __future__ import annotations

from hypothesis import given, note
from hypothesis import strategies as st

from harness.case import Case
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import builtin_implementations
from harness.testing import case_strategy

# Vocabulary sizes around the Triton kernel's 1024-wide tiles, and small ones.
VOCABS = st.one_of(st.integers(1, 64), st.sampled_from([1023, 1024, 1025, 2047, 2048, 2049, 3000]))

SAMPLER_CASES = case_strategy(
    max_bs=8,
    max_gamma=8,
    vocab_sizes=VOCABS,
    max_hidden_size=24,
    max_markov_rank=16,
    dtypes=("float32", "bfloat16"),
    temperatures=(0.0, 0.3, 1.0, 1.7),
    max_spare_slots=0,
    max_seed=10_000,
    draft_vocab=True,
)


@given(SAMPLER_CASES)
def test_fixed_passes_every_check_and_legacy_matches_the_ledger(case: Case) -> None:
    note(case.label())
    verdict = evaluate_run(run_case(case, builtin_implementations()), require_observable=False)
    for name in ("reference", "fixed"):
        failed = verdict.failed_checks(name)
        assert not failed, f"{name}: {[(c.name, c.detail) for c in failed]}"
    assert verdict.ledger is not None
    assert verdict.ledger.holds, verdict.ledger.problems
