"""Real release wheels, judged unchanged: marker ``releases`` (``tox run -e releases``).

Each wheel comes from the wheel cache (``harness.upstream.releases.wheels``), fetched
once with ``pip download --no-deps`` where the cache lacks it; a wheel that can be
neither is a skip with pip's reason. Nothing of the wheels enters the repository.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from harness.releases.laws import LAW_CLASS
from harness.releases.sweep import ReleaseTask, judge_release
from harness.upstream.loaders import sglang_loader
from harness.upstream.releases.wheels import DEFAULT_CACHE, NotFetched, extract, fetch

pytestmark = pytest.mark.releases

PR_ERA = "shared: torch's one generator, drafter and verifier in turn"
SGLANG_0_5_23 = "shared: sglang 0.5.23's plumbing"


@pytest.fixture(autouse=True)
def _installed_sglang_after() -> Iterator[None]:
    """An sglang row points this process's sglang loader at its wheel: put it back."""
    yield
    sglang_loader.use_release(None)


def _task(package: str, version: str) -> ReleaseTask:
    try:
        fetch(package, version, cache=DEFAULT_CACHE)
    except NotFetched as error:
        pytest.skip(f"{package} {version}: not fetched: {error}")
    return ReleaseTask(package=package, version=version, cache=str(DEFAULT_CACHE), offline=True)


@pytest.mark.parametrize(
    ("version", "era", "randomness", "classes"),
    [
        # every sglang release's verify target drops min-p (harness.releases.laws)
        ("0.5.18", "sglang-0.5.17-0.5.18", {"chain": PR_ERA}, [LAW_CLASS]),
        ("0.5.19", "sglang-0.5.19-0.5.21", {"chain": PR_ERA}, [LAW_CLASS]),
        # Philox's uniform rounds to 1 now and then: a masked token drafted (seed 0,
        # counter 3; docs/upstream.md, "The scan"); its server's verifier and chain, the
        # control, both on the server's plumbing
        (
            "0.5.23",
            "sglang-0.5.22-0.5.23",
            {"sglang-blockwise": SGLANG_0_5_23, "chain": SGLANG_0_5_23},
            [LAW_CLASS, "support scan"],
        ),
    ],
)
def test_a_released_sglang_sampler_is_judged_under_its_era(
    version: str, era: str, randomness: dict[str, str], classes: list[str]
) -> None:
    row = judge_release(_task("sglang", version))
    assert (row["era"], row["judged"]) == (era, True)
    assert (row["verifier"], row["randomness"]) == (list(randomness), randomness)
    assert [f["class"] for f in row["findings"]] == classes
    assert row["lossless"] is (not classes)


def test_the_first_release_is_judged_on_what_its_sampling_covers() -> None:
    row = judge_release(_task("sglang", "0.5.16"))
    assert (row["era"], row["judged"], row["lossless"]) == ("sglang-0.5.16", True, False)
    assert [f["class"] for f in row["findings"]] == [LAW_CLASS]  # its drafter: none
    assert row["drop_in"] is False  # an all-greedy batch is folded: no noise, no kept logits
    assert (row["verifier"], row["randomness"]) == (["chain"], {"chain": PR_ERA})
    assert row["not_covered"][:3] == [
        "the no-anchor layout: outside its era's contract (8 of 24 cases not run)",
        "1 of 24 cases not run: sglang 0.5.16 leaves a sampled batch's confidence to the "
        "worker's planner (outside its draft sampling)",
        "7 of 24 cases not run: sglang 0.5.16 has no folded-sampling switch: its proposer "
        "folds an all-greedy batch and samples any other batch eagerly, so a greedy-only "
        "fold of every batch (folded sampling off) is not its contract",
    ]


