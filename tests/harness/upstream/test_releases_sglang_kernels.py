"""sglang 0.5.16-0.5.21 judged under their own kernels: marker ``releases`` (real wheels
from the wheel cache; skipped with pip's reason where a wheel can be had neither there
nor from the index).

A row loads the wheel's own step kernel (``SampleStepTokens``), Markov heads and flags
through the sglang loader (``harness.upstream.sglang_wheel``). Shown two ways:
where the loaded sampler's kernel and heads come from, and a defect planted in a copy
of the wheel (in ``tmp_path``; the cache's wheel is never changed) that the row catches
and that the old stand-in, the harness's surface, misses on the same wheel.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.releases.laws import LAW_CLASS
from harness.releases.loading import LoadedRelease, load_release
from harness.releases.sweep import ReleaseTask, judge_release
from harness.upstream import sglang_wheel
from harness.upstream.loaders import sglang_loader
from harness.upstream.releases.eras import era_of
from harness.upstream.releases.wheels import DEFAULT_CACHE, NotFetched, extract, fetch
from reference.draft_model import make_toy_draft_model

pytestmark = pytest.mark.releases

KERNEL_0_5_16 = "sglang/srt/speculative/dspark_components/kernels/dspark_draft_model.py"
KERNEL = "sglang/kernels/ops/speculative/dspark/dspark_draft_model.py"
HEADS = "sglang/srt/models/dspark.py"
# The step kernel's torch path (what runs on a CPU) drafts every row at T = 1.
TEMPERATURE = (
    "torch.softmax(step_logits.float() / temperatures[:, None], dim=-1)",
    "torch.softmax(step_logits.float(), dim=-1)",
)
# The heads' step bias doubled: the kept step logits are not the drafter's.
BIAS = ("return self.markov_w2(latent_states)", "return 2 * self.markov_w2(latent_states)")


@pytest.fixture(autouse=True)
def _installed_sglang_after() -> Iterator[None]:
    """A row points this process's sglang loader at its wheel: put it back after."""
    yield
    sglang_loader.use_release(None)


def _wheel(version: str) -> Path:
    try:
        return fetch("sglang", version, cache=DEFAULT_CACHE)
    except NotFetched as error:
        pytest.skip(f"sglang {version}: not fetched: {error}")


