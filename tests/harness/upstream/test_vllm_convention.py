"""vLLM 0.33's DSpark speculator on its own contract: every check means the same.

The package's ``DSparkSpeculator`` (``--impl NAME=vllm``, dense and top-K) is lossless
on vanilla cases, with the full and a reduced draft vocabulary, and not drop-in for a
named reason; a case its hooks cannot express is not run and says so; each planted
vLLM-shaped defect fails the check aimed at it, and a correct reduced-vocabulary
sampler of another design passes. The spec parsing tests need no vLLM.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from harness.case import Case, build_inputs, make_case
from harness.pipeline.check_result import Tier
from harness.pipeline.checks import tier_of
from harness.pipeline.compare import evaluate_run
from harness.pipeline.life import MIN_REPLAYS
from harness.pipeline.runner import ImplResult, run_case
from harness.plugins.errors import ImplementationError
from harness.plugins.implementations import Implementation, parse_impl_spec
from harness.upstream.dispatch import build_for_case, convention_of, provenance
from harness.upstream.loaders import vllm_loader
from harness.upstream.loaders.vllm_loader import VllmPath, parse_vllm_variant
from harness.upstream.vllm_convention import VLLM_0_33

SHAPE = {"bs": 4, "gamma": 4, "vocab_size": 64, "hidden_size": 16, "markov_rank": 8}
MIXED = (False, True, False, False)  # one greedy row among sampled ones
BUCKETED = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, max_bs=6, seed=15)
LIFE = make_case(**SHAPE, greedy_rows=MIXED, max_bs=6, replays=MIN_REPLAYS, seed=21)
NO_ANCHOR = make_case(**SHAPE, greedy_rows=MIXED, sample_from_anchor=False, seed=17)
GREEDY_FOLD = make_case(**SHAPE, greedy_rows=(True,) * 4, folded_sampling=False, seed=13)
GATED = make_case(**SHAPE, head_kind="gated", seed=11)
# A reduced draft vocabulary of 24 of the 64 target ids (drawn from the case seed).
REDUCED = make_case(
    **SHAPE, greedy_rows=MIXED, max_bs=6, draft_vocab=24, replays=MIN_REPLAYS, seed=15
)
REDUCED_GREEDY_FOLD = GREEDY_FOLD.with_changes(draft_vocab=24)
# Every id the double-mapping defect samples on this case lies below its draft vocabulary
# size (56), so the second lookup reads inside the map: the defect is silent there.
IN_RANGE = make_case(
    bs=2, gamma=3, vocab_size=64, hidden_size=16, markov_rank=8, max_bs=3, draft_vocab=56, seed=41
)
# Drop-in checks a correct vLLM sampler fails for a named reason: its noise is a
# counter-based hash, not the reference's exponential_ draws.
NOT_DROP_IN = frozenset({"noise_budget", "matches_reference", "life_drop_in"})


def _run(case: Case, implementation: Implementation) -> tuple[ImplResult, dict[str, str]]:
    run = run_case(case, [implementation])
    checks = evaluate_run(run, require_observable=False).checks[implementation.name]
    return run.results[implementation.name], {c.name: c.status for c in checks}


@pytest.fixture(scope="module")
def defects() -> ModuleType:
    from tests.plugins import vllm_defects  # imports the installed package

    return vllm_defects


# -- spec parsing: no vLLM needed ----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("", VllmPath()),
        ("dense", VllmPath()),
        ("topk=8", VllmPath(topk=8)),
        ("unfused", VllmPath(fused_bias=False)),
    ],
)
def test_vllm_variants_parse(text: str, path: VllmPath) -> None:
    assert parse_vllm_variant(text) == path


@pytest.mark.parametrize("spec", ["v=vllm:topk=0", "v=vllm:topk=-1", "v=vllm:sparse"])
def test_bad_vllm_variant_names_the_forms(spec: str) -> None:
    with pytest.raises(ImplementationError, match=r"NAME=vllm:topk=K"):
        parse_impl_spec(spec)


def test_missing_vllm_says_why_in_one_line() -> None:
    reason = vllm_loader.unavailable_reason()
    if reason is None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ImplementationError, match="vllm") as raised:
        parse_impl_spec("v=vllm")
    assert "\n" not in str(raised.value)


# -- the package's speculator ----------------------------------------------------------------
@pytest.mark.vllm
def test_impl_vllm_is_the_package_speculator_in_its_own_convention() -> None:
    dense, topk = parse_impl_spec("v=vllm"), parse_impl_spec("k=vllm:topk=8")
    assert dense.sampler_class.__module__ == vllm_loader.SPECULATOR_MODULE
    assert topk.sampler_class.__mro__[1] is dense.sampler_class  # only K is ours
    for implementation in (dense, topk):
        assert convention_of(implementation.sampler_class) is VLLM_0_33
        assert provenance(implementation)["convention"] == "vllm-0.33"


@pytest.mark.vllm
@pytest.mark.parametrize("spec", ["v=vllm", "k=vllm:topk=8"])
@pytest.mark.parametrize(
    "case",
    [BUCKETED, LIFE, NO_ANCHOR, GREEDY_FOLD, REDUCED, REDUCED_GREEDY_FOLD],
    ids=lambda c: c.label(),
)
def test_vllm_is_lossless_and_not_drop_in_for_a_named_reason(spec: str, case: Case) -> None:
    result, statuses = _run(case, parse_impl_spec(spec))
    assert result.error is None
    failed = {name for name, status in statuses.items() if status == "fail"}
    assert failed <= NOT_DROP_IN, statuses
    if case.folded_sampling:
        assert statuses["teacher_forcing"] == "pass"
        assert statuses["noise_replay"] == "pass"  # the declared positions replay
        assert statuses["noise_budget"] == "fail"
    else:
        assert statuses["greedy_consistency"] == "pass"
    if case.replays:
        assert statuses["life_replays"] == statuses["life_fresh_noise"] == "pass"
    if case.max_bs > case.bs:
        assert statuses["no_writes_outside_batch"] == "pass"


@pytest.mark.vllm
def test_top_k_keeps_only_its_candidates() -> None:
    result, _ = _run(BUCKETED, parse_impl_spec("k=vllm:topk=8"))
    assert result.corrected is not None and result.candidates is not None
    assert result.candidates.sum(dim=-1).eq(8).all()
    finite = result.corrected.isfinite()
    assert (finite == result.candidates).all()


@pytest.mark.vllm
@pytest.mark.parametrize("case", [REDUCED, REDUCED_GREEDY_FOLD], ids=lambda c: c.label())
def test_a_reduced_vocabulary_runs_through_the_package_scatter_and_map(case: Case) -> None:
    """Draft-width hooks; ``_d2t_scatter_index`` and ``_draft_scatter_buf`` as vLLM's
    ``load_draft_model`` sets them (sampling only), and the package's own scatter fills
    exactly the draft vocabulary's target columns; every token is a draft-vocabulary id."""
    speculator_class = parse_impl_spec("v=vllm").sampler_class
    inputs = build_inputs(case)
    built = build_for_case(speculator_class, case=case, inputs=inputs)
    speculator, drafter = built.sampler, built.model
    ids = inputs.model.draft_vocab_ids
    assert ids is not None
    assert torch.equal(drafter.map_draft_to_target(torch.arange(ids.numel())), ids)
    assert drafter.compute_draft_logits(inputs.hidden_states).shape[-1] == ids.numel()
    built.stage_sampling_params(bs=case.bs, sampling_info=inputs.sampling_info)
    with torch.inference_mode():
        built(inputs.hidden_states, inputs.input_ids)
    tokens = speculator.draft_tokens[: case.bs]
    assert bool(torch.isin(tokens, ids).all()), tokens
    if not case.folded_sampling:  # the greedy path maps the argmax; no scatter
        assert speculator._d2t_scatter_index is None and speculator._draft_scatter_buf is None
        return
    assert torch.equal(speculator._d2t_scatter_index, ids)
    written = speculator._draft_scatter_buf[: case.bs].isfinite()
    assert bool(written[:, ids].all()) and int(written.sum()) == case.bs * ids.numel()