def test_vllm_0_34_fits_its_era_and_is_driven_by_its_own_convention() -> None:
    """0.34.0's files fit its era's contract (its speculator has the sharded and Markov
    chain methods the era names), and its speculator, from the wheel, speaks
    ``vllm-0.34`` and no earlier era's convention."""
    from harness.upstream.releases.eras import contract_differences, era_of

    _task("vllm", "0.34.0")  # fetched into the cache, or skipped
    era = era_of("vllm", "0.34.0")
    assert era is not None
    wheel = fetch("vllm", "0.34.0", cache=DEFAULT_CACHE, offline=True)
    files = extract("vllm", "0.34.0", wheel=wheel, members=(era.sampler_file,))
    assert contract_differences(era, files=files.extracted) == []
    out = _in_a_vllm_release(
        "0.34.0",
        "from harness.upstream.dispatch import convention_of\n"
        "from harness.upstream.vllm_eras import speaks_vllm_0_31\n"
        "speculator = vllm_loader.load_vllm().DSparkSpeculator\n"
        "print(convention_of(speculator).name, speaks_vllm_0_31(speculator))\n",
    )
    assert out.split()[-2:] == ["vllm-0.34", "False"]


@pytest.mark.parametrize(
    ("version", "calls", "murmur3", "step_seed"),
    [
        ("0.28.0", ["vllm/v1/worker/gpu/sample/gumbel.py:118 calls tldevice.log1p"], False, False),
        ("0.30.0", ["vllm/v1/worker/gpu/sample/gumbel.py:127 calls tldevice.log1p"], False, False),
        ("0.31.0", [], True, False),  # its own log1p series, the hash, no step mixed in
        ("0.33.0", [], True, True),
    ],
)
def test_what_the_vllm_eras_say_of_the_gumbel_kernel_holds_in_the_wheels(
    version: str, calls: list[str], murmur3: bool, step_seed: bool
) -> None:
    """Read from the wheels: up to 0.30 the Gumbel kernel draws from Triton's Philox and
    calls libdevice's log1p, which Triton's interpreter runs only with the harness's
    body (``interpreter_libdevice``); from 0.31 it hashes (murmur3), 0.33 with the step
    mixed into the seed (``spec_step_seed``), which the key model reads where the
    package has it. Every one of these eras is loaded as the vLLM package."""
    from harness.upstream.releases.eras import Loading, era_of, libdevice_calls

    _task("vllm", version)  # fetched into the cache, or skipped
    era = era_of("vllm", version)
    assert era is not None
    wheel = fetch("vllm", version, cache=DEFAULT_CACHE, offline=True)
    files = extract("vllm", version, wheel=wheel, members=era.kernel_files)
    assert libdevice_calls(era, files=files.extracted) == calls
    source = (files.extracted / era.kernel_files[0]).read_text()
    assert ("\ndef murmur3_uniform32(" in source, "\ndef spec_step_seed(" in source) == (
        murmur3,
        step_seed,
    )
    assert era.loading is Loading.VLLM_PACKAGE


def _in_a_vllm_release(version: str, body: str) -> str:
    """Run ``body`` in a process of its own with vLLM ``version`` imported from its
    extracted wheel under Triton's interpreter; its output (skipped without the pinned
    light dependencies or the wheel)."""
    from harness.releases.loading import missing_light_deps
    from harness.upstream.releases.eras import era_of

    era = era_of("vllm", version)
    assert era is not None
    missing = missing_light_deps(era.light_deps)
    if missing:
        pytest.skip(f"the light dependencies are not installed as pinned: {missing[:3]}")
    _task("vllm", version)  # fetched into the cache, or skipped
    script = (
        "from harness.upstream.loaders import vllm_loader\n"
        "from harness.upstream.releases.wheels import DEFAULT_CACHE, extract, fetch\n"
        f"wheel = fetch('vllm', {version!r}, cache=DEFAULT_CACHE, offline=True)\n"
        f"files = extract('vllm', {version!r}, wheel=wheel, members=('vllm/',))\n"
        f"vllm_loader.use_release(vllm_loader.VllmRelease(files.extracted, {version!r}))\n" + body
    )
    environment = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("version", ["0.25.0", "0.33.0"])  # the first and last era's last
def test_a_vllm_release_loads_from_its_wheel_under_the_pinned_light_dependencies(
    version: str,
) -> None:
    """Its speculator, Gumbel sampler and rejection sampler import from the extracted
    folder, in a process of their own, with the pins installed (``tox run -e releases``
    installs them; without them: skipped, the sweep's row says why)."""
    out = _in_a_vllm_release(
        version,
        "loaded = vllm_loader.load_vllm()\n"
        "print(loaded.version, loaded.DSparkSpeculator.__module__)\n",
    )
    assert out.split()[-2:] == [version, "vllm.v1.worker.gpu.spec_decode.dspark.speculator"]


