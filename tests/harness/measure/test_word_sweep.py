"""The sweep of every word through a word-to-noise conversion (``harness.measure.word_sweep``):
a planted conversion whose word 0 gives an infinite noise is caught with its exact count
and probability; a conversion that guards its uniform at 0 is reported and holds; the
chunks do not change a count; the command refuses a bad range before any work."""

from __future__ import annotations

import math

import pytest
import torch

from harness.cli import main
from harness.cli.exit_codes import ExitCode
from harness.measure.word_sweep import WORDS, probability_text, sweep, sweeps_ok
from harness.upstream.noise_words import WordConversion

SCALE = 2.0**-32


def _unguarded(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # word * 2^-32: word 0 is uniform 0, so -log(-log u) is -inf there
    uniform = words.to(torch.float32) * SCALE
    return uniform, -torch.log(-torch.log(uniform))


def _guarded(words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # the same uniform, kept off 0 before the logs: reported, finite
    uniform = words.to(torch.float32) * SCALE
    return uniform, -torch.log(-torch.log(torch.clamp_min(uniform, 2.0**-33)))


PLANTED = WordConversion("planted", "draft", "Gumbel", "test: word * 2^-32", _unguarded)
GUARDED = WordConversion("control", "draft", "Gumbel", "test: guarded", _guarded)


def test_word_zero_giving_infinite_noise_is_caught_with_its_exact_probability() -> None:
    result = sweep(PLANTED, start=0, stop=4096)
    assert result.count("uniform == 0") == 1
    assert result.count("noise -inf") == 1
    assert result.non_finite == 1 and not result.ok and not sweeps_ok([result])
    event = next(e for e in result.events if e.event == "noise -inf")
    assert event.first_word == 0
    assert event.probability == 2.0**-32
    assert probability_text(event.count) == "2^-32"
    assert result.to_json()["events"][3]["probability"] == "2^-32"


def test_a_guarded_uniform_at_zero_is_reported_not_failed() -> None:
    result = sweep(GUARDED, start=0, stop=4096)
    assert result.count("uniform == 0") == 1
    assert result.non_finite == 0 and result.ok
    # the guarded word 0 is the smallest noise: -log(-log 2^-33) = -log(33 ln 2)
    assert result.noise_min == pytest.approx(-math.log(33 * math.log(2)), rel=2.0**-22)


def test_a_range_without_word_zero_holds() -> None:
    result = sweep(PLANTED, start=1, stop=4096)
    assert result.ok and result.count("uniform == 0") == 0


def test_the_chunks_do_not_change_the_counts() -> None:
    start, stop = WORDS - 1000, WORDS  # the top words: uniform 1 and +inf noise here
    whole = sweep(PLANTED, start=start, stop=stop, chunk=stop - start)
    pieces = sweep(PLANTED, start=start, stop=stop, chunk=7)
    assert whole.count("uniform == 1") == 128
    assert whole.count("noise +inf") == 128
    assert [e.to_json() for e in whole.events] == [e.to_json() for e in pieces.events]
    assert (whole.noise_min, whole.noise_max) == (pieces.noise_min, pieces.noise_max)


def test_probabilities_are_exact_fractions() -> None:
    assert probability_text(0) == "0"
    assert probability_text(128) == "2^-25"
    assert probability_text(3) == "3/4294967296"


@pytest.mark.interpreter
def test_a_triton_helper_runs_interpreted_and_leaves_triton_language_as_it_was() -> None:
    np = pytest.importorskip("numpy")
    pytest.importorskip("triton")
    import triton.language as tl
    from triton.language.random import uint_to_uniform_float

    from harness.upstream.noise_words import interpreted

    before = {name: getattr(tl, name) for name in ("where", "load", "tensor")}
    words = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], dtype=np.uint32)
    uniform = interpreted(uint_to_uniform_float)(words)
    assert uniform.tolist() == [0.0, float(np.float32(4.6566127342e-10)), *[1 - 2.0**-24] * 2, 0.0]
    assert {name: getattr(tl, name) for name in before} == before


@pytest.mark.parametrize(
    "argv",
    [
        ["--words-range", "5:5"],
        ["--words-range", "0:4294967297"],
        ["--words-range", "abc"],
        ["--servers", "sglangg"],
        ["--chunk", "0"],
        ["--device", "cuda"],
    ],
)
def test_bad_usage_is_refused_before_any_work(
    argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    assert main(["words", *argv, "--out-dir", str(tmp_path)]) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("error: ")
