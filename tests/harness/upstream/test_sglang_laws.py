"""An sglang release's verify target held against its own non-speculative sampler
(``harness.upstream.sglang_laws``, ``harness.releases.laws``).

On a release-shaped folder of our own (``tmp_path``): a sampler of ours that draws from
``reference.request_law``, and verify targets that keep that law (no false alarm), drop
min-p, drop top-p, or need a CUDA-only kernel, each caught where it acts and nowhere
else. Then the installed sglang 0.5.23 (marker ``upstream``) and every cached release
(marker ``releases``), whose verify targets drop min-p: the finding this check exists for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.releases.laws import far_logits, grid, server_laws
from harness.upstream.loaders import sglang_loader
from harness.upstream.loaders.wheel_functions import WheelFunctions
from harness.upstream.releases.era_parts import ServerLaws
from harness.upstream.releases.eras import era_of, known_versions
from harness.upstream.releases.wheels import DEFAULT_CACHE, NotFetched, extract, fetch
from harness.upstream.sglang_laws import (
    SAMPLER_ANSWERS,
    TOP_K_ALL,
    MultinomialRecorder,
    StagedBatch,
    compare_laws,
)
from reference.request_law import truncated_probs

SAMPLER = '''
import torch

from reference.request_law import truncated_probs


def sample(probs, top_ks, top_ps, min_ps, need_min_p_sampling, sampling_seed, positions):
    """Our own sampler in the release's calling form: draws from the reference law."""
    weights = truncated_probs(
        probs.double(),
        top_ks=top_ks.long(),
        top_ps=top_ps.double(),
        min_ps=min_ps.double() if need_min_p_sampling else torch.zeros_like(top_ps).double(),
    )
    ranked, order = weights.float().sort(dim=-1, descending=True)
    return torch.gather(order, 1, torch.multinomial(ranked, num_samples=1)).view(-1)
