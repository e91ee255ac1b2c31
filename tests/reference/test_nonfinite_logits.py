"""NaN and infinity in step logits: every sampler path follows one rule (docs/numerics.md).

The rule is ``torch.argmax``'s: a row with a NaN yields its first NaN; else a row with a
``+inf`` yields its first ``+inf``; a ``-inf`` (masked) entry never wins while the row has
a finite one; a row of only ``-inf`` yields token 0. Paths: ``greedy_step``, the torch
race, the Triton race (under the interpreter without CUDA) and the vanilla head's fused
greedy walk, each on greedy and sampled rows at low and high temperature.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference import (
    VanillaMarkovHead,
    exponential_race_torch,
    folded_race_sampler,
    greedy_step,
    make_markov_head,
)
from reference.triton_race import BLOCK_V, exponential_race_triton

NAN, INF = float("nan"), float("inf")
VOCAB = 2 * BLOCK_V + 5  # three Triton tiles; the special entries sit past the first
TEMPERATURES = {"low-T": 1e-5, "T=1": 1.0, "high-T": 100.0}
RowSampler = Callable[..., torch.Tensor]  # (logits[bs, V], *, temperatures, greedy_mask, noise)


def _greedy_step(logits: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
    return greedy_step(logits, 0)


def _vanilla_head(vocab: int) -> VanillaMarkovHead:
    head = make_markov_head("vanilla", vocab_size=vocab, rank=4, hidden_size=8, seed=0)
    assert isinstance(head, VanillaMarkovHead)
    return head


def _fused_greedy(logits: torch.Tensor, **_: torch.Tensor) -> torch.Tensor:
    """The fused walk's first step: ``argmax(base + W2 . W1[anchor])`` in float32."""
    tokens = _vanilla_head(logits.shape[-1]).sample_block_greedy_fused(
        logits.unsqueeze(1), first_prev_tokens=torch.zeros(logits.shape[0], dtype=torch.int64)
    )
    assert tokens is not None
    return tokens[:, 0]


