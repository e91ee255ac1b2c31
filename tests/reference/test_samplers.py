"""The samplers under test, side by side: legacy (double walk), fixed (single walk) and the
reference oracle, each call run from the same RNG start.

Legacy's known failures are strict expectations here: they are what the fix removes.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import torch

import fixed
import legacy
from harness.pipeline.observe import EagerDispatchMode
from reference import (
    HEAD_KINDS,
    DraftSamplerBase,
    LinearProbeConfidence,
    ReferenceDraftSampler,
    SamplingInfo,
    ToyDraftModel,
    greedy_step,
    make_markov_head,
    make_toy_draft_model,
    prepare_block,
    query_rows_per_request,
    teacher_forced_logits,
)
from tests.helpers import REPO_ROOT

VOCAB, HIDDEN, RANK = 17, 8, 4
GAMMA, MAX_BS, BS = 4, 6, 5  # GAMMA divides HIDDEN: legacy's pass-1 view does not raise
SAMPLED_TOP_K = 1 << 30
# rows 0 and 3 greedy (top_k 1), the others sampled; T = 0 on a greedy row as servers send it
MIXED = SamplingInfo.from_lists(
    temperatures=[0.0, 0.8, 1.0, 1.0, 1.3],
    top_ks=[1, SAMPLED_TOP_K, SAMPLED_TOP_K, 1, SAMPLED_TOP_K],
)
GREEDY_ROWS = torch.tensor([True, False, False, True, False])
ALL_GREEDY = SamplingInfo.from_lists(temperatures=[0.7] * BS, top_ks=[1] * BS)

SamplerClass = type[DraftSamplerBase]
IMPLEMENTATIONS: dict[str, SamplerClass] = {
    "legacy": legacy.DsparkDraftSampler,
    "fixed": fixed.DsparkDraftSampler,
    "reference": ReferenceDraftSampler,
}


def _model(
    kind: str = "vanilla",
    *,
    sample_from_anchor: bool = True,
    hidden_size: int = HIDDEN,
    dtype: torch.dtype = torch.float32,
) -> ToyDraftModel:
    return make_toy_draft_model(
        vocab_size=VOCAB,
        hidden_size=hidden_size,
        markov_rank=RANK,
        head_kind=kind,
        sample_from_anchor=sample_from_anchor,
        seed=0,
        dtype=dtype,
    )


def _call_inputs(
    model: ToyDraftModel, *, gamma: int = GAMMA, bs: int = BS, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded hidden_states ``[bs*Q, H]`` and input_ids ``[bs*Q]`` for the model's layout."""
    q = query_rows_per_request(gamma=gamma, sample_from_anchor=model.sample_from_anchor)
    generator = torch.Generator().manual_seed(seed)
    hidden_states = torch.randn(bs * q, model.hidden_size, generator=generator).to(model.dtype)
    input_ids = torch.randint(VOCAB, (bs * q,), generator=generator)
    return hidden_states, input_ids


def _run(
    impl: str,
    model: ToyDraftModel,
    *,
    sampling_info: SamplingInfo | None,
    gamma: int = GAMMA,
    bs: int = BS,
    rng_seed: int = 1234,
    **options: Any,
) -> DraftSamplerBase:
    """Build a sampler, stage the parameters and make one call from a fixed RNG start."""
    sampler = IMPLEMENTATIONS[impl](
        model=model, gamma=gamma, max_bs=MAX_BS, device="cpu", **options
    )
    sampler.stage_sampling_params(bs=bs, sampling_info=sampling_info)
    hidden_states, input_ids = _call_inputs(model, gamma=gamma, bs=bs)
    with torch.random.fork_rng():
        torch.manual_seed(rng_seed)
        sampler(hidden_states, input_ids)
    return sampler


def _tokens(sampler: DraftSamplerBase, *, bs: int = BS) -> torch.Tensor:
    return sampler.out[: bs * sampler.gamma].view(bs, sampler.gamma)  # [bs, gamma]


def _corrected(sampler: DraftSamplerBase, *, bs: int = BS) -> torch.Tensor:
    assert sampler.corrected_out is not None
    return sampler.corrected_out[: bs * sampler.gamma].view(bs, sampler.gamma, -1)  # [bs, g, V]


