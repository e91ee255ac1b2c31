"""Real release wheels, judged unchanged: marker ``releases`` (``tox run -e releases``).

Each wheel comes from the wheel cache (``harness.upstream.releases.wheels``), fetched
once with ``pip download --no-deps`` where the cache lacks it; a wheel that can be
neither is a skip with pip's reason. Nothing of the wheels enters the repository.
"""

from __future__ import annotations

import pytest

from harness.upstream.releases.sweep import ReleaseTask, judge_release
from harness.upstream.releases.wheels import DEFAULT_CACHE, NotFetched, fetch

pytestmark = pytest.mark.releases

PR_ERA = "shared: torch's one generator, drafter and verifier in turn"
SGLANG_0_5_23 = "shared: sglang 0.5.23's plumbing"


def _task(package: str, version: str) -> ReleaseTask:
    try:
        fetch(package, version, cache=DEFAULT_CACHE)
    except NotFetched as error:
        pytest.skip(f"{package} {version}: not fetched: {error}")
    return ReleaseTask(package=package, version=version, cache=str(DEFAULT_CACHE), offline=True)


@pytest.mark.parametrize(
    ("version", "era", "randomness", "classes"),
    [
        ("0.5.18", "sglang-0.5.17-0.5.18", {"chain": PR_ERA}, []),
        ("0.5.19", "sglang-0.5.19-0.5.21", {"chain": PR_ERA}, []),
        # Philox's uniform rounds to 1 now and then: a masked token drafted (seed 0,
        # counter 3; docs/upstream.md, "The scan"); its server's verifier and chain, the
        # control, both on the server's plumbing
        (
            "0.5.23",
            "sglang-0.5.22-0.5.23",
            {"sglang-blockwise": SGLANG_0_5_23, "chain": SGLANG_0_5_23},
            ["support scan"],
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
    assert (row["era"], row["judged"], row["lossless"]) == ("sglang-0.5.16", True, True)
    assert row["findings"] == []
    assert row["drop_in"] is False  # an all-greedy batch is folded: no noise, no kept logits
    assert (row["verifier"], row["randomness"]) == (["chain"], {"chain": PR_ERA})
    assert len(row["not_covered"]) == 6  # the no-anchor layout, then the era's list


def test_a_vllm_release_past_the_table_is_an_unknown_contract() -> None:
    row = judge_release(_task("vllm", "0.34.0"))
    assert not row["judged"]
    assert "not judged: unknown contract: vllm 0.34.0 is in no era" in row["not_covered"][0]
