"""Bad input gets a clear error and nothing half-written (``docs/guarantees.md``).

A malformed sampler call raises a ``ValueError`` that names the argument and the
expected form, and leaves every static buffer byte for byte as it was; bad
constructor arguments and bad sampling parameters raise before anything is staged;
the command line refuses unknown values with exit status 2 and says why on stderr.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from _pytest.mark.structures import ParameterSet
from hypothesis import assume, given
from hypothesis import strategies as st

import fixed
import legacy
from harness.case import CASE_SCHEMA_VERSION, make_case
from reference import (
    LinearProbeConfidence,
    SamplingInfo,
    ToyDraftModel,
    make_toy_draft_model,
    query_rows_per_request,
)

VOCAB, RANK = 11, 4
SAMPLED_TOP_K = 1 << 30
Sampler = fixed.DsparkDraftSampler | legacy.DsparkDraftSampler
SAMPLERS: dict[str, type[Sampler]] = {
    "fixed": fixed.DsparkDraftSampler,
    "legacy": legacy.DsparkDraftSampler,
}
SENTINEL = {torch.int64: -7, torch.float32: -1234.5, torch.bool: True}


@dataclass(frozen=True)
class Setup:
    """A valid sampler configuration that a malformed call is then made against."""

    implementation: str
    gamma: int = 3
    max_bs: int = 3
    hidden_size: int = 6
    sample_from_anchor: bool = True
    folded_sampling: bool = True
    dtype: torch.dtype = torch.float32

    @property
    def query_rows(self) -> int:
        return query_rows_per_request(gamma=self.gamma, sample_from_anchor=self.sample_from_anchor)


@dataclass(frozen=True)
class BadCall:
    """A malformed ``(hidden_states, input_ids)`` and the error it must raise."""

    kind: str
    hidden_states: torch.Tensor
    input_ids: torch.Tensor
    message: str  # a regex naming the argument and the expected form


def _model(setup: Setup) -> ToyDraftModel:
    return make_toy_draft_model(
        vocab_size=VOCAB,
        hidden_size=setup.hidden_size,
        markov_rank=RANK,
        head_kind="vanilla",
        sample_from_anchor=setup.sample_from_anchor,
        seed=0,
        dtype=setup.dtype,
    )


def _sampler(setup: Setup) -> Sampler:
    model = _model(setup)
    sampler = SAMPLERS[setup.implementation](
        model=model,
        gamma=setup.gamma,
        max_bs=setup.max_bs,
        device="cpu",
        confidence_fn=LinearProbeConfidence(markov_head=model.markov_head, seed=1),
        folded_sampling=setup.folded_sampling,
    )
    bs = setup.max_bs
    sampler.stage_sampling_params(
        bs=bs,
        sampling_info=SamplingInfo.from_lists(
            temperatures=[0.5 + i for i in range(bs)],
            top_ks=[1 if i % 2 else SAMPLED_TOP_K for i in range(bs)],
        ),
    )
    return sampler


def _fill_with_sentinels(sampler: Sampler) -> dict[str, torch.Tensor]:
    """Fill every static buffer with a sentinel (whatever staging left in the sampling
    parameters stays) and return byte copies of all of them."""
    for name in ("out", "corrected_out", "confidence_out", "exp_noise"):
        buffer = getattr(sampler, name)
        if buffer is not None:
            buffer.fill_(SENTINEL.get(buffer.dtype, -1234.5))
    return _buffer_bytes(sampler)


def _buffer_bytes(sampler: Sampler) -> dict[str, torch.Tensor]:
    return {
        name: value.detach().contiguous().view(torch.uint8).clone()
        for name, value in vars(sampler).items()
        if isinstance(value, torch.Tensor)
    }


def _assert_unchanged(before: dict[str, torch.Tensor], sampler: Sampler) -> None:
    after = _buffer_bytes(sampler)
    assert after.keys() == before.keys()
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert not changed, f"buffers written by a failed call: {changed}"
    assert {"out", "temperatures", "greedy_mask"} <= before.keys()


@st.composite
def setups(draw: st.DrawFn) -> Setup:
    return Setup(
        implementation=draw(st.sampled_from(sorted(SAMPLERS))),
        gamma=draw(st.integers(1, 5)),
        max_bs=draw(st.integers(1, 4)),
        hidden_size=draw(st.integers(1, 12)),
        sample_from_anchor=draw(st.booleans()),
        folded_sampling=draw(st.booleans()),
        dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])),
    )


def _valid_call(setup: Setup, bs: int, *, rows: int | None = None) -> tuple[torch.Tensor, ...]:
    """Seeded hidden_states ``[rows, H]`` and input_ids ``[rows]`` (rows = bs*Q unless given)."""
    rows = bs * setup.query_rows if rows is None else rows
    generator = torch.Generator().manual_seed(rows)
    hidden_states = torch.randn(rows, setup.hidden_size, generator=generator).to(setup.dtype)
    return hidden_states, torch.randint(VOCAB, (rows,), generator=generator)


MALFORMATIONS = (
    "rows-not-multiple",
    "no-rows",
    "bs-over-max",
    "ids-shape",
    "ids-dtype",
    "hidden-width",
    "hidden-1d",
    "hidden-3d",
)


@st.composite
def bad_calls(draw: st.DrawFn, setup: Setup, kind: str) -> BadCall:
    """One malformation of an otherwise valid call; input_ids match the hidden rows unless
    the ids themselves are the malformation, so the named argument is the only fault."""
    q, width = setup.query_rows, setup.hidden_size
    bs = draw(st.integers(1, setup.max_bs))
    hidden_states, input_ids = _valid_call(setup, bs)
    rows = hidden_states.shape[0]
    hidden_form = re.escape(f"hidden_states must be [bs*{q}, H={width}]")
    if kind in ("rows-not-multiple", "no-rows"):
        assume(kind == "no-rows" or q > 1)  # one query row per request divides every count
        bad_rows = 0 if kind == "no-rows" else bs * q + draw(st.integers(1, q - 1))
        hidden_states, input_ids = _valid_call(setup, bs, rows=bad_rows)
        return BadCall(
            kind,
            hidden_states,
            input_ids,
            rf"hidden_states has {bad_rows} rows, not a positive multiple of the {q} query rows",
        )
    if kind == "bs-over-max":
        over = setup.max_bs + draw(st.integers(1, 3))
        hidden_states, input_ids = _valid_call(setup, over)
        return BadCall(kind, hidden_states, input_ids, rf"{over} requests exceeds max_bs=")
    if kind == "ids-shape":
        shape = draw(st.sampled_from([(rows + 1,), (rows - 1,), (bs, q), (1, rows), ()]))
        ids = torch.zeros(shape, dtype=torch.int64)
        return BadCall(kind, hidden_states, ids, re.escape(f"input_ids must be [{rows}]"))
    if kind == "ids-dtype":
        dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.bool]))
        return BadCall(
            kind, hidden_states, input_ids.to(dtype), r"input_ids must be int64 or int32"
        )
    if kind == "hidden-width":
        other = draw(st.integers(1, 13).filter(lambda h: h != width))
        hidden = torch.zeros(rows, other, dtype=setup.dtype)
        return BadCall(kind, hidden, input_ids, hidden_form)
    if kind == "hidden-1d":
        return BadCall(kind, hidden_states.reshape(-1), input_ids, hidden_form)
    assert kind == "hidden-3d", kind
    return BadCall(kind, hidden_states.view(bs, q, width), input_ids, hidden_form)


@pytest.mark.parametrize("kind", MALFORMATIONS)
@given(data=st.data(), setup=setups())
def test_malformed_call_raises_a_named_value_error_and_writes_nothing(
    kind: str, data: st.DataObject, setup: Setup
) -> None:
    bad = data.draw(bad_calls(setup, kind), label="bad call")
    sampler = _sampler(setup)
    before = _fill_with_sentinels(sampler)
    with pytest.raises(ValueError, match=bad.message):
        sampler(bad.hidden_states, bad.input_ids)
    _assert_unchanged(before, sampler)


@pytest.mark.parametrize("implementation", sorted(SAMPLERS))
def test_a_failed_call_leaves_the_sampler_usable(implementation: str) -> None:
    setup = Setup(implementation, max_bs=2)
    sampler = _sampler(setup)
    hidden_states, input_ids = _valid_call(setup, 2)
    with pytest.raises(ValueError, match="input_ids"):
        sampler(hidden_states, input_ids.float())
    sampler(hidden_states, input_ids)
    assert bool(((sampler.out >= 0) & (sampler.out < VOCAB)).all())


# -- constructor ------------------------------------------------------------------------------
@pytest.mark.parametrize("implementation", sorted(SAMPLERS))
@pytest.mark.parametrize(
    ("argument", "value"),
    [("gamma", 0), ("gamma", -2), ("gamma", 1.5), ("max_bs", 0), ("max_bs", -1), ("max_bs", "4")],
)
def test_constructor_rejects_non_positive_gamma_and_max_bs(
    implementation: str, argument: str, value: object
) -> None:
    model = _model(Setup(implementation))
    arguments: dict[str, Any] = {"gamma": 2, "max_bs": 2, argument: value}
    with pytest.raises(ValueError, match=rf"{argument} must be a positive int, got {value!r}"):
        SAMPLERS[implementation](model=model, device="cpu", **arguments)


# -- sampling parameters ----------------------------------------------------------------------
@st.composite
def bad_temperatures(draw: st.DrawFn) -> list[float]:
    """Per-row temperatures with one negative, NaN or infinite among valid ones (0 included)."""
    good = st.sampled_from([0.0, 1e-7, 0.5, 1.0, 3.0])
    bad = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf]), st.floats(-100.0, -1e-9))
    temperatures = draw(st.lists(good, min_size=1, max_size=4))
    temperatures.insert(draw(st.integers(0, len(temperatures))), draw(bad))
    return temperatures


@given(temperatures=bad_temperatures(), implementation=st.sampled_from(sorted(SAMPLERS)))
def test_negative_nan_or_infinite_temperature_raises_and_leaves_the_staged_rows(
    temperatures: list[float], implementation: str
) -> None:
    bs = len(temperatures)
    sampler = _sampler(Setup(implementation, max_bs=5))
    before = _buffer_bytes(sampler)
    info = SamplingInfo.from_lists(temperatures=temperatures, top_ks=[SAMPLED_TOP_K] * bs)
    with pytest.raises(ValueError, match=r"temperatures must be >= 0 and not NaN"):
        sampler.stage_sampling_params(bs=bs, sampling_info=info)
    _assert_unchanged(before, sampler)


@pytest.mark.parametrize("implementation", sorted(SAMPLERS))
@pytest.mark.parametrize(
    ("bs", "sampling_info", "message"),
    [
        (0, None, r"bs must be in 1\.\.3 \(max_bs\), got 0"),
        (4, None, r"bs must be in 1\.\.3 \(max_bs\), got 4"),
        (
            2,
            SamplingInfo.from_lists(temperatures=[1.0] * 3, top_ks=[1] * 3),
            r"sampling_info's fields must all be \[bs=2\]",
        ),
    ],
)
def test_staging_of_the_wrong_size_raises_and_leaves_the_staged_rows(
    implementation: str, bs: int, sampling_info: SamplingInfo | None, message: str
) -> None:
    sampler = _sampler(Setup(implementation, max_bs=3))
    before = _buffer_bytes(sampler)
    with pytest.raises(ValueError, match=message):
        sampler.stage_sampling_params(bs=bs, sampling_info=sampling_info)
    _assert_unchanged(before, sampler)


# -- command line -----------------------------------------------------------------------------
def _case_file(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _small_case_json() -> dict[str, object]:
    case = make_case(bs=2, gamma=2, vocab_size=9, hidden_size=4, markov_rank=2)
    return case.to_json_dict()


def _cli_bad_usage() -> list[ParameterSet]:
    """(argv builder, stderr regex) for every refusal the CLI owes; tmp_path fills in files."""
    newer = {**_small_case_json(), "schema_version": CASE_SCHEMA_VERSION + 1}
    return [
        pytest.param(lambda _: ["--device", "tpu"], r"--device.*tpu", id="device-tpu"),
        pytest.param(
            lambda _: ["--device", "cuda"],
            r"--device cuda asked for, but no CUDA device",
            id="device-cuda-without-cuda",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available"),
        ),
        pytest.param(
            lambda _: ["compare", "--only", "nosuch"],
            r"unknown built-in implementation\(s\) \['nosuch'\]",
            id="only-nosuch",
        ),
        pytest.param(
            lambda _: ["compare", "--impl", "broken"],
            r"--impl must look like NAME=module:Class, got 'broken'",
            id="impl-without-equals",
        ),
        pytest.param(
            lambda _: ["compare", "--impl", "x=nosuch_module:Cls"],
            r"cannot import module 'nosuch_module'",
            id="impl-module-missing",
        ),
        pytest.param(
            lambda _: ["compare", "--impl", "x=tests.plugins.broken_samplers:NotASampler"],
            r"NotASampler: class has no stage_sampling_params",
            id="impl-not-a-sampler",
        ),
        pytest.param(
            lambda tmp: ["compare", "--case", _case_file(tmp, "bad.json", "{not json")],
            r"bad\.json: not valid JSON",
            id="case-not-json",
        ),
        pytest.param(
            lambda tmp: [
                "compare",
                "--case",
                _case_file(tmp, "bad.json", {**_small_case_json(), "case": {"bs": "two"}}),
            ],
            r"malformed case|must be",
            id="case-malformed-body",
        ),
        pytest.param(
            lambda tmp: ["compare", "--case", _case_file(tmp, "newer.json", newer)],
            rf"schema_version {CASE_SCHEMA_VERSION + 1} is newer than this harness supports",
            id="case-newer-schema",
        ),
        *_trust_bad_usage(),
    ]


def _huge_case_json() -> dict[str, object]:
    """V = 10^7, bs = 64, gamma = 8: an estimated 410 GiB, above half of any test machine's
    free memory."""
    case = make_case(bs=64, gamma=8, vocab_size=10**7, hidden_size=64, markov_rank=64)
    return case.to_json_dict()


def _trust_bad_usage() -> list[ParameterSet]:
    """Values that once gave a traceback, a hang or a silent coercion."""
    return [
        pytest.param(
            lambda _: ["--seed", "99999999999999999999999"],
            r"--seed must be an integer in \[0, 2\^62\)",
            id="seed-too-large",
        ),
        pytest.param(
            lambda _: ["--seed", "-1"], r"--seed must be an integer in", id="seed-negative"
        ),
        pytest.param(
            lambda _: ["stats", "--model-seed", str(10**30)],
            r"--model-seed must be an integer in \[0, 2\^62\)",
            id="model-seed-too-large",
        ),
        *[
            pytest.param(
                lambda _, v=value: ["compare", "--time-limit", v],
                r"--time-limit must be a finite number of seconds > 0",
                id=f"time-limit-{value}",
            )
            for value in ("nan", "inf", "0", "-3")
        ],
        pytest.param(
            lambda _: ["stats", "--vocab", "1"], r"stats --vocab must be >= 2", id="stats-vocab-1"
        ),
        pytest.param(
            lambda _: ["stats", "--rows", "1000000000000"],
            r"the statistical oracle run needs an estimated .* TiB, above the limit of .*"
            r"--max-memory",
            id="stats-rows-huge",
        ),
        pytest.param(
            lambda _: ["sweep", "--vocab", "1000000000000"],
            r"sweep point bs=\d+ gamma=\d+ V=1000000000000 needs an estimated .*--max-memory",
            id="sweep-vocab-huge",
        ),
        pytest.param(
            lambda tmp: ["compare", "--case", _case_file(tmp, "huge.json", _huge_case_json())],
            r"case .*V=10000000.* needs an estimated \d+\.\d GiB, above the limit",
            id="case-too-big-for-memory",
        ),
        pytest.param(
            lambda _: ["compare", "--max-memory", "lots"],
            r"--max-memory: expected a size such as 8G",
            id="max-memory-unreadable",
        ),
        pytest.param(
            lambda _: ["compare", "--impl", "x=tests.plugins.exits_at_import:Cls"],
            r"importing module 'tests.plugins.exits_at_import' called sys.exit\(3\)",
            id="impl-exits-at-import",
        ),
        pytest.param(
            lambda _: ["compare", "--impl", "x=tests.plugins.interrupted_at_import:Cls"],
            r"importing module 'tests.plugins.interrupted_at_import' raised KeyboardInterrupt",
            id="impl-interrupted-at-import",
        ),
    ]


@pytest.mark.parametrize(("argv", "message"), _cli_bad_usage())
def test_cli_refuses_unknown_values_with_exit_status_2(
    argv: Callable[[Path], list[str]],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness.cli import main  # imports the stats, work and sweep sub-commands

    code = main([*argv(tmp_path), "--quiet", "--out-dir", str(tmp_path / "report")])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert re.search(rf"error: .*{message}", captured.err), captured.err
    assert not (tmp_path / "report").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("out_dir", "message"),
    [
        ("a-file", r"--out-dir .*a-file: exists and is not a folder; expected a folder path"),
        ("a-file/below", r"--out-dir .*a-file/below: .*a-file is not a folder"),
        ("/proc/harness-report", r"--out-dir /proc/harness-report: cannot write there"),
    ],
)
def test_an_unusable_out_dir_is_refused_before_any_work(
    out_dir: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.cli import main

    (tmp_path / "a-file").write_text("x")
    target = out_dir if out_dir.startswith("/") else str(tmp_path / out_dir)
    assert main(["compare", "--quiet", "--out-dir", target]) == 2
    err = capsys.readouterr().err
    assert re.search(rf"error: {message}", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_max_memory_raises_the_limit_and_the_estimate_is_in_the_message() -> None:
    from harness.case import Case
    from harness.pipeline import memory

    huge = Case.from_json_dict(_huge_case_json())
    estimate = memory.case_bytes(huge)
    with pytest.raises(memory.MemoryLimitError, match=r"needs an estimated 410\.\d GiB"):
        memory.check_cases_fit([huge], max_memory_bytes=estimate - 1)
    memory.check_cases_fit([huge], max_memory_bytes=estimate)  # what --max-memory sets
    assert memory.parse_size("64G") == 64 << 30 and memory.parse_size("1.5M") == 3 << 19
