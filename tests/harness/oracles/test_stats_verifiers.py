"""The verifier as a value of the statistical oracle: ours (the chain verifier) and the
released server's block-wise rejection (``harness.upstream.rejection``).

Committed tokens must follow the target under either verifier: fixed and every correct
design of another kind pass under both, legacy and every planted defect are rejected
under both, on every head kind, the temperature mix and every committed position. A
verifier that is itself wrong (accepts every draft) makes a correct sampler fail: the
oracle's verdict rests on the verifier it was given.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch

from harness.cli import main
from harness.oracles import stats
from harness.oracles.fits import JOINT, REPEAT, family_size, position_name
from harness.oracles.part import combined_statistical
from harness.oracles.problem import DEFAULT_CONFIG, StatsProblem, build_problems, group_label
from harness.oracles.scope import scope_under
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.upstream.rejection import BLOCKWISE_REJECTION, committed_block
from reference.streams import VerifierNoise
from reference.verifier import CHAIN_VERIFIER, VerifyResult, VerifyRound, VerifyStep
from tests.harness.oracles.test_stats_kill_table import CORRECT, FIRST_TOKEN_EXACT
from tests.plugins.stats_defects import STATS_DEFECTS

upstream = pytest.mark.upstream
FIXED, LEGACY = builtin_implementations(("fixed", "legacy"))


@pytest.fixture(scope="module")
def problems() -> tuple[StatsProblem, ...]:
    """The problems the released server's verifier decodes at the defaults: its scope, the
    temperature groups (it applies no truncation)."""
    config = scope_under(DEFAULT_CONFIG, verifier=BLOCKWISE_REJECTION).config
    assert config is not None
    return build_problems(config)


def test_committed_block_keeps_the_accepted_drafts_then_the_bonus() -> None:
    block = committed_block(
        draft_tokens=torch.tensor([[5, 6, 7], [5, 6, 7], [5, 6, 7]]),
        accepted=torch.tensor([0, 2, 3]),
        bonus=torch.tensor([1, 2, 3]),
    )
    assert block.committed.tolist() == [[1, -1, -1, -1], [5, 6, 2, -1], [5, 6, 7, 3]]
    assert block.num_committed.tolist() == [1, 3, 4]


@dataclass(frozen=True)
class AcceptsEveryDraft:
    """A planted verifier defect: keeps all drafts whatever p and q say."""

    name: str = "accepts-every-draft"

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        del noise

        def verify(round_: VerifyRound) -> VerifyResult:
            tokens = round_.draft.tokens
            bs, gamma = tokens.shape
            bonus = round_.target.transition_logits[tokens[:, -1]].argmax(-1)
            accepted = torch.full((bs,), gamma, dtype=torch.int64, device=device)
            return committed_block(draft_tokens=tokens, accepted=accepted, bonus=bonus)

        return verify


def test_the_oracle_verdict_rests_on_the_verifier_it_is_given(
    problems: tuple[StatsProblem, ...],
) -> None:
    under_chain = stats.run_stats(FIXED, problems=problems, verifier=CHAIN_VERIFIER)
    under_defect = stats.run_stats(FIXED, problems=problems, verifier=AcceptsEveryDraft())
    assert under_chain.passed and under_chain.verifier == "chain"
    assert under_defect.rejected and under_defect.verifier == "accepts-every-draft"
    assert under_defect.rejected_at_position(0)  # the first draft is already off the target


def test_one_verdict_from_several_verifiers_fails_when_any_rejects() -> None:
    small = replace(DEFAULT_CONFIG, rows=2_000)
    oracle = stats.run_oracle(
        small, implementations=[FIXED], verifiers=(CHAIN_VERIFIER, AcceptsEveryDraft())
    )
    assert list(oracle.by_verifier) == ["chain", "accepts-every-draft"]
    assert oracle.results["fixed"].passed  # the first verifier's
    verdict = combined_statistical(oracle.results_of("fixed"))
    assert verdict.failed and verdict.carried_by[0].startswith("accepts-every-draft:")
    passing = combined_statistical(oracle.results_of("fixed")[:1])
    assert not passing.failed and passing.p_value == oracle.results["fixed"].p_value


def test_verifiers_must_be_distinct() -> None:
    with pytest.raises(stats.StatsError, match="distinct"):
        stats.run_oracle(DEFAULT_CONFIG, verifiers=(CHAIN_VERIFIER, CHAIN_VERIFIER))


def test_an_unknown_verifier_name_is_bad_usage(tmp_path, capsys) -> None:
    code = main(["stats", "--verifiers", "nope", "--quiet", "--out-dir", str(tmp_path)])
    assert code == 2
    assert "unknown verifier 'nope'" in capsys.readouterr().err


def test_without_the_package_the_servers_verifier_is_refused_in_one_line(tmp_path, capsys) -> None:
    from harness.upstream.loaders.sglang_loader import unavailable_reason

    if unavailable_reason() is None:
        pytest.skip("sglang is installed here: the refusal cannot be seen")
    code = main(["stats", "--verifiers", "sglang-blockwise", "--quiet", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "sglang-blockwise cannot run here" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_verdicts_verifiers_are_checked_before_any_work(command, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    code = main([command, "--verifiers", "chain,nope", "--quiet", "--out-dir", str(out)])
    assert code == 2 and "unknown verifier 'nope'" in capsys.readouterr().err
    code = main([command, "--verifiers", "chain", "--no-stats", "--quiet", "--out-dir", str(out)])
    assert code == 2 and "--no-stats skips the oracle" in capsys.readouterr().err
    assert not out.exists()


def test_every_verifier_is_offered_by_its_name_without_torch() -> None:
    from harness.oracles.defaults import VERIFIER_NAMES
    from harness.oracles.verifiers import VERIFIERS

    assert tuple(VERIFIER_NAMES) == tuple(VERIFIERS)


@pytest.mark.parametrize(("names", "expected"), [(None, None), (("chain",), (CHAIN_VERIFIER,))])
def test_the_verdicts_oracle_runs_under_the_verifiers_the_options_name(
    names, expected, monkeypatch
) -> None:
    from harness.judge import judge_oracle
    from harness.options import RunOptions
    from harness.oracles import part
    from harness.oracles.verifiers import available_verifiers

    class Stop(Exception):
        pass

    seen = []

    def record(*_: object, verifiers: object, **__: object) -> None:
        seen.append(verifiers)
        raise Stop  # the verifiers are all this test asks of the run

    monkeypatch.setattr(part, "run_statistics", record)
    with pytest.raises(Stop):
        judge_oracle([FIXED], options=RunOptions(verifiers=names), power=False)
    assert seen == [available_verifiers() if expected is None else expected]


# -- under the released server's verifier ------------------------------------------------------
def _covers_every_cell(result: stats.StatsResult) -> None:
    """Every cell of the scope the released server's verifier runs at the defaults."""
    config = scope_under(DEFAULT_CONFIG, verifier=BLOCKWISE_REJECTION).config
    assert config is not None and not config.truncated
    tests = {JOINT, REPEAT, *(position_name(j) for j in range(config.gamma + 1))}
    cells = {(s.target, s.head, s.group, s.test) for s in result.statistics}
    assert cells == {
        (target.name, h, group_label(g), t)
        for target in config.targets
        for h in config.head_kinds
        for g in config.groups
        for t in tests
    }
    assert len(result.statistics) == family_size(config)