def _rebuilt_corrected(sampler: DraftSamplerBase, *, bs: int = BS) -> torch.Tensor:
    """Teacher-forced corrected logits ``[bs, gamma, V]`` from the sampler's emitted tokens."""
    hidden_states, input_ids = _call_inputs(sampler.model, gamma=sampler.gamma, bs=bs)
    block = prepare_block(
        model=sampler.model,
        gamma=sampler.gamma,
        max_bs=MAX_BS,
        hidden_states=hidden_states,
        input_ids=input_ids,
    )
    return teacher_forced_logits(model=sampler.model, block=block, tokens=_tokens(sampler, bs=bs))


# -- the bug on sampled rows ----------------------------------------------------------------


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_legacy_and_fixed_emit_different_sampled_tokens_from_equal_corrected_logits(
    kind: str,
) -> None:
    model = _model(kind)
    old = _run("legacy", model, sampling_info=MIXED)
    new = _run("fixed", model, sampling_info=MIXED)
    assert torch.equal(_corrected(old), _corrected(new))
    assert torch.equal(_tokens(old)[GREEDY_ROWS], _tokens(new)[GREEDY_ROWS])
    assert not torch.equal(_tokens(old)[~GREEDY_ROWS], _tokens(new)[~GREEDY_ROWS])


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_fixed_corrected_logits_match_its_emitted_tokens(kind: str) -> None:
    new = _run("fixed", _model(kind), sampling_info=MIXED)
    assert torch.equal(_corrected(new), _rebuilt_corrected(new))


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_legacy_corrected_logits_do_not_match_its_emitted_tokens_after_step_zero(
    kind: str,
) -> None:
    old = _run("legacy", _model(kind), sampling_info=MIXED)
    corrected, rebuilt = _corrected(old), _rebuilt_corrected(old)
    assert torch.equal(corrected[:, 0], rebuilt[:, 0])  # both passes condition on the anchor
    assert torch.equal(corrected[GREEDY_ROWS], rebuilt[GREEDY_ROWS])
    assert not torch.equal(corrected[~GREEDY_ROWS, 1:], rebuilt[~GREEDY_ROWS, 1:])


# -- fixed is the oracle --------------------------------------------------------------------


@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("sample_from_anchor", [True, False])
@pytest.mark.parametrize(
    ("folded_sampling", "sampling_info"),
    [(True, MIXED), (True, None), (False, None)],
    ids=["folded-mixed", "folded-greedy", "unfolded"],
)
def test_fixed_equals_the_reference_sampler_bit_for_bit_in_float32(
    kind: str, sample_from_anchor: bool, folded_sampling: bool, sampling_info: SamplingInfo | None
) -> None:
    model = _model(kind, sample_from_anchor=sample_from_anchor)
    runs = [
        _run(impl, model, sampling_info=sampling_info, folded_sampling=folded_sampling)
        for impl in ("fixed", "reference")
    ]
    new, oracle = runs
    assert torch.equal(_tokens(new), _tokens(oracle))
    if folded_sampling:
        assert torch.equal(_corrected(new), _corrected(oracle))
    else:
        assert new.corrected_out is None and oracle.corrected_out is None


# -- noise draws ----------------------------------------------------------------------------


