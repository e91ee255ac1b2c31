"""A drafter call that keeps no step logits (sglang 0.5.16's folded greedy call: its
block's logits are the point mass at each token) is held by the per-call checks to its
token ids alone, as a case's checks hold it (``harness.oracles.percall``); a call that
keeps them is held to every check, so the same placeholder logits fail it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from fixed import DsparkDraftSampler as Fixed
from harness.case import TOP_K_ALL
from harness.oracles.decode import built_draft_block, oracle_case, oracle_sampler
from harness.oracles.percall import CallChecker, kept_logits
from harness.oracles.problem import FAR, StatsConfig, build_problem
from reference import SamplingInfo
from reference.decode import DraftCall, draft_batch

CONFIG = StatsConfig(rows=6, head_kinds=("vanilla",), targets=(FAR,))


class KeptNone:
    """A built sampler whose last call kept no step logits (delegates the rest)."""

    def __init__(self, built: Any) -> None:
        self.built = built

    def __getattr__(self, name: str) -> Any:
        return getattr(self.built, name)

    def last_call_kept_logits(self) -> bool:
        return False


def _held(*, keeps: bool, token_shift: int = 0) -> list[str]:
    """The checks a greedy call with point-mass logits fails (``token_shift``: its first
    token moved out of the vocabulary)."""
    problem = build_problem(CONFIG)
    case = oracle_case(CONFIG, head_kind="vanilla", seed=0)
    greedy = SamplingInfo.from_lists(temperatures=[1.0] * case.bs, top_ks=[1] * case.bs)
    built = oracle_sampler(
        Fixed, problem=problem, head_kind="vanilla", case=case, sampling_info=greedy
    )
    anchors = torch.arange(case.bs) % CONFIG.vocab_size
    block = draft_batch(
        built,
        context=problem.context,
        anchors=anchors,
        sampling_info=greedy,
        read_draft=built_draft_block,
    )
    tokens = block.tokens.clone()
    tokens[0, 0] += token_shift
    point_mass = torch.full_like(block.step_logits, float("-inf")).scatter_(
        -1, block.tokens.unsqueeze(-1), 0.0
    )  # [bs, gamma, V]: what a folded call's block holds
    block = replace(block, tokens=tokens, step_logits=point_mass)
    checker = CallChecker(
        model=problem.drafters["vanilla"],
        built=built if keeps else KeptNone(built),  # type: ignore[arg-type]
        target=FAR.name,
        head="vanilla",
        verifier="chain",
    )
    rows = torch.arange(case.bs)
    checker(
        DraftCall(
            index=0,
            round=0,
            rows=rows,
            anchors=anchors,
            context=problem.context,
            sampling_info=greedy,
            block=block,
        )
    )
    return sorted({finding.check for finding in checker.held().findings})


def test_a_call_that_kept_no_logits_is_held_to_its_ids_alone() -> None:
    assert _held(keeps=False) == []
    assert _held(keeps=False, token_shift=CONFIG.vocab_size) == ["outputs_written"]


def test_the_same_placeholder_logits_fail_a_call_that_keeps_them() -> None:
    assert "outputs_written" in _held(keeps=True)


def test_only_a_sampler_that_says_so_kept_none() -> None:
    problem = build_problem(CONFIG)
    case = oracle_case(CONFIG, head_kind="vanilla", seed=0)
    staged = SamplingInfo.from_lists(temperatures=[1.0] * case.bs, top_ks=[TOP_K_ALL] * case.bs)
    built = oracle_sampler(
        Fixed, problem=problem, head_kind="vanilla", case=case, sampling_info=staged
    )
    assert kept_logits(built) and not kept_logits(KeptNone(built))  # type: ignore[arg-type]
