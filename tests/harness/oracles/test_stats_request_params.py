"""The oracle under request parameters: each truncated group is judged against its exact
law (``reference.request_law``), so a verifier that gets one piece of the request's law
wrong is rejected, and the designs that are lossless by construction pass.

The planted verifier defects and the correct designs live in
``tests.plugins.request_param_defects``. The tie defect needs ties: a target whose
logits take two values, so equal probabilities meet at most top-k and top-p boundaries.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from harness.case import make_case
from harness.oracles import stats
from harness.oracles.defaults import DEFAULT_TRUNCATED, GREEDY, ParameterSet
from harness.oracles.problem import (
    DEFAULT_CONFIG,
    FAR,
    StatsConfig,
    StatsError,
    StatsProblem,
    build_problems,
    group_label,
    group_transitions,
    group_truncation,
)
from harness.oracles.scope import scope_under
from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.upstream.rejection import BLOCKWISE_REJECTION
from reference.target_model import MarkovTargetModel
from reference.verifier import CHAIN_VERIFIER, Verifier
from tests.plugins.request_param_defects import (
    DropsMinP,
    DropsTopP,
    OwnTopKDrafter,
    OwnTopKWrittenOnly,
    ShuffledRowParams,
    TopKOverDraftSet,
    TopPOnDraftOnly,
    TopPTieHighestIdFirst,
    UndeclaredOwnTopK,
)

FIXED, LEGACY = builtin_implementations(("fixed", "legacy"))
CONFIG = replace(
    DEFAULT_CONFIG,
    temperatures=(1.0, GREEDY),
    truncated=DEFAULT_TRUNCATED,
    targets=(FAR,),
    head_kinds=("vanilla",),
    rows=3_000,  # 500 rows per group
    temperature_weight=1,  # every group its own sixth of the rows
    stage_rows=(),
)
TOP_K, TOP_P, MIN_P, MIXED = (group_label(g) for g in DEFAULT_TRUNCATED)


@pytest.fixture(scope="module")
def problems() -> tuple[StatsProblem, ...]:
    return build_problems(CONFIG)


@pytest.fixture(scope="module")
def tied_problems(problems: tuple[StatsProblem, ...]) -> tuple[StatsProblem, ...]:
    """``problems`` against a target whose logits are 0 or 1: ties at the boundaries."""
    tied = MarkovTargetModel(
        torch.randint(0, 2, (8, 8), generator=torch.Generator().manual_seed(5)).double()
    )
    joint = torch.stack(
        [
            tied.joint_probs(
                m=CONFIG.m,
                temperature=g.temperature,
                greedy=g.greedy,
                truncation=group_truncation(g, device=tied.device),
            )
            for g in CONFIG.groups
        ]
    )
    return tuple(
        replace(
            p,
            targets={"vanilla": tied},
            transition={"vanilla": group_transitions(tied, groups=CONFIG.groups)},
            expected_joint={"vanilla": joint},
        )
        for p in problems
    )


def _rejected_groups(
    problems: tuple[StatsProblem, ...],
    *,
    verifier: Verifier,
    implementation: Implementation = FIXED,
) -> tuple[stats.StatsResult, set[str]]:
    result = stats.run_stats(implementation, problems=problems, verifier=verifier)
    return result, {s.group for s in result.statistics if s.rejected}


def test_the_groups_mix_greedy_temperature_each_truncation_alone_and_all_together() -> None:
    assert [group_label(g) for g in CONFIG.groups] == [
        "T=1",
        "greedy",
        "T=1 top-k 3",
        "T=1 top-p 0.8",
        "T=1 min-p 0.2",
        "T=0.8 top-k 6 top-p 0.9 min-p 0.1",
    ]


def test_the_exact_law_of_a_truncated_group_is_zero_off_what_the_request_keeps(
    problems: tuple[StatsProblem, ...],
) -> None:
    law = problems[0].transition["vanilla"]  # [G, V, V]
    top_k_group = CONFIG.groups.index(DEFAULT_TRUNCATED[0])
    assert ((law[top_k_group] > 0).sum(-1) == 3).all()  # top-k 3: three tokens per row
    torch.testing.assert_close(law.sum(-1), torch.ones(law.shape[:2], dtype=torch.float64))


@pytest.mark.parametrize(
    ("verifier", "killed_in"),
    [
        pytest.param(DropsMinP(), {MIN_P, MIXED}, id="drops-min-p"),
        pytest.param(DropsTopP(), {TOP_P, MIXED}, id="drops-top-p"),
        pytest.param(TopPOnDraftOnly(), {TOP_P, MIXED}, id="top-p-on-draft-only"),
        pytest.param(TopKOverDraftSet(), {TOP_K, MIXED}, id="top-k-over-draft-set"),
        pytest.param(ShuffledRowParams(), {"T=1", TOP_K, TOP_P, MIN_P, MIXED}, id="shuffled"),
    ],
)
def test_each_planted_verifier_defect_is_rejected_in_the_groups_it_breaks(
    problems: tuple[StatsProblem, ...], verifier: Verifier, killed_in: set[str]
) -> None:
    result, rejected = _rejected_groups(problems, verifier=verifier)
    assert result.rejected
    assert killed_in <= rejected


def test_a_tie_at_the_top_p_boundary_broken_highest_id_first_is_rejected(
    tied_problems: tuple[StatsProblem, ...],
) -> None:
    result, rejected = _rejected_groups(tied_problems, verifier=TopPTieHighestIdFirst())
    assert result.rejected and TOP_P in rejected
    under_chain, _ = _rejected_groups(tied_problems, verifier=CHAIN_VERIFIER)
    assert under_chain.passed  # the ties themselves are no alarm


def test_fixed_drafting_from_its_untruncated_law_passes_and_legacy_is_rejected(
    problems: tuple[StatsProblem, ...],
) -> None:
    fixed, _ = _rejected_groups(problems, verifier=CHAIN_VERIFIER)
    assert fixed.passed
    legacy, rejected = _rejected_groups(problems, verifier=CHAIN_VERIFIER, implementation=LEGACY)
    assert legacy.rejected and {TOP_K, TOP_P, MIXED} <= rejected


def test_a_drafter_truncating_its_own_q_with_its_own_top_k_passes_every_check(
    problems: tuple[StatsProblem, ...],
) -> None:
    own = Implementation("own-top-k", OwnTopKDrafter, "test:own-top-k")
    result, rejected = _rejected_groups(problems, verifier=CHAIN_VERIFIER, implementation=own)
    assert result.passed and not rejected
    assert result.held_calls.calls > 0 and not result.held_calls.findings


@pytest.mark.parametrize(
    ("sampler", "killed_by"),
    [
        pytest.param(OwnTopKWrittenOnly, "support", id="declared-but-drafts-the-whole-q"),
        pytest.param(UndeclaredOwnTopK, "outputs_written", id="truncates-undeclared"),
    ],
)
def test_the_per_call_checks_compare_what_the_drafter_truncated_with_what_it_declares(
    problems: tuple[StatsProblem, ...], sampler: type, killed_by: str
) -> None:
    implementation = Implementation(sampler.__name__, sampler, f"test:{sampler.__name__}")
    result = stats.run_stats(implementation, problems=problems, verifier=CHAIN_VERIFIER)
    assert not result.passed
    assert killed_by in {f.check for f in result.held_calls.findings}


def test_a_verifier_that_applies_no_truncation_is_cut_to_the_temperature_groups() -> None:
    scope = scope_under(CONFIG, verifier=BLOCKWISE_REJECTION)
    assert scope.config is not None and scope.config.truncated == ()
    assert [c.truncated for c in scope.cuts] == [False]
    assert scope_under(CONFIG, verifier=CHAIN_VERIFIER).config == CONFIG


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (ParameterSet(1.0, top_p=0.0), r"truncated: top_ps must be in \(0, 1\]"),
        (ParameterSet(1.0, min_p=1.0), r"truncated: min_ps must be in \[0, 1\)"),
        (ParameterSet(1.0, top_k=-2), r"truncated: top_ks must be integers >= 0"),
        (ParameterSet(float("nan")), r"truncated: temperatures must be >= 0 and not NaN"),
    ],
)
def test_a_truncated_group_outside_its_range_is_refused_on_one_line(
    bad: ParameterSet, message: str
) -> None:
    with pytest.raises(StatsError, match=message):
        StatsConfig(truncated=(bad,))


@pytest.mark.parametrize(
    ("sampler", "failing"),
    [
        pytest.param(OwnTopKDrafter, set(), id="own-top-k"),
        pytest.param(UndeclaredOwnTopK, {"outputs_written", "teacher_forcing"}, id="undeclared"),
    ],
)
def test_the_matrix_checks_read_a_drafters_declared_top_k(sampler: type, failing: set) -> None:
    case = make_case(bs=4, gamma=4, vocab_size=64, hidden_size=16, markov_rank=8, seed=11)
    run = run_case(case, [Implementation("own", sampler, f"test:{sampler.__name__}")])
    checks = evaluate_run(run, require_observable=False).checks["own"]
    assert {c.name for c in checks if c.failed} == failing, [(c.name, c.detail) for c in checks]
