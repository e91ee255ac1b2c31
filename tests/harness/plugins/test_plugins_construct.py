"""Constructing samplers in their own calling convention, bound once per class.

Ours takes ``fused_greedy=``; the server's reads ``SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV``
in its constructor and may require ``tp_sync``. The binder passes only what a
constructor accepts, sets and restores the switch around a server-style
constructor, and refuses a class it cannot construct with one error that lists
every mismatch. The confidence probe answers both calling conventions.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from fixed import DsparkDraftSampler as FixedSampler
from harness.case import build_inputs, case_block, make_case
from harness.cli import main
from harness.plugins.construct import (
    FUSED_GREEDY_ENV,
    IdentityTpSync,
    bind_constructor,
    construct_sampler,
)
from harness.plugins.implementations import ImplementationError, parse_impl_spec
from harness.plugins.protocol import DraftSampler
from reference.sampler_base import DraftSamplerBase

AFTER_FIX = "after=tests/plugins/upstream/dspark_after_fix.py"
CASE = make_case(
    bs=2, gamma=3, vocab_size=32, hidden_size=8, markov_rank=4, confidence=True, seed=5
)


class EnvironmentReadingSampler(DraftSamplerBase):
    """Server convention without ``tp_sync``: the fused switch comes from the environment."""

    def __init__(self, *, model: Any, gamma: int, max_bs: int, device: Any) -> None:
        self.switch_seen = os.environ.get(FUSED_GREEDY_ENV)
        super().__init__(model=model, gamma=gamma, max_bs=max_bs, device=device)

    __call__ = FixedSampler.__call__


class KeywordsSampler(FixedSampler):
    """Takes ``**kwargs``: it gets our convention, all our keywords and no ``tp_sync``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)


class ServerStyleSampler(DraftSamplerBase):
    """Declares exactly the server's keywords, required ``tp_sync`` included."""

    def __init__(
        self,
        *,
        model: Any,
        gamma: int,
        max_bs: int,
        device: Any,
        tp_sync: Any,
        confidence_fn: Any = None,
        out: Any = None,
        folded_sampling: bool = True,
    ) -> None:
        self.tp_sync = tp_sync
        self.fused_greedy_from_env = os.environ.get(FUSED_GREEDY_ENV) == "1"
        super().__init__(
            model=model,
            gamma=gamma,
            max_bs=max_bs,
            device=device,
            confidence_fn=confidence_fn,
            out=out,
            folded_sampling=folded_sampling,
            fused_greedy=self.fused_greedy_from_env,
        )

    __call__ = FixedSampler.__call__


class Unconstructible:
    """Six mismatches at once: positional-only model, an unknown required one, no device,
    a staging method without ``sampling_info`` and no ``__call__``."""

    def __init__(self, model: Any, /, *, gamma: int, max_bs: int, tokenizer: Any) -> None:
        del model, gamma, max_bs, tokenizer

    def stage_sampling_params(self, *, bs: int) -> None:
        del bs


def _construct(sampler_class: type[Any], *, fused_greedy: bool = False) -> Any:
    inputs = build_inputs(CASE)
    return construct_sampler(
        bind_constructor(sampler_class),
        model=inputs.model,
        gamma=CASE.gamma,
        max_bs=CASE.max_bs,
        device=torch.device("cpu"),
        confidence_fn=inputs.confidence_fn,
        folded_sampling=False,
        fused_greedy=fused_greedy,
    )


def test_our_convention_gets_fused_greedy_as_an_argument() -> None:
    binding = bind_constructor(FixedSampler)
    assert binding.convention == "harness"
    assert "fused_greedy" in binding.keywords and "tp_sync" not in binding.keywords
    assert _construct(FixedSampler, fused_greedy=True).fused_greedy is True


@pytest.mark.parametrize("fused_greedy", [True, False])
def test_server_convention_reads_the_switch_set_around_construction(
    fused_greedy: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FUSED_GREEDY_ENV, "left-as-found")
    binding = bind_constructor(ServerStyleSampler)
    assert binding.convention == "server"
    assert "fused_greedy" not in binding.keywords
    sampler = _construct(ServerStyleSampler, fused_greedy=fused_greedy)
    assert sampler.fused_greedy_from_env is fused_greedy
    assert os.environ[FUSED_GREEDY_ENV] == "left-as-found"


def test_the_switch_is_removed_again_when_it_was_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FUSED_GREEDY_ENV, raising=False)
    sampler = _construct(EnvironmentReadingSampler, fused_greedy=True)
    assert sampler.switch_seen == "1"
    assert FUSED_GREEDY_ENV not in os.environ


def test_a_required_tp_sync_gets_the_identity_sync() -> None:
    sampler = _construct(ServerStyleSampler)
    assert isinstance(sampler.tp_sync, IdentityTpSync)
    values = torch.arange(3)
    assert sampler.tp_sync.sync("any site", values) is values


def test_a_var_keyword_constructor_gets_our_convention() -> None:
    binding = bind_constructor(KeywordsSampler)
    assert binding.convention == "harness"
    assert "tp_sync" not in binding.keywords  # never a surprise argument
    assert _construct(KeywordsSampler, fused_greedy=True).fused_greedy is True


def test_a_constructed_sampler_fits_the_protocol() -> None:
    assert isinstance(_construct(ServerStyleSampler), DraftSampler)
    implementation = parse_impl_spec(AFTER_FIX)
    assert isinstance(_construct(implementation.sampler_class), DraftSampler)


def test_an_unconstructible_class_is_one_error_listing_every_mismatch() -> None:
    with pytest.raises(ImplementationError) as raised:
        bind_constructor(Unconstructible, spec="--impl bad=x:Unconstructible")
    message = str(raised.value)
    assert len(message.splitlines()[0].split("; ")) == 6
    for expected in (
        "'model' is positional-only",
        "'tokenizer' is required",
        "keyword device=",
        "keyword model=",
        "stage_sampling_params does not take the keywords bs= and sampling_info=",
        "has no __call__(hidden_states, input_ids)",
        "expected DsparkDraftSampler(*, model, gamma, max_bs, device",
    ):
        assert expected in message


def test_the_cli_exits_2_with_every_mismatch_before_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "unconstructible.py"
    plugin.write_text(
        textwrap.dedent(
            """
            class DsparkDraftSampler:
                def __init__(self, *, model, gamma, max_bs, tokenizer):
                    pass
            """
        )
    )
    code = main(["compare", "--impl", f"bad={plugin}", "--quiet", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "'tokenizer' is required" in err
    assert "keyword device=" in err
    assert "has no stage_sampling_params" in err
    assert "has no __call__" in err
    assert not (tmp_path / "compare.cases.jsonl").exists()


def test_the_confidence_probe_answers_both_calling_conventions() -> None:
    inputs = build_inputs(CASE)
    block = case_block(CASE, inputs)
    assert inputs.confidence_fn is not None
    tokens = torch.randint(0, CASE.vocab_size, (CASE.bs, CASE.gamma), generator=torch.Generator())
    ours = inputs.confidence_fn(block.sample_hidden, block.anchor_tokens, tokens)
    theirs = inputs.confidence_fn(
        draft_hidden=block.sample_hidden,
        anchor_tokens=block.anchor_tokens,
        draft_tokens=tokens,
        confidence_tap=None,
    )
    assert torch.equal(ours, theirs)