def test_a_vllm_releases_scan_reads_its_tokens_without_replaying_the_noise() -> None:
    """Under Triton's interpreter a vLLM release's support scan drives its speculator at
    the convention's scan batch, and reads the speculator's ``draft_tokens`` alone: the
    replay of the call's noise that ``read`` computes for the checks (as many kernel
    programs as the call) is not run, and the tokens are ``read``'s."""
    out = _in_a_vllm_release(
        "0.33.0",
        "import torch\n"
        "from harness.plugins.implementations import parse_impl_spec\n"
        "from harness.pipeline.support_scan import RowPattern, ScanDriver, ScanPoint\n"
        "from harness.upstream.dispatch import convention_of\n"
        "from harness.upstream.vllm_convention import SCAN_BATCH, VllmSampler\n"
        "impl = parse_impl_spec('v=vllm:dense')\n"
        "assert convention_of(impl.sampler_class).scan_batch == SCAN_BATCH\n"
        "point = ScanPoint(head_kind='vanilla', dtype='float32',\n"
        "                  pattern=RowPattern.FAR_APART, bs=2, gamma=4, vocab_size=4, calls=1)\n"
        "driver = ScanDriver(impl, point)\n"
        "replay = VllmSampler.declared_stream_tokens\n"
        "def refuse(*args, **kwargs):\n"
        "    raise AssertionError('the scan replayed the noise')\n"
        "VllmSampler.declared_stream_tokens = refuse\n"
        "tokens = driver.tokens_at(0)\n"
        "VllmSampler.declared_stream_tokens = replay\n"
        "assert torch.equal(tokens, driver.built.read(driver.case).tokens)\n"
        "assert torch.equal(tokens, driver.allowed), (tokens, driver.allowed)\n"
        "print('ok')\n",
    )
    assert out.split()[-1] == "ok"


def test_vllm_0_25_gumbel_kernel_runs_under_the_interpreter_with_the_libdevice_bodies() -> None:
    """0.25.0's ``gumbel_sample`` calls ``tldevice.log1p``: under Triton's interpreter it
    fails on the stub alone, and runs with the bodies of ``libdevice_bodies()``
    installed, the release's files unchanged: every token inside the support, the same
    tokens for the same seeds and positions, every allowed token drawn somewhere, and
    the argmax where the temperature is 0."""
    out = _in_a_vllm_release(
        "0.25.0",
        "import torch\n"
        "from triton.runtime.errors import InterpreterError\n"
        "from harness.upstream.loaders.interpreter_libdevice import libdevice_bodies\n"
        "vllm_loader.load_vllm()\n"
        "from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample\n"
        "tokens, allowed = 256, 5\n"
        "logits = torch.randn(tokens, 8, generator=torch.Generator().manual_seed(0))\n"
        "logits[:, allowed:] = float('-inf')\n"
        "rows = torch.arange(tokens, dtype=torch.int32)\n"
        "def sample(temperature):\n"
        "    return gumbel_sample(logits.clone(), rows, temperature,\n"
        "        torch.arange(tokens, dtype=torch.int64) % 7, torch.arange(tokens), True)\n"
        "warm = torch.ones(tokens)\n"
        "try:\n"
        "    sample(warm)\n"
        "    raise SystemExit('the stub ran')\n"
        "except InterpreterError as error:\n"
        "    assert 'NoneType' in str(error), error\n"
        "with libdevice_bodies():\n"
        "    drawn, again, greedy = sample(warm), sample(warm), sample(torch.zeros(tokens))\n"
        "assert drawn.max() < allowed and torch.equal(drawn, again)\n"
        "assert set(drawn.tolist()) == set(range(allowed)), drawn.bincount()\n"
        "assert torch.equal(greedy, logits.argmax(dim=1))\n"
        "print('ok')\n",
    )
    assert out.split()[-1] == "ok"