def _planted(tmp_path: Path, version: str, file: str, defect: tuple[str, str]) -> Path:
    """A cache in ``tmp_path`` holding a copy of the release's wheel whose ``file`` has
    ``defect`` (old text -> new text) planted, everything else as released."""
    wheel = _wheel(version)
    copy = tmp_path / f"sglang-{version}" / wheel.name
    copy.parent.mkdir()
    old, new = defect
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(copy, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name == file:
                text = data.decode()
                assert text.count(old) >= 1, f"{old!r} is not in {file}"
                data = text.replace(old, new).encode()
            target.writestr(name, data)
    return tmp_path


def _row(version: str, cache: Path, *, scan_triples: int = 0) -> dict[str, object]:
    task = ReleaseTask(
        package="sglang",
        version=version,
        cache=str(cache),
        offline=True,
        scan_triples=scan_triples,
    )
    return dict(judge_release(task))


@pytest.mark.parametrize("version", ["0.5.16", "0.5.19", "0.5.21"])
def test_a_row_loads_the_wheels_own_kernel_heads_and_flags(version: str) -> None:
    """The sampler the row judges, its ``SampleStepTokens``, its flags and the heads its
    drafter holds are the wheel's files, loaded from the extracted folder."""
    era = era_of("sglang", version)
    assert era is not None
    wheel = _wheel(version)
    loaded = load_release(
        era,
        files=lambda: extract("sglang", version, wheel=wheel, members=era.members),
        name="r",
    )
    assert isinstance(loaded, LoadedRelease), loaded
    assert loaded.notes == ()  # nothing stands in for the kernel, the heads or the flags
    folder = extract("sglang", version, wheel=wheel, members=era.members).extracted
    modules = sglang_loader.load_modules().modules
    files = {name: Path(str(module.__file__)) for name, module in modules.items()}
    assert all(path.is_relative_to(folder) for path in files.values()), files
    sampler = loaded.implementation.sampler_class
    scope = sampler.__call__.__globals__  # the module the sampler runs in
    assert sampler is modules[scope["__name__"]].DsparkDraftSampler
    assert files[scope["__name__"]] == folder / era.sampler_file
    kernel = sglang_wheel.STEP_KERNELS[0 if version == "0.5.16" else 1]
    assert scope["SampleStepTokens"] is modules[kernel].SampleStepTokens
    assert files[kernel] == folder / (KERNEL_0_5_16 if version == "0.5.16" else KERNEL)
    assert scope["envs"] is modules[sglang_wheel.ENVIRON].envs
    assert files[sglang_wheel.ENVIRON] == folder / "sglang/srt/environ.py"
    for kind, head in [
        ("vanilla", "VanillaMarkov"),
        ("gated", "GatedMarkovHead"),
        ("rnn", "RNNHead"),
    ]:
        toy = make_toy_draft_model(
            vocab_size=32,
            hidden_size=8,
            markov_rank=4,
            head_kind=kind,
            sample_from_anchor=True,
            seed=0,
        )
        drafter = sglang_wheel.WheelDrafter(toy)
        assert type(drafter.markov_head) is getattr(modules[sglang_wheel.HEADS], head)
    assert files[sglang_wheel.HEADS] == folder / HEADS


@pytest.mark.parametrize(
    ("version", "file", "defect", "classes"),
    [
        ("0.5.16", KERNEL_0_5_16, TEMPERATURE, {"noise_replay"}),
        ("0.5.19", KERNEL, TEMPERATURE, {"noise_replay"}),
        ("0.5.21", HEADS, BIAS, {"teacher_forcing"}),
    ],
)
def test_a_defect_in_the_wheels_kernels_is_caught_where_the_stand_in_missed_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    file: str,
    defect: tuple[str, str],
    classes: set[str],
) -> None:
    """A copy of the release's wheel with a defect planted in its step kernel or its
    heads: the row runs them and fails; the same wheel judged with the harness's surface
    standing in for them (as rows were judged before) passes, blind to it."""
    cache = _planted(tmp_path, version, file, defect)
    row = _row(version, cache)
    found = {f["class"] for f in row["findings"]}  # type: ignore[attr-defined]
    assert (row["judged"], row["lossless"]) == (True, False)
    assert classes <= found, row["findings"]
    monkeypatch.setattr(sglang_wheel, "lacking", lambda extracted: ["(stood in)"])
    blind = _row(version, cache)
    # its verify target's finding only (every sglang release's, harness.releases.laws)
    blind_classes = [f["class"] for f in blind["findings"]]  # type: ignore[attr-defined]
    assert (blind["judged"], blind_classes) == (True, [LAW_CLASS])
    assert any("(stood in)" in n for n in blind["not_covered"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.20", "0.5.21"])
def test_a_sound_release_keeps_its_verdict_under_its_own_kernels(version: str) -> None:
    """The releases whose drafters the surface judged lossless and drop-in stay so under
    their own kernels, heads and flags: the row's one finding is its verify target's
    (``harness.releases.laws``), which alone makes it neither lossless nor drop-in; and
    no row says the surface stands in for them."""
    _wheel(version)
    row = _row(version, DEFAULT_CACHE, scan_triples=4096)  # the sweep's default scan
    classes = [f["class"] for f in row["findings"]]  # type: ignore[attr-defined]
    assert (row["judged"], row["lossless"], classes) == (True, False, [LAW_CLASS])
    assert not any("stands in for its step kernel" in n for n in row["not_covered"])  # type: ignore[attr-defined]


@pytest.mark.interpreter
@pytest.mark.parametrize("version", ["0.5.16", "0.5.19", "0.5.21"])
def test_the_wheels_triton_kernels_give_the_tokens_of_the_torch_paths_a_row_runs(
    monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    """On a CPU the wheel's own dispatch runs its kernels' torch paths, which the rows
    judge; their Triton kernels (CUDA only in a row) run here under Triton's interpreter,
    unchanged, on the same inputs: the same tokens. The step sampler on logits over
    three vocabulary tiles, sampled and greedy rows, a temperature at the 1e-5 clamp;
    the fused greedy step (0.5.19 on) in float32 (in bfloat16 it accumulates in float32
    where the torch path rounds, near-ties apart, as the wheel's own docstring says)."""
    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read as the wheel's kernels are defined
    era = era_of("sglang", version)
    assert era is not None
    folder = extract("sglang", version, wheel=_wheel(version), members=era.members).extracted
    modules = sglang_wheel.load_wheel(folder, version=version).modules
    kernels = modules[sglang_wheel.STEP_KERNELS[0 if version == "0.5.16" else 1]]
    generator = torch.Generator().manual_seed(0)
    bs, vocab, rank = 32, 2100, 16
    step = {
        "step_logits": torch.randn(bs, vocab, generator=generator) * 3,
        "temperatures": torch.cat(
            [torch.full((1,), 1e-5), torch.rand(bs - 1, generator=generator) + 0.3]
        ),
        "greedy_mask": torch.rand(bs, generator=generator) < 0.25,
        "exp_noise": torch.empty(bs, vocab).exponential_(generator=generator),
    }
    drawn = kernels.SampleStepTokens.torch(**step)
    assert torch.equal(kernels.SampleStepTokens.triton(**step), drawn)
    assert len(set(drawn.tolist())) > bs // 2  # sampled, not one argmax row after another
    if version == "0.5.16":
        assert not hasattr(kernels, "MarkovGreedyStep")  # 0.5.16-0.5.18 have no fused walk
        return
    greedy = {
        "base_logits": torch.randn(bs, vocab, generator=generator),
        "prev_embeds": torch.randn(bs, rank, generator=generator),
        "w2_weight": torch.randn(vocab, rank, generator=generator),
    }
    fused = kernels.MarkovGreedyStep.triton(**greedy)
    assert torch.equal(fused, kernels.MarkovGreedyStep.torch(**greedy))
