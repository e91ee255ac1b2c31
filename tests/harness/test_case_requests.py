"""A case carries each request's top-k, top-p and min-p beside its temperatures and
greedy rows, and stages them as a server does; the standard matrix mixes them in one
batch, so the exact per-call checks run under the request grid.

A sampler that reads a staged top-k as the greedy mark (``top_k < TOP_K_ALL`` instead of
``top_k == 1``) passes every case without a top-k; on the grid's cases it emits the
argmax on the top-k rows, and the exact ``noise_replay`` check fails there.
"""

from __future__ import annotations

import json

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import TOP_K_ALL, Case, CaseError, make_case
from harness.pipeline.compare import evaluate_run
from harness.pipeline.matrix import REQUEST_ROWS, standard_matrix
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from reference import SamplingInfo

GRID = [case for case in standard_matrix() if case.top_ks]
(FIXED,) = builtin_implementations(("fixed",))


class TopKReadAsGreedy(FixedSampler):
    """Planted: any staged top-k marks the row greedy, not ``top_k == 1`` alone."""

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        super().stage_sampling_params(bs=bs, sampling_info=sampling_info)
        if sampling_info is not None:
            self.greedy_mask[:bs] = sampling_info.top_ks.to(self.greedy_mask.device) < TOP_K_ALL


def test_the_standard_matrix_mixes_the_request_grid_in_one_batch() -> None:
    assert len(GRID) == 2
    for case in GRID:
        staged = case.requests()
        assert staged.top_ks.tolist()[:6] == [TOP_K_ALL, 1, 3, TOP_K_ALL, TOP_K_ALL, 6]
        assert staged.top_ps.tolist()[:6] == pytest.approx([1, 1, 1, 0.8, 1, 0.9])
        assert staged.min_ps.tolist()[:6] == pytest.approx([0, 0, 0, 0, 0.2, 0.1])
        truncating = staged.truncation.truncating_rows(vocab_size=case.vocab_size)
        assert truncating.any() and not truncating.all()
        assert [case.greedy_rows[i] for i in range(len(REQUEST_ROWS))] == [
            row[1] for row in REQUEST_ROWS
        ]


def test_a_case_with_requests_round_trips_through_json() -> None:
    case = GRID[0]
    again = Case.from_json_dict(json.loads(json.dumps(case.to_json_dict())))
    assert again == case and again.top_ps == case.top_ps
    assert torch.equal(again.requests().top_ks, case.requests().top_ks)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"top_ps": (1.5, 1.0)}, "top_ps must be in (0, 1]"),
        ({"min_ps": (0.0, 1.0)}, "min_ps must be in [0, 1)"),
        ({"top_ks": (-1, 0)}, "top_ks must be integers >= 0"),
        ({"top_ks": (0,)}, "top_ks needs one entry per row (bs=2) or none, got 1"),
        ({"top_ks": (1, 0)}, "a sampled row's top-k must be 0 (none) or >= 2, got 1 at row 0"),
        ({"top_ps": ("x", 1.0)}, "top_ps must be a list of numbers"),
    ],
)
def test_a_bad_request_parameter_is_refused_on_one_line(changes: dict, message: str) -> None:
    with pytest.raises(CaseError) as raised:
        make_case(bs=2, gamma=2, vocab_size=16, hidden_size=8, markov_rank=4, **changes)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_fixed_is_clean_on_the_grid_and_a_top_k_read_as_greedy_fails_an_exact_check() -> None:
    case = GRID[0]
    planted = Implementation("top-k-greedy", TopKReadAsGreedy, "test:TopKReadAsGreedy")
    run = run_case(case, [FIXED, planted])
    checks = evaluate_run(run, require_observable=False).checks
    assert not [c.name for c in checks["fixed"] if c.failed]
    failed = [c for c in checks["top-k-greedy"] if c.failed]
    assert [c.name for c in failed] == ["noise_replay"]
    assert "(row 2, step 0)" in failed[0].detail  # row 2: top-k 3, sampled at T=1
    # without a top-k the planted sampler is the fixed one: nothing tells them apart
    plain = case.with_changes(top_ks=(), top_ps=(), min_ps=())
    plain_run = run_case(plain, [planted])
    plain_checks = evaluate_run(plain_run, require_observable=False).checks["top-k-greedy"]
    assert not [c.name for c in plain_checks if c.failed]