class _CountExponentialDraws(EagerDispatchMode):  # no torch._dynamo import
    """Counts in-place ``Exp(1)`` refills (``aten.exponential_``) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.draws = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ops.aten.exponential_.default:
            self.draws += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    ("impl", "folded_sampling", "draws"),
    [
        ("legacy", True, 2 * GAMMA),
        ("fixed", True, GAMMA),
        ("reference", True, GAMMA),
        ("legacy", False, 0),
        ("fixed", False, 0),
    ],
)
def test_noise_tensors_drawn_per_call(impl: str, folded_sampling: bool, draws: int) -> None:
    counter = _CountExponentialDraws()
    with counter:
        _run(impl, _model(), sampling_info=MIXED, folded_sampling=folded_sampling)
    assert counter.draws == draws


# -- greedy folds and the anchor-row layout -------------------------------------------------


@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("sampling_info", [None, ALL_GREEDY], ids=["no-info", "top-k-1"])
def test_all_greedy_fold_gives_identical_legacy_and_fixed_outputs(
    kind: str, sampling_info: SamplingInfo | None
) -> None:
    model = _model(kind)
    old = _run("legacy", model, sampling_info=sampling_info)
    new = _run("fixed", model, sampling_info=sampling_info)
    assert torch.equal(_tokens(old), _tokens(new))
    assert torch.equal(_corrected(old), _corrected(new))


@pytest.mark.parametrize("kind", ["gated", "rnn"])
def test_anchor_row_layout_with_a_hidden_state_head_crashes_legacy_but_not_fixed(
    kind: str,
) -> None:
    model = _model(kind, sample_from_anchor=False)
    with pytest.raises(ValueError, match="needs hidden_states of shape"):
        _run("legacy", model, sampling_info=MIXED)
    new = _run("fixed", model, sampling_info=MIXED)
    oracle = _run("reference", model, sampling_info=MIXED)
    assert torch.equal(_tokens(new), _tokens(oracle))
    assert torch.equal(_corrected(new), _rebuilt_corrected(new))


def test_anchor_row_layout_with_gamma_not_dividing_hidden_crashes_legacy_even_for_vanilla() -> None:
    gamma = 3
    assert HIDDEN % gamma != 0
    model = _model("vanilla", sample_from_anchor=False)
    with pytest.raises(RuntimeError, match=r"shape '\[5, 3, -1\]' is invalid"):
        _run("legacy", model, sampling_info=None, gamma=gamma)
    new = _run("fixed", model, sampling_info=None, gamma=gamma)
    oracle = _run("reference", model, sampling_info=None, gamma=gamma)
    assert torch.equal(_tokens(new), _tokens(oracle))


def test_anchor_row_layout_vanilla_with_gamma_dividing_hidden_agrees_in_a_greedy_fold() -> None:
    assert HIDDEN % GAMMA == 0
    model = _model("vanilla", sample_from_anchor=False)
    old = _run("legacy", model, sampling_info=ALL_GREEDY)
    new = _run("fixed", model, sampling_info=ALL_GREEDY)
    assert torch.equal(_tokens(old), _tokens(new))
    assert torch.equal(_corrected(old), _corrected(new))


# -- the fused greedy path ------------------------------------------------------------------


class _HeadSpy:
    """Wraps ``sample_block_greedy_fused`` and ``sample_block`` on one head instance."""

    def __init__(self, model: ToyDraftModel, monkeypatch: pytest.MonkeyPatch) -> None:
        head = model.markov_head
        self.fused_results: list[torch.Tensor | None] = []
        self.walk_samplers: list[object] = []
        fused, walk = head.sample_block_greedy_fused, head.sample_block

        def fused_spy(*args: Any, **kwargs: Any) -> torch.Tensor | None:
            result = fused(*args, **kwargs)
            self.fused_results.append(result)
            return result

        def walk_spy(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
            self.walk_samplers.append(kwargs["sampler"])
            return walk(*args, **kwargs)

        monkeypatch.setattr(head, "sample_block_greedy_fused", fused_spy)
        monkeypatch.setattr(head, "sample_block", walk_spy)


def _near_tie_bf16_model() -> ToyDraftModel:
    """V=2, bf16: base logits 256.0 for both tokens, step biases 0.5 vs 0.6. In fp32 token 1
    wins; the bf16 step logits both round to 256.0 and the loop's tie goes to token 0."""
    model = make_toy_draft_model(
        vocab_size=2,
        hidden_size=GAMMA,
        markov_rank=1,
        head_kind="vanilla",
        sample_from_anchor=True,
        seed=0,
        dtype=torch.bfloat16,
    )
    with torch.no_grad():
        model.lm_head.weight.fill_(64.0)  # base = 64 * sum(hidden) = 256 for hidden of ones
        model.markov_head.W1.weight.fill_(1.0)
        model.markov_head.W2.weight.copy_(torch.tensor([[0.5], [0.6]]))
    return model


def _fused_case(near_tie_bf16: bool) -> tuple[ToyDraftModel, torch.Tensor, torch.Tensor]:
    """(model, hidden_states [bs*gamma, H], input_ids [bs*gamma]) for the fused-flag tests."""
    if not near_tie_bf16:
        model = _model("vanilla")
        return (model, *_call_inputs(model))
    model = _near_tie_bf16_model()
    hidden_states = torch.ones(GAMMA, model.hidden_size, dtype=model.dtype)  # bs = 1
    return model, hidden_states, torch.zeros(GAMMA, dtype=torch.int64)


