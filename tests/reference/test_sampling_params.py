"""Staging per-request sampling parameters (reference.sampling_params).

The contract (docs/sampling-params.md): ``None`` means all greedy at T=1; temperatures are
clamped to at least ``MIN_TEMPERATURE`` (0 is a greedy request's usual T); a row is greedy
when ``top_k == 1`` (0: no top-k). A value outside its range (a negative or NaN
temperature, top-k below 0, top-p outside (0, 1], min-p outside [0, 1)) is a caller
error, not a clamp case: one line naming the parameter and its range, nothing written.
"""

from __future__ import annotations

import math

import pytest
import torch

from reference import MIN_TEMPERATURE, SamplingInfo, stage_sampling_params

MAX_BS = 6


def _buffers() -> tuple[torch.Tensor, torch.Tensor]:
    """Static ``temperatures[max_bs]`` float32 and ``greedy_mask[max_bs]`` bool, pre-filled
    with sentinels so an unwritten row is visible."""
    return torch.full((MAX_BS,), 42.0), torch.zeros(MAX_BS, dtype=torch.bool)


def _stage(bs: int, sampling_info: SamplingInfo | None) -> tuple[torch.Tensor, torch.Tensor]:
    temperatures, greedy_mask = _buffers()
    stage_sampling_params(
        bs=bs, sampling_info=sampling_info, temperatures=temperatures, greedy_mask=greedy_mask
    )
    return temperatures, greedy_mask


def test_min_temperature_is_1e_minus_5() -> None:
    assert MIN_TEMPERATURE == 1e-5


@pytest.mark.parametrize("bs", [1, 4, MAX_BS])
def test_no_sampling_info_means_every_row_greedy_at_temperature_one(bs: int) -> None:
    temperatures, greedy_mask = _stage(bs, None)
    assert torch.equal(temperatures[:bs], torch.ones(bs))
    assert bool(greedy_mask[:bs].all())
    assert bool((temperatures[bs:] == 42.0).all())  # rows past bs are left alone
    assert not bool(greedy_mask[bs:].any())


def test_temperatures_are_clamped_to_the_minimum_and_zero_becomes_1e_minus_5() -> None:
    info = SamplingInfo.from_lists(
        temperatures=[0.0, 1e-7, 1e-5, 0.7, 2.5], top_ks=[1, 1 << 30, 50, 1 << 30, 2]
    )
    temperatures, _ = _stage(5, info)
    want = torch.tensor([MIN_TEMPERATURE, MIN_TEMPERATURE, 1e-5, 0.7, 2.5], dtype=torch.float32)
    assert torch.equal(temperatures[:5], want)
    assert temperatures[5] == 42.0


def test_greedy_mask_is_top_k_one_and_top_k_zero_is_no_top_k() -> None:
    info = SamplingInfo.from_lists(temperatures=[1.0] * 6, top_ks=[0, 0, 1, 2, 50, 1 << 30])
    _, greedy_mask = _stage(6, info)
    assert torch.equal(greedy_mask, torch.tensor([False, False, True, False, False, False]))


@pytest.mark.parametrize(
    ("field", "bad", "message"),
    [
        ("top_ks", -1, r"top_ks must be integers >= 0 \(0: no top-k, 1: greedy\)"),
        ("top_ps", 0.0, r"top_ps must be in \(0, 1\] \(1: no top-p\)"),
        ("top_ps", 1.5, r"top_ps must be in \(0, 1\]"),
        ("top_ps", math.nan, r"top_ps must be in \(0, 1\]"),
        ("min_ps", 1.0, r"min_ps must be in \[0, 1\) \(0: no min-p\)"),
        ("min_ps", -0.1, r"min_ps must be in \[0, 1\)"),
        ("min_ps", math.nan, r"min_ps must be in \[0, 1\)"),
    ],
)
def test_a_truncation_outside_its_range_raises_one_line_and_writes_nothing(
    field: str, bad: float, message: str
) -> None:
    lists: dict[str, list] = {
        "temperatures": [1.0, 1.0],
        "top_ks": [0, 0],
        "top_ps": [1.0, 1.0],
        "min_ps": [0.0, 0.0],
    }
    lists[field][1] = bad
    info = SamplingInfo.from_lists(**lists)
    temperatures, greedy_mask = _buffers()
    with pytest.raises(ValueError, match=message) as raised:
        stage_sampling_params(
            bs=2, sampling_info=info, temperatures=temperatures, greedy_mask=greedy_mask
        )
    assert "\n" not in str(raised.value)
    assert bool((temperatures == 42.0).all())
    assert not bool(greedy_mask.any())