def _triton_race(logits: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
    """The Triton race: compiled on CUDA tensors when there is CUDA, else interpreted."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    moved = {name: tensor.to(device) for name, tensor in kwargs.items()}
    return exponential_race_triton(logits.to(device), **moved).cpu()


interpreter = pytest.mark.interpreter
RACES = [
    pytest.param(exponential_race_torch, id="race-torch"),
    pytest.param(_triton_race, id="race-triton", marks=interpreter),
]
# Every path; the greedy-only ones ignore temperatures and noise.
PATHS = [
    pytest.param(_greedy_step, id="greedy_step"),
    pytest.param(_fused_greedy, id="fused-greedy"),
    *RACES,
]
# (path, greedy rows, temperature): the greedy-only paths once, each race at every setting.
PATH_SETTINGS = [
    pytest.param(_greedy_step, True, 1.0, id="greedy_step"),
    pytest.param(_fused_greedy, True, 1.0, id="fused-greedy"),
    *(
        pytest.param(
            race.values[0],
            greedy,
            temperature,
            id=f"{race.id}-{'greedy' if greedy else 'sampled'}-rows-{label}",
            marks=race.marks,
        )
        for race in RACES
        for greedy in (True, False)
        for label, temperature in TEMPERATURES.items()
    ),
]


def rule_token(row: torch.Tensor) -> int | None:
    """The token the rule fixes for a row ``[V]``; ``None`` when a finite entry must win."""
    nan = torch.isnan(row).nonzero()
    if len(nan):
        return int(nan[0])
    pos_inf = (row == INF).nonzero()
    if len(pos_inf):
        return int(pos_inf[0])
    if bool((row == -INF).all()):
        return 0
    return None


def _finite_logits(bs: int, vocab: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(bs, vocab, generator=generator) * 3  # [bs, V]


def _pattern_rows() -> tuple[torch.Tensor, list[str]]:
    """One row per pattern ``[n, VOCAB]``; the special entries mostly past the first tile."""
    everything = slice(None)
    patterns: dict[str, list[tuple[int | slice, float]]] = {
        "nan-later-tile": [(1500, NAN), (1900, NAN)],
        "nan-after-pos-inf": [(3, INF), (1700, NAN)],
        "pos-inf-later-tiles": [(1100, INF), (2050, INF)],
        "pos-inf-among-masked": [(slice(0, 1100), -INF), (1100, INF), (2051, INF)],
        "nan-among-masked": [(everything, -INF), (2052, NAN)],
        "all-masked": [(everything, -INF)],
        "masked-below-every-finite": [(slice(0, 1800), -INF)],
        "masked-but-last": [(slice(0, VOCAB - 1), -INF)],
        "masked-every-other": [(slice(0, None, 2), -INF)],
        "neg-inf-first-tile-only": [(slice(0, BLOCK_V), -INF)],
    }
    logits = _finite_logits(len(patterns), VOCAB, seed=0)
    for row, entries in enumerate(patterns.values()):
        for where, value in entries:
            logits[row, where] = value
    return logits, list(patterns)


def _race_kwargs(
    bs: int, vocab: int, *, temperature: float, greedy: bool, seed: int
) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "temperatures": torch.full((bs,), temperature),
        "greedy_mask": torch.full((bs,), greedy),
        "noise": torch.empty(bs, vocab).exponential_(generator=generator),  # [bs, V]
    }


def _assert_rule(logits: torch.Tensor, tokens: torch.Tensor, labels: list[str]) -> None:
    assert tokens.dtype == torch.int64 and tokens.shape == (logits.shape[0],)
    for row, label in enumerate(labels):
        want = rule_token(logits[row])
        got = int(tokens[row])
        if want is not None:
            assert got == want, f"{label}: got token {got}, the rule says {want}"
        else:
            assert torch.isfinite(logits[row, got]), f"{label}: chose non-finite entry {got}"


@pytest.mark.parametrize(("sampler", "greedy", "temperature"), PATH_SETTINGS)
def test_every_path_follows_the_nonfinite_rule(
    sampler: RowSampler, greedy: bool, temperature: float
) -> None:
    logits, labels = _pattern_rows()
    kwargs = _race_kwargs(len(labels), VOCAB, temperature=temperature, greedy=greedy, seed=1)
    _assert_rule(logits, sampler(logits, **kwargs), labels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("sampler", PATHS)
def test_half_precision_logits_follow_the_nonfinite_rule(
    sampler: RowSampler, dtype: torch.dtype
) -> None:
    logits, labels = _pattern_rows()
    logits = logits.to(dtype)
    kwargs = _race_kwargs(len(labels), VOCAB, temperature=0.7, greedy=False, seed=2)
    _assert_rule(logits, sampler(logits, **kwargs), labels)


@pytest.mark.interpreter
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy-rows", "sampled-rows"])
def test_triton_race_matches_the_torch_race_on_nonfinite_rows(greedy: bool) -> None:
    logits, labels = _pattern_rows()
    kwargs = _race_kwargs(len(labels), VOCAB, temperature=0.5, greedy=greedy, seed=3)
    assert torch.equal(_triton_race(logits, **kwargs), exponential_race_torch(logits, **kwargs))


@pytest.mark.parametrize("race", RACES)
def test_zero_noise_draw_never_lets_a_masked_entry_win(race: RowSampler) -> None:
    """``0 / 0`` would be NaN and win the argmax; a zero draw counts as the smallest float."""
    logits = _finite_logits(3, VOCAB, seed=4)
    logits[:, :1800] = -INF
    kwargs = _race_kwargs(3, VOCAB, temperature=1.0, greedy=False, seed=4)
    kwargs["noise"][0, :1800] = 0.0  # every masked entry draws 0
    kwargs["noise"][1, 5] = 0.0
    kwargs["noise"][2, [7, 1900]] = 0.0  # and a real entry draws 0 too: it arrives first
    tokens = race(logits, **kwargs)
    assert bool((tokens >= 1800).all())
    assert int(tokens[2]) == 1900
    assert torch.equal(tokens, exponential_race_torch(logits, **kwargs))


def test_folded_sampler_never_draws_a_masked_entry() -> None:
    """The real Exp(1) refill over many rows, most of the vocabulary masked below the rest."""
    bs, vocab = 4096, 64
    logits = _finite_logits(bs, vocab, seed=5)
    logits[:, : vocab - 3] = -INF  # [bs, V]: only the last three entries are real
    for temperature in TEMPERATURES.values():
        sample = folded_race_sampler(
            noise_buffer=torch.empty(bs, vocab),
            temperatures=torch.full((bs,), temperature),
            greedy_mask=torch.arange(bs) % 3 == 0,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            tokens = sample(logits, 0)
        assert bool((tokens >= vocab - 3).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_and_loop_greedy_walks_agree_on_rule_determined_steps(dtype: torch.dtype) -> None:
    """Over a whole block the fused walk and the step loop emit the rule's tokens, and the
    rule's token becomes the next step's previous token on both."""
    logits, labels = _pattern_rows()
    rows = len(labels)
    base = torch.stack([logits, logits.roll(1, dims=0)], dim=1).to(dtype)  # [bs, 2, V]
    head = _vanilla_head(VOCAB).to(dtype)
    anchors = torch.arange(rows)
    fused = head.sample_block_greedy_fused(base, first_prev_tokens=anchors)
    loop, _ = head.sample_block(
        base, first_prev_tokens=anchors, hidden_states=None, sampler=greedy_step
    )
    assert fused is not None
    for k in range(2):
        _assert_rule(base[:, k].float(), fused[:, k], labels)
        _assert_rule(base[:, k].float(), loop[:, k], labels)
        determined = [i for i in range(rows) if rule_token(base[i, k].float()) is not None]
        assert torch.equal(fused[determined, k], loop[determined, k])


# -- properties ---------------------------------------------------------------------------
@st.composite
def nonfinite_rows(draw: st.DrawFn) -> tuple[torch.Tensor, float, bool]:
    """Logits ``[bs, V]`` (V around a tile boundary) with random NaN, ``+inf`` and ``-inf``
    entries, a temperature and whether the rows are greedy."""
    bs = draw(st.integers(1, 4))
    vocab = draw(st.sampled_from([1, 2, 7, BLOCK_V - 1, BLOCK_V, BLOCK_V + 1, 2 * BLOCK_V + 3]))
    logits = _finite_logits(bs, vocab, seed=draw(st.integers(0, 2**16)))
    for row in range(bs):
        kind = draw(st.sampled_from(["masked", "nan", "pos-inf", "all-masked", "finite"]))
        if kind in ("masked", "all-masked"):
            cut = vocab if kind == "all-masked" else draw(st.integers(0, vocab - 1))
            logits[row, :cut] = -INF
        elif kind != "finite":
            positions = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=3))
            logits[row, positions] = NAN if kind == "nan" else INF
    temperature = draw(st.sampled_from([1e-5, 0.3, 1.0, 50.0]))
    return logits, temperature, draw(st.booleans())


@given(case=nonfinite_rows(), seed=st.integers(0, 2**16))
def test_torch_paths_follow_the_rule_for_any_mix_of_nonfinite_entries(
    case: tuple[torch.Tensor, float, bool], seed: int
) -> None:
    logits, temperature, greedy = case
    bs, vocab = logits.shape
    labels = [f"row {i}" for i in range(bs)]
    kwargs = _race_kwargs(bs, vocab, temperature=temperature, greedy=greedy, seed=seed)
    _assert_rule(logits, exponential_race_torch(logits, **kwargs), labels)
    _assert_rule(logits, greedy_step(logits, 0), labels)
    _assert_rule(logits, _fused_greedy(logits), labels)


@pytest.mark.interpreter
@given(case=nonfinite_rows(), seed=st.integers(0, 2**16))
def test_triton_race_equals_the_torch_race_for_any_mix_of_nonfinite_entries(
    case: tuple[torch.Tensor, float, bool], seed: int
) -> None:
    logits, temperature, greedy = case
    bs, vocab = logits.shape
    kwargs = _race_kwargs(bs, vocab, temperature=temperature, greedy=greedy, seed=seed)
    assert torch.equal(_triton_race(logits, **kwargs), exponential_race_torch(logits, **kwargs))
