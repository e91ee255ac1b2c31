"""The released sglang 0.5.23 sampler on its own contract: every check means the same.

The package's ``DsparkDraftSampler`` (``--impl NAME=sglang``) is lossless on the
standard matrix and not drop-in for a named reason; a correct sampler of another
design on the same contract is lossless; each planted 0.5.23-shaped defect fails the
check aimed at it (and exactly the checks listed).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import ModuleType

import pytest
import torch

from harness.case import Case, build_inputs, make_case
from harness.pipeline.checks import tier_of
from harness.pipeline.compare import evaluate_run
from harness.pipeline.life import MIN_REPLAYS
from harness.pipeline.runner import ImplResult, run_case
from harness.plugins.eras import Era
from harness.plugins.implementations import Implementation, parse_impl_spec
from harness.testing import check_sampler
from harness.upstream.dispatch import convention_of, provenance
from harness.upstream.sglang_convention import SGLANG_0_5_23

pytestmark = pytest.mark.upstream

SHAPE = {"bs": 4, "gamma": 4, "vocab_size": 64, "hidden_size": 16, "markov_rank": 8}
MIXED = (False, True, False, False)  # one greedy row among sampled ones
BUCKETED = make_case(**SHAPE, greedy_rows=MIXED, confidence=True, max_bs=6, seed=15)
LIFE = make_case(**SHAPE, greedy_rows=MIXED, max_bs=6, replays=MIN_REPLAYS, seed=21)
GREEDY_FOLD = make_case(**SHAPE, greedy_rows=(True,) * 4, folded_sampling=False, seed=13)
ALWAYS = frozenset({"noise_budget"})  # counter noise is not the reference's exponential_ budget


@pytest.fixture(scope="module")
def samplers() -> ModuleType:
    from tests.plugins import sglang_samplers  # loads the installed package

    return sglang_samplers


def _run(case: Case, sampler_class: type) -> tuple[ImplResult, dict[str, str]]:
    run = run_case(case, [Implementation("under-test", sampler_class, "test")])
    checks = evaluate_run(run, require_observable=False).checks["under-test"]
    return run.results["under-test"], {c.name: c.status for c in checks}


def test_impl_sglang_is_the_package_sampler_in_its_own_convention() -> None:
    implementation = parse_impl_spec("today=sglang")
    assert implementation.sampler_class.__module__.startswith("sglang.srt.speculative")
    assert convention_of(implementation.sampler_class) is SGLANG_0_5_23
    assert provenance(implementation)["convention"] == "sglang-0.5.23"
    assert implementation.era is Era.SGLANG_0_5_23
    cpu_only = not torch.backends.cuda.is_built()  # the adapter's one workaround is named
    assert bool(provenance(implementation)["adaptations"]) is cpu_only


def test_a_working_copy_of_the_package_module_loads_for_its_era_and_is_lossless() -> None:
    from harness.upstream.loaders.sglang_loader import load_sglang
    from harness.upstream.sglang_convention import SAMPLER_MODULE

    path = load_sglang().modules[SAMPLER_MODULE].__file__  # the file a kernel engineer edits
    implementation = parse_impl_spec(f"copy={path}")
    assert implementation.era is Era.SGLANG_0_5_23  # detected from its imports
    assert convention_of(implementation.sampler_class) is SGLANG_0_5_23
    _, statuses = _run(BUCKETED, implementation.sampler_class)
    assert {name for name, status in statuses.items() if status == "fail"} == ALWAYS


def test_the_bug_era_modules_keep_their_surface_with_the_package_installed() -> None:
    after_fix = parse_impl_spec("after=tests/plugins/upstream/dspark_after_fix.py")
    assert after_fix.era is Era.PR36934
    _, statuses = _run(BUCKETED, after_fix.sampler_class)
    assert {name for name, status in statuses.items() if status == "fail"} == set()


def test_the_package_sampler_is_lossless_and_not_drop_in_for_its_noise_source() -> None:
    verdict = check_sampler("sglang=sglang", require="lossless")
    assert verdict.ok and verdict.lossless and not verdict.drop_in
    assert "noise source differs: counter-based noise" in verdict.summary()


def test_every_lossless_check_is_exercised_on_the_package_sampler() -> None:
    from harness.pipeline.matrix import standard_matrix

    outcomes: dict[str, set[str]] = {}
    for case in standard_matrix():
        _, statuses = _run(case, parse_impl_spec("sglang=sglang").sampler_class)
        for name, status in statuses.items():
            outcomes.setdefault(name, set()).add(status)
    lossless = {name for name in outcomes if tier_of(name) == "lossless"}
    # one torch generator's plumbing only: counter-based noise is noise_shared_with_verifier's
    one_generator = "torch_stream_shared_with_verifier"
    assert outcomes[one_generator] == {"skip"}
    assert {name for name in lossless - {one_generator} if "pass" not in outcomes[name]} == set()
    assert all("fail" not in outcomes[name] for name in lossless)


def test_one_walk_and_one_counter_advance_per_sampled_call() -> None:
    sampler_class = parse_impl_spec("sglang=sglang").sampler_class
    sampled, _ = _run(BUCKETED, sampler_class)
    assert (sampled.work.walks, sampled.work.head_steps) == (1, BUCKETED.gamma)
    assert sampled.noise_counter is not None and sampled.noise_counter.advances == 1
    assert sampled.second_call is not None and sampled.second_call.noise_counter is not None
    assert sampled.second_call.noise_counter.start == 1  # the harness owns the counter
    assert sampled.work.noise_calls == 0 and sampled.random_draws == []  # no torch RNG op
    greedy, _ = _run(GREEDY_FOLD, sampler_class)
    assert greedy.noise_counter is not None and greedy.noise_counter.advances == 0
    assert greedy.work.walks == 1


def test_greedy_requests_are_staged_as_the_server_sends_them() -> None:
    result, _ = _run(BUCKETED, parse_impl_spec("sglang=sglang").sampler_class)
    assert result.staged is not None and result.staged.step_temperatures is not None
    greedy = torch.tensor(MIXED)
    assert torch.equal(result.staged.greedy_mask, greedy)
    assert torch.equal(result.staged.temperatures[greedy], torch.ones(1))  # T = 1, top_k = 1
    assert bool((result.staged.step_temperatures[greedy] == 0).all())


def test_a_torch_gumbel_sampler_on_the_same_contract_is_lossless(samplers: ModuleType) -> None:
    verdict = check_sampler(samplers.TorchGumbelSampler, require="lossless")
    assert verdict.ok and verdict.lossless


@dataclass(frozen=True)
class DefectRow:
    check: str  # the check the defect is aimed at
    sampler: str  # its class in tests/plugins/sglang_samplers.py
    case: Case
    fails: frozenset[str]  # every check that fails, the aimed one included


ROWS = (
    DefectRow("fresh_noise", "OffsetNotAdvanced", BUCKETED, frozenset({"fresh_noise"})),
    DefectRow(
        "teacher_forcing",
        "StepLogitsOfAnotherWalk",
        BUCKETED,
        # verify_ids carries the second walk's drafts; replay and the walk count see it too
        frozenset({"teacher_forcing", "noise_replay", "outputs_written", "single_walk"}),
    ),
    DefectRow(
        "greedy_rows_argmax",
        "GreedyRowsSampled",
        BUCKETED,
        # the stream replayed at the server's step temperatures (0 on a greedy request)
        # does not give the sampled token either, as for the harness's own such defect
        frozenset({"greedy_rows_argmax", "noise_replay"}),
    ),
    DefectRow(
        "no_writes_outside_batch",
        "VerifyIdsPastBatch",
        BUCKETED,
        frozenset({"no_writes_outside_batch"}),
    ),
    DefectRow(
        "noise_shared_with_verifier",
        "KeyedWithVerifierNoise",
        BUCKETED,
        frozenset({"noise_shared_with_verifier"}),
    ),
    # its first call reads the counter its second call reads too: reused, not fresh
    DefectRow("noise_replay", "OffsetAdvancedFirstOnce", BUCKETED, frozenset({"noise_replay"})),
)


@pytest.mark.parametrize("row", ROWS, ids=[row.sampler for row in ROWS])
def test_each_planted_defect_fails_the_check_aimed_at_it(
    samplers: ModuleType, row: DefectRow
) -> None:
    _, statuses = _run(row.case, getattr(samplers, row.sampler))
    failing = {name for name, status in statuses.items() if status == "fail"}
    assert failing == row.fails | ALWAYS
    assert tier_of(row.check) == "lossless"


def test_fresh_counters_past_the_calls_range_are_a_drop_in_difference(
    samplers: ModuleType,
) -> None:
    """The counter moved before the walk: every block reads the counter after the one it
    began at, which the key check proves fresh (no other draft call and no verifier draw
    reads it), and the tokens are the stream's there: lossless, not drop-in."""
    result, statuses = _run(BUCKETED, samplers.OffsetAdvancedFirst)
    assert {name for name, status in statuses.items() if status == "fail"} == ALWAYS
    assert result.noise_counter is not None and result.counter_reads is not None
    start = result.noise_counter.start
    assert result.counter_reads.counters == (start + 1,)  # past where the call left it
    verdict = check_sampler(samplers.OffsetAdvancedFirst, require="lossless")
    assert verdict.ok and verdict.lossless and not verdict.drop_in
    assert verdict.statistical.ran and verdict.statistical.rejected is False
    (budget,) = [f for f in verdict.failures if f.check == "noise_budget"][:1]
    assert f"counter(s) {start + 1} past where the call left the counter, proven fresh" in (
        budget.detail
    )