def _run_fused(
    impl: str, model: ToyDraftModel, hidden_states: torch.Tensor, input_ids: torch.Tensor
) -> DraftSamplerBase:
    """One call with the fused flag on (folded sampling off, so the fold is greedy)."""
    sampler = IMPLEMENTATIONS[impl](
        model=model,
        gamma=GAMMA,
        max_bs=MAX_BS,
        device="cpu",
        folded_sampling=False,
        fused_greedy=True,
    )
    sampler.stage_sampling_params(bs=input_ids.shape[0] // GAMMA, sampling_info=None)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        sampler(hidden_states, input_ids)
    return sampler


@pytest.mark.parametrize("near_tie_bf16", [False, True], ids=["float32", "bf16-near-tie"])
def test_legacy_computes_the_fused_greedy_tokens_and_emits_the_loops_instead(
    near_tie_bf16: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, hidden_states, input_ids = _fused_case(near_tie_bf16)
    bs = input_ids.shape[0] // GAMMA
    block = prepare_block(
        model=model, gamma=GAMMA, max_bs=MAX_BS, hidden_states=hidden_states, input_ids=input_ids
    )
    loop_tokens, _ = model.markov_head.sample_block(
        block.base_logits,
        first_prev_tokens=block.anchor_tokens,
        hidden_states=None,
        sampler=greedy_step,
    )
    spy = _HeadSpy(model, monkeypatch)
    old = _run_fused("legacy", model, hidden_states, input_ids)
    assert len(spy.fused_results) == 1 and spy.fused_results[0] is not None
    assert spy.walk_samplers == [greedy_step]  # pass 2 only, greedy
    assert torch.equal(_tokens(old, bs=bs), loop_tokens)
    if near_tie_bf16:
        assert not torch.equal(_tokens(old, bs=bs), spy.fused_results[0])  # thrown away


@pytest.mark.parametrize("near_tie_bf16", [False, True], ids=["float32", "bf16-near-tie"])
def test_fixed_emits_the_fused_greedy_tokens_and_runs_no_walk(
    near_tie_bf16: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, hidden_states, input_ids = _fused_case(near_tie_bf16)
    bs = input_ids.shape[0] // GAMMA
    spy = _HeadSpy(model, monkeypatch)
    new = _run_fused("fixed", model, hidden_states, input_ids)
    assert len(spy.fused_results) == 1 and spy.fused_results[0] is not None
    assert spy.walk_samplers == []
    assert torch.equal(_tokens(new, bs=bs), spy.fused_results[0])
    if near_tie_bf16:  # the fp32-correct argmax, which the loop misses
        assert torch.equal(_tokens(new, bs=bs), torch.ones(bs, GAMMA, dtype=torch.int64))


@pytest.mark.parametrize("impl", ["legacy", "fixed"])
@pytest.mark.parametrize("kind", ["gated", "rnn"])
def test_fused_flag_falls_back_to_the_greedy_walk_for_heads_without_a_fused_path(
    impl: str, kind: str
) -> None:
    model = _model(kind)
    flagged = _run(impl, model, sampling_info=None, folded_sampling=False, fused_greedy=True)
    plain = _run(impl, model, sampling_info=None, folded_sampling=False)
    assert torch.equal(_tokens(flagged), _tokens(plain))


# -- confidence -----------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["legacy", "fixed"])
@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_confidence_out_is_filled_with_probabilities_of_the_emitted_tokens(
    impl: str, kind: str
) -> None:
    model = _model(kind)
    confidence_fn = LinearProbeConfidence(markov_head=model.markov_head, seed=3)
    sampler = _run(impl, model, sampling_info=MIXED, confidence_fn=confidence_fn)
    assert sampler.confidence_out is not None
    assert sampler.confidence_out.shape == (MAX_BS, GAMMA)
    assert sampler.confidence_out.dtype == torch.float32
    confidence = sampler.confidence_out[:BS]
    assert bool(((confidence > 0) & (confidence < 1)).all())
    hidden_states, input_ids = _call_inputs(model)
    block = prepare_block(
        model=model, gamma=GAMMA, max_bs=MAX_BS, hidden_states=hidden_states, input_ids=input_ids
    )
    want = confidence_fn(block.sample_hidden, block.anchor_tokens, _tokens(sampler))
    assert torch.equal(confidence, want)


@pytest.mark.parametrize("impl", ["legacy", "fixed"])
def test_no_confidence_function_means_no_confidence_buffer(impl: str) -> None:
    assert _run(impl, _model(), sampling_info=MIXED).confidence_out is None


# -- bad constructor arguments --------------------------------------------------------------


@pytest.mark.parametrize("impl", ["legacy", "fixed"])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"gamma": 0}, "gamma must be a positive int", id="gamma-0"),
        pytest.param({"gamma": -2}, "gamma must be a positive int", id="gamma-negative"),
        pytest.param({"gamma": 2.0}, "gamma must be a positive int", id="gamma-float"),
        pytest.param({"max_bs": 0}, "max_bs must be a positive int", id="max-bs-0"),
        pytest.param({"max_bs": -1}, "max_bs must be a positive int", id="max-bs-negative"),
        pytest.param(
            {"out": torch.empty(MAX_BS * GAMMA + 1, dtype=torch.int64)},
            r"out must be int64 of shape \[max_bs\*gamma\] = \[24\]",
            id="out-wrong-shape",
        ),
        pytest.param(
            {"out": torch.empty(MAX_BS, GAMMA, dtype=torch.int64)},
            "out must be int64 of shape",
            id="out-2d",
        ),
        pytest.param(
            {"out": torch.empty(MAX_BS * GAMMA, dtype=torch.int32)},
            "out must be int64 of shape .* got torch.int32",
            id="out-wrong-dtype",
        ),
        pytest.param(
            {"race_backend": "cuda"},
            "race_backend must be 'auto', 'torch' or 'triton', got 'cuda'",
            id="unknown-race-backend",
        ),
    ],
)
def test_bad_constructor_arguments_raise_naming_the_problem(
    impl: str, options: dict[str, Any], message: str
) -> None:
    arguments: dict[str, Any] = {"model": _model(), "gamma": GAMMA, "max_bs": MAX_BS}
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        IMPLEMENTATIONS[impl](device="cpu", **arguments)


