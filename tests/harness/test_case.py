"""Cases are plain values: validated, JSON round-trip, and they mean the same numbers."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from harness.case import CASE_SCHEMA_VERSION, Case, CaseError, build_inputs, make_case
from harness.testing import case_strategy

# The whole value space: vocabulary 1, any temperature, every dtype and flag, padding.
ANY_CASE = case_strategy(
    max_bs=8,
    max_gamma=8,
    vocab_sizes=(1, 3000),
    max_hidden_size=64,
    max_markov_rank=16,
    dtypes=("float32", "bfloat16", "float16"),
    temperatures=st.floats(0, 4),
    max_spare_slots=4,
    max_vocab_padding=3,
    max_seed=2**31,
    every_flag=True,
    draft_vocab=True,
)


@given(ANY_CASE)
def test_case_round_trips_through_json(case: Case) -> None:
    text = json.dumps(case.to_json_dict())
    assert Case.from_json_dict(json.loads(text)) == case


def test_case_file_round_trips(tmp_path) -> None:
    case = make_case(bs=2, gamma=3, vocab_size=11, hidden_size=4, markov_rank=2, seed=9)
    case.save(tmp_path / "case.json")
    assert Case.load(tmp_path / "case.json") == case


def test_newer_schema_is_refused_with_a_clear_message() -> None:
    data = make_case(bs=1, gamma=1, vocab_size=2, hidden_size=1, markov_rank=1).to_json_dict()
    data["schema_version"] = CASE_SCHEMA_VERSION + 1
    with pytest.raises(CaseError, match="newer than this harness supports"):
        Case.from_json_dict(data)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("schema"), "not a case"),
        (lambda d: d.update(schema_version="1"), "schema_version must be an integer"),
        (lambda d: d.pop("case"), "no 'case' object"),
        (lambda d: d["case"].update(colour="red"), "unknown case fields"),
        (lambda d: d["case"].pop("gamma"), "malformed case"),
        (lambda d: d["case"].update(gamma=0), "gamma must be a positive integer"),
        (lambda d: d["case"].update(head_kind="lstm"), "head_kind must be one of"),
        (lambda d: d["case"].update(dtype="int8"), "dtype must be one of"),
        (lambda d: d["case"].update(draft_vocab=-1), r"draft_vocab must be 0 .* got -1"),
        (lambda d: d["case"].update(draft_vocab=2), r"draft_vocab must be 0 .*in 1\.\.1 .*got 2"),
        (lambda d: d["case"].update(temperatures=[1.0, 1.0]), "one entry per row"),
        (lambda d: d["case"].update(temperatures=[float("nan")]), "finite and >= 0"),
        (lambda d: d["case"].update(max_bs=1, bs=2), r"max_bs \(1\) must be >= bs"),
        (lambda d: d["case"].update(device="tpu"), "device must be"),
    ],
)
def test_malformed_case_is_refused_naming_the_problem(mutate, message) -> None:
    data = make_case(bs=1, gamma=1, vocab_size=2, hidden_size=1, markov_rank=1).to_json_dict()
    mutate(data)
    with pytest.raises(CaseError, match=message):
        Case.from_json_dict(data)


def test_unreadable_case_file_is_a_case_error(tmp_path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CaseError, match="not valid JSON"):
        Case.load(tmp_path / "bad.json")
    with pytest.raises(CaseError, match="cannot read"):
        Case.load(tmp_path / "missing.json")


def test_inputs_are_a_function_of_the_seed_alone() -> None:
    case = make_case(bs=2, gamma=3, vocab_size=17, hidden_size=8, markov_rank=4, seed=5)
    torch.manual_seed(123)
    first = build_inputs(case)
    torch.manual_seed(456)
    second = build_inputs(case)
    assert torch.equal(first.hidden_states, second.hidden_states)
    assert torch.equal(first.input_ids, second.input_ids)
    for a, b in zip(first.model.parameters(), second.model.parameters(), strict=True):
        assert torch.equal(a, b)
    other = build_inputs(case.with_changes(seed=6))
    assert not torch.equal(first.hidden_states, other.hidden_states)


def test_greedy_rows_are_staged_with_top_k_one() -> None:
    case = make_case(
        bs=3, gamma=1, vocab_size=5, hidden_size=2, markov_rank=1, greedy_rows=(True, False, True)
    )
    top_ks = build_inputs(case).sampling_info.top_ks
    assert (top_ks <= 1).tolist() == [True, False, True]


STRICT_FIELD_PROBES = [
    ("device", 5, r"device must be 'cpu' or 'cuda\[:N\]' \(a string\), got 5"),
    ("device", "cuda:x", r"device must be 'cpu' or 'cuda\[:N\]', got 'cuda:x'"),
    ("seed", "abc", r"seed must be an integer, got 'abc'"),
    ("seed", 1.5, r"seed must be an integer, got 1.5"),
    ("seed", 10**30, r"seed must be an integer in \[0, 2\^63\), got 10{30}"),
    ("seed", -1, r"seed must be an integer in \[0, 2\^63\)"),
    ("seed", True, r"seed must be an integer, got True"),
    ("vocab_padding", 1.5, r"vocab_padding must be an integer, got 1.5"),
    ("draft_vocab", 1.5, r"draft_vocab must be an integer, got 1.5"),
    ("max_bs", 2.5, r"max_bs must be an integer, got 2.5"),
    ("name", {}, r"name must be a string, got \{\}"),
    ("temperatures", "ab", r"temperatures must be a list of numbers, got 'ab'"),
    ("greedy_rows", ["false"], r"greedy_rows must be a list of JSON booleans, got \['false'\]"),
    ("folded_sampling", "no", r"folded_sampling must be a JSON boolean .*got 'no'"),
    ("confidence", "false", r"confidence must be a JSON boolean .*got 'false'"),
    ("sample_from_anchor", 1, r"sample_from_anchor must be a JSON boolean .*got 1"),
    ("fused_greedy", None, r"fused_greedy must be a JSON boolean .*got None"),
]


@pytest.mark.parametrize(("field", "value", "message"), STRICT_FIELD_PROBES)
def test_case_file_fields_are_strictly_typed_and_the_file_is_named(
    field: str, value: object, message: str, tmp_path
) -> None:
    data = make_case(bs=1, gamma=1, vocab_size=2, hidden_size=1, markov_rank=1).to_json_dict()
    data["case"][field] = value
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(data))
    with pytest.raises(CaseError, match=rf"^{path}: {message}"):
        Case.load(path)


def test_a_boolean_schema_version_is_refused() -> None:
    data = make_case(bs=1, gamma=1, vocab_size=2, hidden_size=1, markov_rank=1).to_json_dict()
    data["schema_version"] = True
    with pytest.raises(CaseError, match="schema_version must be an integer, got True"):
        Case.from_json_dict(data)


def test_a_non_utf8_case_file_is_refused_naming_the_file(tmp_path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes('{"schema": "caf\xe9"}'.encode("latin-1"))
    with pytest.raises(CaseError, match=rf"^{path}: not UTF-8 text"):
        Case.load(path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_case_file_naming_a_device_this_machine_lacks_is_refused(tmp_path) -> None:
    case = make_case(bs=1, gamma=1, vocab_size=2, hidden_size=1, markov_rank=1, device="cuda")
    case.save(tmp_path / "gpu.json")
    with pytest.raises(CaseError, match="device cuda asked for, but no CUDA device is available"):
        Case.load(tmp_path / "gpu.json")


def test_a_reduced_draft_vocabulary_shows_in_the_label_only_when_set() -> None:
    case = make_case(bs=1, gamma=2, vocab_size=16, hidden_size=4, markov_rank=2, seed=3)
    assert "Vd=" not in case.label()
    reduced = case.with_changes(draft_vocab=5)
    assert reduced.label() == case.label() + " Vd=5"
    assert reduced != case  # a different run


def test_a_reduced_draft_vocabulary_is_a_seeded_subset_of_the_same_drafter() -> None:
    """The draft vocabulary comes from the case seed; the weights are those of the
    full-vocabulary case, and the base logits are theirs on the subset, -inf elsewhere."""
    full = make_case(bs=2, gamma=3, vocab_size=40, hidden_size=8, markov_rank=4, seed=7)
    reduced = full.with_changes(draft_vocab=12)
    model, again = build_inputs(reduced).model, build_inputs(reduced).model
    ids = model.draft_vocab_ids
    assert ids is not None and again.draft_vocab_ids is not None
    assert torch.equal(ids, again.draft_vocab_ids)
    assert ids.numel() == 12 and bool((ids[1:] > ids[:-1]).all())
    other = build_inputs(reduced.with_changes(seed=8)).model.draft_vocab_ids
    assert other is not None and not torch.equal(ids, other)
    full_inputs = build_inputs(full)
    assert full_inputs.model.draft_vocab_ids is None
    assert torch.equal(model.lm_head.weight, full_inputs.model.lm_head.weight)
    hidden = full_inputs.hidden_states
    base, _ = model.compute_base_logits(hidden)
    full_base, _ = full_inputs.model.compute_base_logits(hidden)
    assert torch.equal(base[:, ids], full_base[:, ids])
    outside = torch.ones(40, dtype=torch.bool).index_fill_(0, ids, False)
    assert bool((base[:, outside] == float("-inf")).all())
