"""The released servers' word-to-noise conversions (``harness.upstream.noise_words``) on
their edge words, against values worked out by hand (docs/upstream.md, "Every word of
the noise streams"), and, under ``slow``, on all 2^32 words. The ``upstream`` tests
need the released sglang, the ``vllm`` ones vLLM 0.33 (skipped without them)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness.cli import main
from harness.cli.exit_codes import ExitCode
from harness.measure.word_sweep import WORDS, sweep
from harness.upstream.noise_words import WordConversion, server_conversions

TOP = WORDS - 128  # the first word whose float32 value rounds up to 2^32
LN2 = math.log(2)


def _conversions(server: str) -> dict[str, WordConversion]:
    found, reason = server_conversions(server)
    assert reason is None, reason
    return {c.stream: c for c in found}


def _at(conversion: WordConversion, *words: int) -> tuple[list[float], list[float]]:
    uniform, noise = conversion.convert(torch.tensor(words, dtype=torch.int64))
    return uniform.tolist(), noise.tolist()


def _ulp_close(value: float, exact: float) -> bool:
    # a float32 log is within one ulp of the real value
    return abs(value - exact) <= 2.0**-23 * abs(exact)


def _gumbel_edges(conversion: WordConversion, *, top_noise_finite: bool) -> None:
    uniform, noise = _at(conversion, 0, 1, TOP - 1, TOP, WORDS - 1)
    assert uniform[:3] == [2.0**-33, 3 * 2.0**-33, 1 - 2.0**-24]
    assert uniform[3:] == [1.0, 1.0]  # word + 0.5 rounds to 2^32 in float32
    assert _ulp_close(noise[0], 33 * LN2)  # E = -log(1 - 2^-33) = 2^-33 in float32
    assert _ulp_close(noise[2], -math.log(24 * LN2))
    if top_noise_finite:  # 1 - u is floored at 2^-24: the top words give the noise of TOP - 1
        assert noise[3] == noise[4] == noise[2]
    else:
        assert noise[3] == noise[4] == -math.inf


def _coin_edges(conversion: WordConversion, floor: float) -> None:
    uniform, noise = _at(conversion, 0, 1, 0x7FFFFFFF, 0x80000000, WORDS - 1)
    assert uniform[0] == uniform[4] == 0.0  # Triton maps w and ~w to one value: 0 twice
    assert uniform[2] == uniform[3] == 1 - 2.0**-24  # never 1: the scale is below 2^-31
    assert noise[0] == noise[4] == float(torch.log(torch.tensor(floor)))
    assert all(math.isfinite(n) for n in noise)


@pytest.mark.upstream
def test_sglang_draft_gives_minus_infinity_on_its_128_top_words() -> None:
    draft = _conversions("sglang")["draft"]
    assert draft.source.startswith("mirrored from markov_sample.py")
    _gumbel_edges(draft, top_noise_finite=False)


@pytest.mark.upstream
@pytest.mark.interpreter
def test_sglang_verify_draws_are_guarded() -> None:
    found = _conversions("sglang")
    residual = found["verify: residual / bonus"]
    assert "called from the package: blockwise_rejection._log1p_neg_stable" in residual.source
    _gumbel_edges(residual, top_noise_finite=True)
    coin = found["verify: accept coin"]
    assert "uint_to_uniform_float" in coin.source
    _coin_edges(coin, floor=4.6566127342e-10)


@pytest.mark.upstream
@pytest.mark.interpreter
def test_words_command_counts_the_top_words(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["words", "--servers", "sglang", "--words-range", f"{WORDS - 256}:{WORDS}"]
    code = main([*argv, "--json", "--quiet", "--out-dir", str(tmp_path)])
    assert code == ExitCode.FAIL  # the draft's -inf noise
    data = json.loads(capsys.readouterr().out)
    (section,) = data["sections"]
    by_stream = {s["stream"]: s for s in section["data"]["sweeps"]}
    draft = {e["event"]: e for e in by_stream["draft"]["events"]}
    assert draft["noise -inf"]["count"] == 128 and draft["noise -inf"]["first_word"] == TOP
    assert draft["noise -inf"]["probability"] == "2^-25"
    assert by_stream["verify: residual / bonus"]["ok"] and by_stream["verify: accept coin"]["ok"]


@pytest.mark.vllm
@pytest.mark.interpreter
def test_vllm_draws_are_guarded() -> None:
    found = _conversions("vllm")
    gumbel = found["draft and verify: residual / bonus"]
    assert "called from the package: gumbel._log1p_neg_stable" in gumbel.source
    _gumbel_edges(gumbel, top_noise_finite=True)
    _coin_edges(found["verify: accept coin"], floor=4.6566127342e-10)


@pytest.mark.upstream
def test_sglang_draft_mirror_equals_the_package_step_on_its_own_words() -> None:
    # one token per row: the step's partial maximum is that token's key, 0 / 1 - log E
    from harness.upstream.loaders.sglang_loader import load_sglang

    loaded = load_sglang()
    markov = loaded.modules["sglang.kernels.ops.speculative.dspark.markov_sample"]
    rows, key, step = 4096, 0x123456789ABC, 2
    offset = torch.tensor([7], dtype=torch.int64)
    partials: list[torch.Tensor] = []

    def gather(partial: torch.Tensor) -> torch.Tensor:
        partials.append(partial.clone())
        return partial

    markov.MarkovSampleStep.torch(
        base_logits=torch.zeros(rows, 1),
        bias=torch.zeros(rows, 1),
        temperatures=torch.ones(rows),
        key=key,
        offset=offset,
        step=step,
        step_dtype=torch.float32,
        gather=gather,
    )
    words = markov._philox(
        key,
        torch.zeros(1, 1, dtype=torch.int64),
        torch.arange(rows)[:, None],
        torch.full((1, 1), step),
        offset.reshape(1, 1),
    )[0].reshape(-1)
    _, noise = _conversions("sglang")["draft"].convert(words)
    assert torch.equal(noise, partials[0][:, 0])


@pytest.mark.vllm
@pytest.mark.interpreter
def test_vllm_halves_mirror_equals_the_package_uniform_on_its_own_words() -> None:
    import importlib

    import numpy as np

    from harness.upstream.loaders import vllm_loader
    from harness.upstream.noise_words import interpreted, murmur_halves_uniform

    gumbel = importlib.import_module(vllm_loader.GUMBEL_MODULE)
    n = 4096
    args = (
        np.full(n, 0x5EED12345678, dtype=np.int64),
        np.full(n, 77, dtype=np.int64),
        np.arange(n, dtype=np.uint32),
    )
    words = interpreted(gumbel.murmur3_hash32)(*args)
    uniform = interpreted(gumbel.murmur3_uniform32)(*args)
    mirrored = murmur_halves_uniform(torch.from_numpy(words.astype(np.int64)))
    assert torch.equal(mirrored, torch.from_numpy(uniform))


def _full(server: str) -> dict[str, dict[str, int]]:
    return {
        stream: {e.event: e.count for e in sweep(c).events}
        for stream, c in _conversions(server).items()
    }


@pytest.mark.slow
@pytest.mark.upstream
@pytest.mark.interpreter
def test_sglang_on_every_word() -> None:
    counts = _full("sglang")
    assert counts["draft"]["uniform == 1"] == counts["draft"]["noise -inf"] == 128
    assert counts["verify: residual / bonus"]["uniform == 1"] == 128
    assert counts["verify: accept coin"]["uniform == 0"] == 2
    assert sum(counts["verify: residual / bonus"][e] for e in ("noise +inf", "noise -inf")) == 0
    assert sum(counts["verify: accept coin"][e] for e in ("noise +inf", "noise -inf")) == 0


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.interpreter
def test_vllm_on_every_word() -> None:
    counts = _full("vllm")
    gumbel = counts["draft and verify: residual / bonus"]
    assert gumbel["uniform == 1"] == 128
    assert gumbel["noise +inf"] == gumbel["noise -inf"] == gumbel["noise NaN"] == 0
    assert counts["verify: accept coin"]["uniform == 0"] == 2