@pytest.mark.vllm
def test_a_top_k_wider_than_the_draft_vocabulary_is_not_run() -> None:
    result, statuses = _run(REDUCED.with_changes(draft_vocab=6), parse_impl_spec("k=vllm:topk=8"))
    assert result.outside_contract is not None and "K=8" in result.outside_contract
    assert statuses == {"ran": "skip"}


@pytest.mark.vllm
def test_a_head_its_hooks_cannot_express_is_not_run() -> None:
    result, statuses = _run(GATED, parse_impl_spec("v=vllm"))
    assert result.outside_contract is not None and "gated" in result.outside_contract
    assert statuses == {"ran": "skip"}


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("defect", "case", "target"),
    [
        ("CacheFromSecondWalk", BUCKETED, "teacher_forcing"),
        ("PositionsNotAdvanced", BUCKETED, "fresh_noise"),
        ("PositionsNotAdvanced", LIFE, "life_replays"),
    ],
)
def test_planted_vllm_defect_fails_its_check(
    defects: ModuleType, defect: str, case: Case, target: str
) -> None:
    implementation = Implementation(defect, getattr(defects, defect), f"test:{defect}")
    assert convention_of(implementation.sampler_class) is VLLM_0_33
    _, statuses = _run(case, implementation)
    assert statuses[target] == "fail", statuses
    assert statuses["ran"] == "pass"


def _lossless_failures(statuses: dict[str, str]) -> set[str]:
    return {n for n, status in statuses.items() if status == "fail" and tier_of(n) is Tier.LOSSLESS}


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("case", "target"),
    [(IN_RANGE, "noise_replay"), (REDUCED, "ran")],
    ids=["silent", "lookup-past-the-map"],
)
def test_the_draft_map_applied_twice_fails_exactly_its_check(
    defects: ModuleType, case: Case, target: str
) -> None:
    """Silent where every sampled id is below the draft vocabulary size (the tokens are
    draft-vocabulary ids, the cache is right, only the replay shows the swap); where a
    sampled id is not, the second lookup reads past the map and raises."""
    implementation = Implementation("twice", defects.DraftMapAppliedTwice, "test:twice")
    result, statuses = _run(case, implementation)
    assert _lossless_failures(statuses) == {target}, statuses
    if target == "ran":
        assert result.error is not None and "out of bounds" in result.error.summary()
    else:
        assert statuses["teacher_forcing"] == statuses["support"] == "pass"


@pytest.mark.vllm
@pytest.mark.parametrize("case", [IN_RANGE, REDUCED, REDUCED_GREEDY_FOLD], ids=lambda c: c.label())
def test_a_correct_reduced_vocabulary_sampler_of_another_design_passes(
    defects: ModuleType, case: Case
) -> None:
    implementation = Implementation("target", defects.TargetSpaceSampling, "test:target")
    _, statuses = _run(case, implementation)
    assert not _lossless_failures(statuses), statuses
    replayed = "noise_replay" if case.folded_sampling else "greedy_consistency"
    assert statuses[replayed] == "pass"