def test_a_counter_read_again_by_the_next_call_is_not_lossless(samplers: ModuleType) -> None:
    verdict = check_sampler(samplers.OffsetAdvancedFirstOnce, require="lossless", stats=False)
    assert not verdict.lossless
    replay = [f for f in verdict.failures if f.check == "noise_replay"]
    assert replay and "past where the call left the counter (the next call's)" in (replay[0].detail)


def test_the_package_sampler_itself_fails_only_the_noise_budget() -> None:
    _, statuses = _run(BUCKETED, parse_impl_spec("sglang=sglang").sampler_class)
    assert {name for name, status in statuses.items() if status == "fail"} == ALWAYS


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="a finding of CPU-only torch builds")
def test_finding_the_first_call_asks_cuda_whether_it_is_capturing(samplers: ModuleType) -> None:
    from harness.upstream.sglang_convention import SGLANG_0_5_23

    built = SGLANG_0_5_23.build(samplers.Sampler, case=BUCKETED, inputs=build_inputs(BUCKETED))
    inputs = build_inputs(BUCKETED)
    built.stage_sampling_params(bs=BUCKETED.bs, sampling_info=inputs.sampling_info)
    with pytest.raises(RuntimeError, match="_cuda_isCurrentStreamCapturing"):
        built.sampler(inputs.hidden_states, inputs.input_ids)  # without the adapter's answer