'''

VERIFY = """
import torch

from reference.request_law import truncated_probs

if torch.cuda.is_available():
    top_p_renorm_prob = object()
else:
    top_p_renorm_prob = None


def _law(next_token_logits, sampling_info, *, top_p=True, min_p=True):
    probs = torch.softmax(next_token_logits.double() / sampling_info.temperatures, dim=-1)
    return truncated_probs(
        probs,
        top_ks=sampling_info.top_ks.long(),
        top_ps=sampling_info.top_ps.double() if top_p else torch.ones(probs.shape[0]).double(),
        min_ps=sampling_info.min_ps.double() if min_p else torch.zeros(probs.shape[0]).double(),
    )


def faithful(*, next_token_logits, sampling_info, draft_token_num, bs):
    return _law(next_token_logits, sampling_info)


def drops_min_p(*, next_token_logits, sampling_info, draft_token_num, bs):
    return _law(next_token_logits, sampling_info, min_p=False)


def drops_top_p(*, next_token_logits, sampling_info, draft_token_num, bs):
    return _law(next_token_logits, sampling_info, top_p=False)


def top_p_on_cuda_only(*, next_token_logits, sampling_info, draft_token_num, bs):
    if sampling_info.need_top_p_sampling:
        return top_p_renorm_prob(next_token_logits)
    return _law(next_token_logits, sampling_info)
"""

PKG = "sglang"


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A release-shaped folder holding our sampler and verify targets."""
    for module, text in (("srt/layers/sampler.py", SAMPLER), ("srt/verify.py", VERIFY)):
        path = tmp_path / PKG / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def laws(verify: str, *, sglangs_branch: bool = False) -> ServerLaws:
    """Our verify target, taken for every batch (or, ``sglangs_branch``, as sglang's accept
    takes it: only for a batch that needs top-k or top-p, temperatures otherwise)."""
    return ServerLaws(
        sampler=f"{PKG}.srt.layers.sampler.sample",
        verify_target=f"{PKG}.srt.verify.{verify}",
        branch="our test's verify",
        temperatures_otherwise=sglangs_branch,
    )


def differing(root: Path, verify: str, *, sglangs_branch: bool = False) -> set[tuple[str, str]]:
    compared = compare_laws(
        laws(verify, sglangs_branch=sglangs_branch), root=root, sets=grid(), logits=far_logits()
    )
    assert len(compared.sets) == 2 * len(grid())  # each set alone, then all mixed
    return {(s.group, s.batch) for s in compared.differing}


def with_(part: str) -> set[tuple[str, str]]:
    """Every (set, batch) whose set carries ``part`` ("min-p", "top-p")."""
    return {(s.label, batch) for s in grid() if part in s.label for batch in ("alone", "mixed")}


def test_a_verify_target_that_is_its_samplers_law_passes(release: Path) -> None:
    compared = compare_laws(laws("faithful"), root=release, sets=grid(), logits=far_logits())
    assert compared.differing == ()
    assert len(compared.judged) == 16 and compared.not_run() == []
    assert max(s.max_gap for s in compared.sets) < 1e-6


def test_a_verify_target_that_drops_min_p_fails_on_the_min_p_sets_only(release: Path) -> None:
    assert differing(release, "drops_min_p") == with_("min-p")


def test_a_verify_target_that_drops_top_p_fails_on_the_top_p_sets_only(release: Path) -> None:
    assert differing(release, "drops_top_p") == with_("top-p")


def test_sglangs_temperatures_only_branch_drops_min_p_from_a_batch_that_needs_no_top_k_or_top_p(
    release: Path,
) -> None:
    # the faithful target, but behind sglang's branch: a min-p-only batch never reaches it
    assert differing(release, "faithful", sglangs_branch=True) == {("T=1 min-p 0.2", "alone")}


def test_a_branch_that_needs_a_cuda_only_kernel_is_not_run_and_says_so(release: Path) -> None:
    compared = compare_laws(
        laws("top_p_on_cuda_only"), root=release, sets=grid(), logits=far_logits()
    )
    # each top-p set alone, and the whole mixed batch (it needs top-p), are not run
    not_run = {(s.group, s.batch) for s in compared.sets if s.not_run}
    assert not_run == {(s, "alone") for s, _ in with_("top-p")} | {
        (s.label, "mixed") for s in grid()
    }
    lines = compared.not_run()
    assert len(lines) == 2 and all("CUDA only, None on a CPU" in line for line in lines)
    assert compared.differing == ()


def test_a_batch_is_staged_as_sglang_stages_it() -> None:
    greedy, plain, truncated = grid()[3], grid()[0], grid()[-1]
    staged = StagedBatch.of([greedy, plain])
    assert staged.temperatures.tolist() == [[1.0], [pytest.approx(plain.temperature)]]
    assert staged.top_ks.tolist() == [1, TOP_K_ALL]
    assert staged.need_top_k_sampling and not staged.need_top_p_sampling
    assert not staged.need_min_p_sampling
    assert StagedBatch.of([plain]).need_top_k_sampling is False
    assert StagedBatch.of([truncated]).need_min_p_sampling is True


def test_a_row_without_laws_or_files_carries_none(release: Path) -> None:
    assert server_laws(None, root=release) is None
    assert server_laws(era_of("sglang", "0.5.23"), root=None) is None
    missing = server_laws(era_of("sglang", "0.5.23"), root=release)  # not sglang's files
    assert missing is not None and not missing.evidence and missing.judged == []
    assert len(missing.not_covered) == 1 and "not run" in missing.not_covered[0]


def _installed_root() -> Path:
    return sglang_loader.load_modules().root.parent


@pytest.mark.upstream
def test_sglang_0_5_23s_verify_target_drops_min_p_against_its_own_sampler() -> None:
    row = server_laws(era_of("sglang", "0.5.23"), root=_installed_root())
    assert row is not None and row.evidence and len(row.judged) == 16
    assert "T=1 min-p 0.2 (alone, mixed): 8 of 8 rows differ" in row.evidence
    assert "T=1 top-k 3" not in row.evidence and "T=1 top-p 0.8" not in row.evidence


@pytest.mark.upstream
def test_our_law_is_sglang_0_5_23s_non_speculative_sampler_on_the_grid() -> None:
    _assert_our_law_is_its_samplers("0.5.23", root=_installed_root())


@pytest.mark.releases
@pytest.mark.parametrize("version", known_versions("sglang"))
def test_our_law_is_every_sglang_releases_non_speculative_sampler_on_the_grid(
    version: str,
) -> None:
    """So the oracle's law on an sglang row (ours, under chain) is its server's own."""
    _assert_our_law_is_its_samplers(version, root=_cached_release(version))


def _cached_release(version: str) -> Path:
    """The files of sglang ``version`` extracted from the cached wheel (skip: not fetched)."""
    era = era_of("sglang", version)
    assert era is not None
    try:
        wheel = fetch("sglang", version, cache=DEFAULT_CACHE)
    except NotFetched as error:
        pytest.skip(f"sglang {version}: not fetched: {error}")
    return extract("sglang", version, wheel=wheel, members=era.members).extracted


def _assert_our_law_is_its_samplers(version: str, *, root: Path) -> None:
    era = era_of("sglang", version)
    assert era is not None and era.laws is not None
    recorder = MultinomialRecorder()
    module, _, name = era.laws.sampler.rpartition(".")
    answers = {**SAMPLER_ANSWERS, "torch": recorder}
    loaded = WheelFunctions(root, package="sglang", answers=answers)
    sampler = loaded.function(module, name)
    logits = far_logits().float()
    for parameters in grid():
        staged = StagedBatch.of([parameters] * logits.shape[0])
        theirs = recorder.law(sampler, staged=staged, logits=logits).double()
        probs = torch.softmax(logits.double() / staged.temperatures.double(), dim=-1)
        ours = truncated_probs(
            probs,
            top_ks=staged.top_ks.long(),
            top_ps=staged.top_ps.double(),
            min_ps=staged.min_ps.double(),
        )
        assert torch.equal(ours > 0, theirs > 0), parameters.label
        assert torch.allclose(ours, theirs, atol=1e-6), parameters.label


@pytest.mark.releases
@pytest.mark.parametrize("version", known_versions("sglang"))
def test_every_sglang_releases_verify_target_drops_min_p(version: str) -> None:
    row = server_laws(era_of("sglang", version), root=_cached_release(version))
    assert row is not None and row.evidence
    assert "T=1 min-p 0.2 (alone" in row.evidence and "8 of 8 rows differ" in row.evidence


@pytest.mark.upstream
def test_the_versions_tables_sglang_row_holds_its_verify_target_law() -> None:
    from harness.releases.versions import _SGLANG, _installed_laws

    assert _installed_laws("after-fix") is None  # our own modules: no server's law
    row = _installed_laws(_SGLANG)
    assert row is not None and "T=1 min-p 0.2 (alone, mixed): 8 of 8 rows differ" in row.evidence