@pytest.mark.parametrize("impl", ["legacy", "fixed"])
def test_a_given_out_buffer_is_the_one_filled(impl: str) -> None:
    out = torch.full((MAX_BS * GAMMA,), -1, dtype=torch.int64)
    sampler = _run(impl, _model(), sampling_info=MIXED, out=out)
    assert sampler.out is out
    assert bool((out[: BS * GAMMA] >= 0).all())
    assert bool((out[BS * GAMMA :] == -1).all())  # rows past bs untouched


@pytest.mark.parametrize("impl", ["legacy", "fixed"])
def test_call_with_more_requests_than_max_bs_raises(impl: str) -> None:
    model = _model()
    sampler = IMPLEMENTATIONS[impl](model=model, gamma=GAMMA, max_bs=MAX_BS, device="cpu")
    hidden_states, input_ids = _call_inputs(model, bs=MAX_BS + 1)
    with pytest.raises(ValueError, match="exceeds max_bs"):
        sampler(hidden_states, input_ids)


def test_make_markov_head_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown Markov head kind 'mlp'"):
        make_markov_head("mlp", vocab_size=VOCAB, rank=RANK, hidden_size=HIDDEN, seed=0)
    with pytest.raises(ValueError, match="unknown Markov head kind 'mlp'"):
        _model("mlp")


@pytest.mark.parametrize("rank", [0, -4])
def test_make_markov_head_rejects_a_non_positive_rank(rank: int) -> None:
    with pytest.raises(ValueError, match="markov rank must be positive"):
        make_markov_head("vanilla", vocab_size=VOCAB, rank=rank, hidden_size=HIDDEN, seed=0)


# -- legacy and fixed differ only in __call__ -----------------------------------------------


def _module_without_docstring_imports_and_call_body(path: Path) -> str:
    """The module's AST dump with its docstring, its imports and the body of
    ``DsparkDraftSampler.__call__`` removed."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    tree.body = [node for node in body if not isinstance(node, ast.Import | ast.ImportFrom)]
    calls = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "DsparkDraftSampler"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "__call__"
    ]
    assert len(calls) == 1, f"{path}: expected one DsparkDraftSampler.__call__"
    calls[0].body = [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def test_legacy_and_fixed_modules_differ_only_in_the_body_of_call() -> None:
    legacy_module = _module_without_docstring_imports_and_call_body(
        REPO_ROOT / "legacy" / "dspark_sampler.py"
    )
    fixed_module = _module_without_docstring_imports_and_call_body(
        REPO_ROOT / "fixed" / "dspark_sampler.py"
    )
    assert legacy_module == fixed_module