@upstream
def test_fixed_passes_and_legacy_is_rejected_under_the_servers_verifier(
    problems: tuple[StatsProblem, ...],
) -> None:
    fixed = stats.run_stats(FIXED, problems=problems, verifier=BLOCKWISE_REJECTION)
    legacy = stats.run_stats(LEGACY, problems=problems, verifier=BLOCKWISE_REJECTION)
    for result in (fixed, legacy):
        assert result.error is None and result.verifier == "sglang-blockwise"
        _covers_every_cell(result)
    assert fixed.passed, fixed.carrier_names()
    assert legacy.rejected and stats.meets_expectation(legacy)  # not on position 0 alone
    assert not legacy.rejected_at_position(0)


@upstream
@pytest.mark.parametrize("name", list(STATS_DEFECTS))
def test_every_planted_defect_is_rejected_under_the_servers_verifier(
    name: str, problems: tuple[StatsProblem, ...]
) -> None:
    result = stats.run_stats(
        Implementation(name, STATS_DEFECTS[name], f"test:{name}"),
        problems=problems,
        verifier=BLOCKWISE_REJECTION,
    )
    assert result.error is None and result.rejected, f"p = {result.p_value:.3g}"
    assert result.rejected_at_position(0) is (name not in FIRST_TOKEN_EXACT)
    assert "greedy" not in {s.group for s in result.rejections()}


@upstream
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_designs_pass_under_the_servers_verifier(
    name: str, problems: tuple[StatsProblem, ...]
) -> None:
    result = stats.run_stats(
        Implementation(name, CORRECT[name], f"test:{name}"),
        problems=problems,
        verifier=BLOCKWISE_REJECTION,
    )
    assert result.passed, f"p = {result.p_value:.3g}: {result.carrier_names()}"
