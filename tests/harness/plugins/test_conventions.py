"""Calling conventions as objects: each builds a sampler and reads its outputs, and the
runner speaks only to what it builds (ours and the PR-era server's here; sglang 0.5.23's
in ``tests/harness/upstream/test_upstream_contract.py``)."""

from __future__ import annotations

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import build_inputs, make_case
from harness.plugins.conventions import (
    TOKEN_SENTINEL,
    ConventionName,
    OutputError,
)
from harness.upstream.dispatch import build_for_case, convention_of
from tests.harness.plugins.test_plugins_construct import ServerStyleSampler
from tests.plugins.broken_samplers import WrongShapeSampler

CASE = make_case(
    bs=2, gamma=3, vocab_size=40, hidden_size=8, markov_rank=4, max_bs=3, confidence=True, seed=5
)


def test_the_convention_is_read_from_the_class() -> None:
    assert convention_of(FixedSampler).name is ConventionName.HARNESS
    assert convention_of(ServerStyleSampler).name is ConventionName.SERVER


def test_poison_then_read_gives_the_live_batch_and_no_outside_write() -> None:
    inputs = build_inputs(CASE)
    built = build_for_case(FixedSampler, case=CASE, inputs=inputs)
    built.poison()
    assert bool((built.sampler.out == TOKEN_SENTINEL).all())
    assert bool(built.sampler.corrected_out.isnan().all())
    built.stage_sampling_params(bs=CASE.bs, sampling_info=inputs.sampling_info)
    built(inputs.hidden_states, inputs.input_ids)
    outputs = built.read(CASE)
    assert outputs.tokens.shape == (CASE.bs, CASE.gamma)
    assert outputs.step_logits is not None
    assert outputs.step_logits.shape == (CASE.bs, CASE.gamma, CASE.vocab_size)
    assert outputs.confidence is not None and outputs.confidence.shape == (CASE.bs, CASE.gamma)
    assert (outputs.staged, outputs.noise_counter, outputs.verify_ids) == (None, None, None)
    assert built.outside_writes(CASE) == {}
    built.sampler.out[-1] = 0  # a write into the next graph bucket's rows
    built.sampler.confidence_out[-1, 0] = 0.5
    assert built.outside_writes(CASE) == {"out": 1, "confidence_out": 1}


def test_a_wrong_output_buffer_is_an_output_error_naming_it() -> None:
    inputs = build_inputs(CASE)
    built = build_for_case(WrongShapeSampler, case=CASE, inputs=inputs)
    built.stage_sampling_params(bs=CASE.bs, sampling_info=inputs.sampling_info)
    with torch.inference_mode():
        built(inputs.hidden_states, inputs.input_ids)
    with pytest.raises(OutputError, match="out must be an int64 vector"):
        built.read(CASE)