def test_top_p_and_min_p_default_to_no_truncation_and_select_keeps_every_field() -> None:
    info = SamplingInfo.from_lists(temperatures=[0.5, 1.0, 2.0], top_ks=[1, 0, 3])
    assert info.top_ps.tolist() == [1.0, 1.0, 1.0]
    assert info.min_ps.tolist() == [0.0, 0.0, 0.0]
    mixed = SamplingInfo.from_lists(
        temperatures=[0.5, 1.0, 2.0],
        top_ks=[1, 0, 3],
        top_ps=[1.0, 0.5, 0.9],
        min_ps=[0.0, 0.25, 0.1],
    )
    picked = mixed.select(torch.tensor([2, 0]))
    assert picked.top_ks.tolist() == [3, 1]
    assert picked.top_ps.tolist() == pytest.approx([0.9, 1.0])
    assert picked.min_ps.tolist() == pytest.approx([0.1, 0.0])


def test_staging_overwrites_the_previous_calls_rows() -> None:
    temperatures, greedy_mask = _buffers()
    stage_sampling_params(
        bs=3, sampling_info=None, temperatures=temperatures, greedy_mask=greedy_mask
    )
    info = SamplingInfo.from_lists(temperatures=[0.5, 0.9], top_ks=[1 << 30, 1 << 30])
    stage_sampling_params(
        bs=2, sampling_info=info, temperatures=temperatures, greedy_mask=greedy_mask
    )
    assert torch.equal(temperatures[:3], torch.tensor([0.5, 0.9, 1.0]))
    assert torch.equal(greedy_mask[:3], torch.tensor([False, False, True]))


def test_float64_temperatures_are_stored_in_the_float32_buffer() -> None:
    info = SamplingInfo(
        temperatures=torch.tensor([0.3, 0.0], dtype=torch.float64),
        top_ks=torch.tensor([5, 1], dtype=torch.int32),
    )
    temperatures, greedy_mask = _stage(2, info)
    assert temperatures.dtype == torch.float32
    assert torch.equal(temperatures[:2], torch.tensor([0.3, MIN_TEMPERATURE], dtype=torch.float32))
    assert torch.equal(greedy_mask[:2], torch.tensor([False, True]))


@pytest.mark.parametrize("bad", [-1e-3, -1.0, math.nan])
def test_negative_or_nan_temperature_raises_and_writes_nothing(bad: float) -> None:
    info = SamplingInfo.from_lists(temperatures=[1.0, bad], top_ks=[1 << 30, 1 << 30])
    temperatures, greedy_mask = _buffers()
    with pytest.raises(ValueError, match="temperatures must be >= 0 and not NaN"):
        stage_sampling_params(
            bs=2, sampling_info=info, temperatures=temperatures, greedy_mask=greedy_mask
        )
    assert bool((temperatures == 42.0).all())
    assert not bool(greedy_mask.any())


@pytest.mark.parametrize(
    ("temps", "top_ks"),
    [
        pytest.param(torch.ones(3), torch.ones(2, dtype=torch.int64), id="top-ks-short"),
        pytest.param(torch.ones(2), torch.ones(3, dtype=torch.int64), id="temps-short"),
        pytest.param(torch.ones(1, 2), torch.ones(2, dtype=torch.int64), id="temps-2d"),
        pytest.param(torch.ones(()), torch.ones((), dtype=torch.int64), id="scalars"),
    ],
)
def test_sampling_info_of_the_wrong_shape_raises(temps: torch.Tensor, top_ks: torch.Tensor) -> None:
    info = SamplingInfo(temperatures=temps, top_ks=top_ks)
    with pytest.raises(ValueError, match=r"fields must all be \[bs=3\]"):
        _stage(3, info)


@pytest.mark.parametrize("bs", [0, -1, MAX_BS + 1])
@pytest.mark.parametrize("with_info", [False, True])
def test_bs_outside_one_to_max_bs_raises(bs: int, with_info: bool) -> None:
    n = max(bs, 1)
    info = SamplingInfo.from_lists(temperatures=[1.0] * n, top_ks=[1] * n) if with_info else None
    with pytest.raises(ValueError, match=f"bs must be in 1..{MAX_BS}"):
        _stage(bs, info)


def test_from_lists_builds_float32_temperatures_and_int64_top_ks() -> None:
    info = SamplingInfo.from_lists(temperatures=[0.5, 1.0], top_ks=[1, 40])
    assert info.temperatures.dtype == torch.float32
    assert info.top_ks.dtype == torch.int64
    assert info.temperatures.tolist() == [0.5, 1.0]
    assert info.top_ks.tolist() == [1, 40]