@pytest.mark.e2e
def test_the_pytest_plugin_judges_the_package_sampler_and_a_planted_defect(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from tests.helpers import REPO_ROOT

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), *sys.path]))
    select = ["-p", "no:cacheprovider", "-k", "dspark and folded-sampled/vanilla"]
    passing = pytester.runpytest_subprocess(
        *select, "--dspark-impl", "sglang=sglang", "--dspark-require", "lossless"
    )
    passing.assert_outcomes(passed=2)
    frozen = "frozen=tests.plugins.sglang_samplers:OffsetNotAdvanced"
    failing = pytester.runpytest_subprocess(*select, "--dspark-impl", frozen)
    failing.assert_outcomes(failed=2)
    failing.stdout.fnmatch_lines(["*fresh_noise*the first call did not advance the noise counter*"])


LIFE_CHECKS = ("life_replays", "life_server_buffer", "life_fresh_noise")


def test_the_package_sampler_lives_a_server_life_through_its_convention() -> None:
    result, statuses = _run(LIFE, parse_impl_spec("sglang=sglang").sampler_class)
    assert {name: statuses[name] for name in LIFE_CHECKS} == dict.fromkeys(LIFE_CHECKS, "pass")
    assert statuses["life_drop_in"] == "fail"  # each replay's noise source, as on one call
    assert result.life is not None and len(result.life.replays) == MIN_REPLAYS
    assert result.life.out_passed
    counters = [r.result.noise_counter for r in result.life.replays]
    assert all(c is not None for c in counters)
    starts = [c.start for c in counters if c is not None]
    assert starts == sorted(starts) and starts[-1] > 0  # one counter over the whole life


@pytest.mark.parametrize(
    ("sampler", "check"),
    [("OwnOutBuffer", "life_server_buffer"), ("CounterBackAfterSecondCall", "life_fresh_noise")],
)
def test_each_life_defect_of_the_contract_fails_its_life_check(
    samplers: ModuleType, sampler: str, check: str
) -> None:
    _, one_call = _run(BUCKETED, getattr(samplers, sampler))
    assert {name for name, status in one_call.items() if status == "fail"} == ALWAYS
    _, statuses = _run(LIFE, getattr(samplers, sampler))
    assert statuses[check] == "fail"


def test_the_package_sampler_is_judged_on_its_servers_own_randomness() -> None:
    from harness.testing import implementation_of, oracle_verdict

    statistical = oracle_verdict(implementation_of("sglang=sglang"))
    assert statistical.ran and not statistical.failed, statistical.describe()
    assert statistical.describe().endswith("[judged on sglang 0.5.23's own randomness]")


def test_the_servers_plumbing_derives_both_streams_from_its_one_seed(
    samplers: ModuleType,
) -> None:
    from harness.upstream.sglang_convention import SGLANG_0_5_23

    loaded, cpu, seed = samplers.PACKAGE, torch.device("cpu"), BUCKETED.seed
    built = SGLANG_0_5_23.build(samplers.Sampler, case=BUCKETED, inputs=build_inputs(BUCKETED))
    streams = built.decode_streams(seed=seed, device=cpu)
    assert streams.shared and streams.server == f"sglang {loaded.version}"
    assert built.noise.key == loaded.draft_noise_key(seed)  # the proposer's key
    rejection = loaded.make_rejection_noise(streams.verifier.seed, cpu)  # the worker's
    assert rejection.key == loaded.rejection_noise_key(seed) != built.noise.key
    with pytest.raises(ValueError, match="built for server seed"):
        built.decode_streams(seed=seed + 1, device=cpu)


def test_a_drafter_keyed_with_the_verifiers_key_is_not_lossless(samplers: ModuleType) -> None:
    """The oracle cannot see this coupling (the two keys feed unrelated generators on the
    CPU); the exact check names it."""
    verdict = check_sampler(
        samplers.KeyedWithVerifierNoise, cases=[BUCKETED], require="lossless", stats=False
    )
    assert not verdict.lossless and not verdict.ok
    assert "noise_shared_with_verifier" in verdict.evidence()
    assert "the verifier reads the same (key, counter)" in verdict.evidence()
