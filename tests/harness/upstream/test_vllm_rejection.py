"""vLLM 0.33's ``rejection_sample`` as a verifier of the statistical oracle
(``harness.upstream.vllm_rejection``).

On a round where the acceptance law is exact (the draft's law is the target's: every
draft kept; disjoint supports: none kept) vLLM's verifier and our chain verifier agree
row for row; greedy rows commit the target's argmax walk; the oracle under vLLM's
verifier, rows cut for the interpreter, passes the reference sampler and rejects
legacy. The ``vllm`` tests need the released package (``tox run -e vllm``); the rest
(the row cut, the refusal without the package) run everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch

from harness.cli import main
from harness.oracle_cut import OUR_LAW, VLLM_LAW, OracleCut
from harness.oracles import stats
from harness.oracles.defaults import ParameterSet
from harness.oracles.problem import (
    DEFAULT_CONFIG,
    FAR,
    build_problems,
    far_target,
    group_truncation,
)
from harness.plugins.implementations import builtin_implementations
from harness.upstream.loaders import vllm_loader
from harness.upstream.vllm_laws import Request, processed_logits, sampler_law
from harness.upstream.vllm_rejection import (
    ROW_CUT,
    VERIFIER_CUT,
    VLLM_REJECTION,
    RequestNoise,
    requests_of,
)
from reference.streams import VerifierNoise
from reference.target_model import MarkovTargetModel
from reference.verifier import (
    CHAIN_VERIFIER,
    DraftBlock,
    Verifier,
    VerifyResult,
    VerifyRound,
    VerifyStep,
)

MISSING = vllm_loader.unavailable_reason()
if MISSING is None:
    vllm_loader.load_vllm()  # at collection: its import sets process-wide variables once
    from tests.harness.upstream.test_interpreter_libdevice import log1p_kernel


needs_vllm = pytest.mark.vllm  # skipped without the package, with the loader's one-line reason


CPU = torch.device("cpu")
GAMMA, V = 4, 8
# T = 0.5, 1 and 2 are exact in float32: p and q of the same logits are then equal bit for bit
TEMPERATURES = (0.5, 1.0, 2.0, 0.0)
# The oracle under vLLM's verifier in a test: gated (legacy's strongest head at the far
# target), T = 0.6, 250 rows per head: legacy's family p at seeds 0-5 under the chain
# verifier is 1e-42 or below, and the law of the committed tokens is the same under any
# exact verifier. No truncated set: the double walk shows at a temperature alone.
SMALL = replace(
    DEFAULT_CONFIG,
    rows=250,
    head_kinds=("gated",),
    targets=(FAR,),
    temperatures=(0.6,),
    truncated=(),
)


def round_of(
    *,
    target: MarkovTargetModel,
    anchors: torch.Tensor,
    tokens: torch.Tensor,
    step_logits: torch.Tensor,
    temperatures: torch.Tensor,
) -> VerifyRound:
    greedy = temperatures == 0
    return VerifyRound(
        anchors=anchors,
        draft=DraftBlock(
            tokens=tokens,
            step_logits=step_logits,
            temperatures=torch.where(greedy, 1.0, temperatures).float(),
            greedy_mask=greedy,
        ),
        target=target,
        target_temperatures=temperatures,
        target_greedy=greedy,
    )


def rows_of(temperatures: tuple[float, ...], *, rows: int) -> torch.Tensor:
    return torch.tensor(temperatures, dtype=torch.float64).repeat(rows // len(temperatures))


def target_walk_round(*, rows: int, seed: int) -> VerifyRound:
    """Drafts drawn from the target's own law, the target's logits kept as the step
    logits: ``q`` is ``p``, so every draft is accepted (greedy rows draft the argmax)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(V, V, generator=generator, dtype=torch.float64).float().double()
    target = MarkovTargetModel(logits)
    temperatures = rows_of(TEMPERATURES, rows=rows)
    greedy = temperatures == 0
    anchors = torch.randint(0, V, (rows,), generator=generator)
    previous, tokens, kept = anchors, [], []
    for _ in range(GAMMA):
        step = logits[previous]  # [rows, V]
        scaled = step / torch.where(greedy, 1.0, temperatures).unsqueeze(1)
        drawn = torch.multinomial(torch.softmax(scaled, -1), 1, generator=generator).squeeze(1)
        previous = torch.where(greedy, step.argmax(-1), drawn)
        tokens.append(previous)
        kept.append(step.float())
    return round_of(
        target=target,
        anchors=anchors,
        tokens=torch.stack(tokens, 1),
        step_logits=torch.stack(kept, 1),
        temperatures=temperatures,
    )


def disjoint_round(*, rows: int, seed: int) -> VerifyRound:
    """The target puts every token's mass on 0..V/2-1 (the others 1e4 below: probability
    0 in float32 and float64), the draft on V/2..V-1: no draft can be accepted, and the
    first committed token follows the target."""
    generator = torch.Generator().manual_seed(seed)
    half = V // 2
    logits = torch.randn(V, V, generator=generator, dtype=torch.float64)
    logits[:, half:] = -1e4
    draft_logits = torch.randn(rows, GAMMA, V, generator=generator)
    draft_logits[..., :half] = -torch.inf
    return round_of(
        target=MarkovTargetModel(logits),
        anchors=torch.randint(0, half, (rows,), generator=generator),
        tokens=torch.randint(half, V, (rows, GAMMA), generator=generator),
        step_logits=draft_logits,
        temperatures=rows_of(TEMPERATURES, rows=rows),
    )


def verifier_noise(seed: int) -> VerifierNoise:
    return VerifierNoise(seed=seed, generator=torch.Generator(CPU).manual_seed(seed))


def verified(verifier: Verifier, round_: VerifyRound, *, seed: int) -> VerifyResult:
    return verifier.start(noise=verifier_noise(seed), device=CPU)(round_)


# -- everywhere ----------------------------------------------------------------------------------
TEST_CUT = OracleCut(rows=300, by="cut-chain (a test)")


@dataclass(frozen=True)
class CutChain:
    """Our chain verifier, declared slow: the oracle must cut its rows."""

    name: str = "cut-chain"
    oracle_cut: OracleCut | None = TEST_CUT
    reads_truncation: bool = True  # our chain's target law: each request's

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        return CHAIN_VERIFIER.start(noise=noise, device=device)


def test_a_slow_verifier_runs_at_its_row_cut_and_the_others_at_the_config() -> None:
    config = replace(DEFAULT_CONFIG, head_kinds=("vanilla",), temperatures=(1.0,))
    assert stats.scope_under(config, verifier=CHAIN_VERIFIER) == stats.Scope(config=config)
    # it applies each request's truncation as vLLM's sampler does: every group, each
    # judged against vLLM's own law
    under_theirs = stats.scope_under(config, verifier=VLLM_REJECTION)
    assert under_theirs.config == replace(config, rows=ROW_CUT, stage_rows=(ROW_CUT,), law=VLLM_LAW)
    assert under_theirs.cuts == (VERIFIER_CUT,)
    cut = replace(config, rows=300)
    assert stats.scope_under(config, verifier=CutChain()) == stats.Scope(
        config=cut, cuts=(CutChain().oracle_cut,)
    )
    assert [cut.target_rows(t) for t in cut.targets] == [300, 300, 300]
    small = replace(config, rows=200)
    # never more rows than asked: a cut that cuts nothing is not stated
    assert stats.scope_under(small, verifier=CutChain()) == stats.Scope(config=small)

    fixed = builtin_implementations(("fixed",))
    oracle = stats.run_oracle(config, implementations=fixed, verifiers=(CHAIN_VERIFIER, CutChain()))
    assert {v: s["fixed"].config for v, s in oracle.scopes.items()} == {
        "chain": config,
        "cut-chain": cut,
    }
    assert oracle.by_verifier["chain"]["fixed"].rows == {"far": 5_500, "mid": 1_000, "near": 1_000}
    under_cut = oracle.by_verifier["cut-chain"]["fixed"]
    assert under_cut.rows == {"far": 300, "mid": 300, "near": 300}
    assert under_cut.passed and under_cut.cuts == (CutChain().oracle_cut,)
    stated = (
        "cut by cut-chain (a test): at most 300 rows per head; "
        "ran far 300, mid 300, near 300 rows per head"
    )
    assert under_cut.scope() == stated
    chain_seen = {
        (b.target, b.position): b.rows for b in oracle.by_verifier["chain"]["fixed"].bounds
    }
    assert all(b.rows < chain_seen[(b.target, b.position)] for b in under_cut.bounds)
    chain_bound = min(b.fraction or 1.0 for b in oracle.by_verifier["chain"]["fixed"].bounds)
    assert min(b.fraction or 1.0 for b in under_cut.bounds) > chain_bound  # fewer rows, weaker


def test_the_row_cut_is_stated_in_the_text(tmp_path) -> None:
    from harness.render.statistics import cut_lines

    config = replace(DEFAULT_CONFIG, head_kinds=("vanilla",), temperatures=(1.0,))
    oracle = stats.run_oracle(
        config, implementations=builtin_implementations(("fixed",)), verifiers=(CutChain(),)
    )
    assert cut_lines(oracle) == [
        "fixed under cut-chain: rows per head far 300, mid 300, near 300, 4 rounds, heads "
        "vanilla (cut by cut-chain (a test)); its detection bounds are at those rows"
    ]
    assert oracle.problem.config.rows == 300  # the first verifier's problems


def test_without_the_package_vllms_verifier_is_refused_in_one_line(tmp_path, capsys) -> None:
    if MISSING is None:
        pytest.skip("vllm loads here: the refusal cannot be seen")
    code = main(["stats", "--verifiers", "vllm-rejection", "--quiet", "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "vllm-rejection cannot run here" in err and err.count("\n") == 1


# -- with vLLM installed -------------------------------------------------------------------------
@needs_vllm
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "case",
    [pytest.param(target_walk_round, id="q-is-p"), pytest.param(disjoint_round, id="disjoint")],
)
def test_the_acceptance_agrees_with_the_chain_verifiers_where_both_are_exact(
    case, seed: int
) -> None:
    round_ = case(rows=16, seed=seed)
    ours = verified(CHAIN_VERIFIER, round_, seed=seed)
    theirs = verified(VLLM_REJECTION, round_, seed=seed)
    every = GAMMA + 1 if case is target_walk_round else 1
    assert torch.equal(ours.num_committed, torch.full((16,), every))
    assert torch.equal(theirs.num_committed, ours.num_committed)
    kept = torch.arange(GAMMA + 1) < every
    assert torch.equal(theirs.committed[:, kept][:, :-1], round_.draft.tokens[:, : every - 1])
    assert bool((theirs.committed[:, ~kept] == -1).all())
    if case is disjoint_round:  # the one committed token is the target's: 0..V/2-1
        assert bool((theirs.committed[:, 0] < V // 2).all())
    greedy = round_.target_greedy
    assert torch.equal(theirs.committed[greedy], ours.committed[greedy])  # both the argmax


@needs_vllm
def test_greedy_rows_commit_the_targets_argmax_walk() -> None:
    rows = 24
    generator = torch.Generator().manual_seed(5)
    target = MarkovTargetModel(torch.randn(V, V, generator=generator, dtype=torch.float64))
    argmax = target.transition_logits.argmax(-1)  # [V]
    anchors = torch.randint(0, V, (rows,), generator=generator)
    walk, previous = [], anchors
    for _ in range(GAMMA):
        previous = argmax[previous]
        walk.append(previous)
    tokens = torch.stack(walk, 1)
    # row r keeps the argmax walk for r % (GAMMA + 1) drafts, then drafts another token
    first_off = torch.arange(rows) % (GAMMA + 1)
    off = torch.arange(GAMMA) >= first_off.unsqueeze(1)
    tokens = torch.where(off, (tokens + 1 + torch.arange(rows).unsqueeze(1) % (V - 1)) % V, tokens)
    round_ = round_of(
        target=target,
        anchors=anchors,
        tokens=tokens,
        step_logits=torch.randn(rows, GAMMA, V, generator=generator),
        temperatures=torch.zeros(rows, dtype=torch.float64),
    )
    theirs = verified(VLLM_REJECTION, round_, seed=0)
    assert torch.equal(theirs.num_committed, first_off + 1)
    previous, expected = anchors, torch.full((rows, GAMMA + 1), -1)
    for j in range(GAMMA + 1):
        previous = argmax[previous]
        expected[:, j] = torch.where(j <= first_off, previous, -1)
    assert torch.equal(theirs.committed, expected)
    assert torch.equal(theirs.committed, verified(CHAIN_VERIFIER, round_, seed=0).committed)


@needs_vllm
def test_the_oracle_under_vllms_verifier_passes_reference_and_rejects_legacy() -> None:
    problems = build_problems(SMALL)
    reference, legacy = builtin_implementations(("reference", "legacy"))
    passed = stats.run_stats(reference, problems=problems, verifier=VLLM_REJECTION)
    rejected = stats.run_stats(legacy, problems=problems, verifier=VLLM_REJECTION)
    for result in (passed, rejected):
        assert result.error is None and result.verifier == "vllm-rejection"
        assert result.rows == {"far": 250}
    assert passed.passed, passed.carrier_names()
    assert rejected.rejected and stats.meets_expectation(rejected), f"p = {rejected.p_value:.3g}"
    assert not rejected.rejected_at_position(0)  # both walks draw the first token alike


@needs_vllm
def test_vllms_law_is_its_verify_target_and_not_ours_where_truncations_combine() -> None:
    """On the oracle's far target: the law vLLM's sampler draws from (``sampler_law``, the
    oracle's law under its verifier) is the target its verify hands ``rejection_sample``,
    and ours (``reference.request_law``) where a set truncates one way, not where they
    combine."""
    far = far_target(DEFAULT_CONFIG)
    every_token = torch.arange(far.vocab_size)
    groups = DEFAULT_CONFIG.truncated
    requests = [Request.of(g) for g in groups]
    laws = sampler_law(far.transition_logits, requests=requests).double()  # [G, V, V]
    targets = processed_logits(far.transition_logits, requests=requests).double().softmax(-1)
    assert torch.equal(laws > 0, targets > 0) and torch.allclose(laws, targets, atol=1e-6)
    for group, law in zip(groups, laws, strict=True):
        ours = far.next_token_probs(
            every_token,
            temperatures=torch.tensor(group.temperature, dtype=torch.float64),
            greedy_mask=torch.tensor(False),
            truncation=group_truncation(group, device=torch.device("cpu")),
        )
        same = torch.equal(ours > 0, law > 0) and torch.allclose(ours, law, atol=1e-6)
        one_way = sum([group.top_k > 1, group.top_p < 1, group.min_p > 0]) == 1
        assert same == one_way, group.label


GRID = replace(
    SMALL,
    rows=240,
    head_kinds=("vanilla",),
    temperatures=(1.0,),
    truncated=(ParameterSet(1.0, min_p=0.2), ParameterSet(0.8, top_k=6, top_p=0.9, min_p=0.1)),
    temperature_weight=1,  # a third of the rows each
)
# a verify whose server stages no request's min-p into its sampler
DROPS_MIN_P = replace(
    VLLM_REJECTION,
    name="vllm-rejection-drops-min-p",
    staged=lambda round_: [replace(r, min_p=0.0) for r in requests_of(round_)],
)
# vLLM's verify judged against our law, not its own
ON_OUR_LAW = replace(VLLM_REJECTION, name="vllm-rejection-on-our-law", oracle_law=OUR_LAW)


@needs_vllm
def test_under_vllms_verifier_every_group_is_judged_against_vllms_law() -> None:
    (reference,) = builtin_implementations(("reference",))
    under_theirs = stats.scope_under(GRID, verifier=VLLM_REJECTION)
    # every group, each judged against its law
    assert under_theirs.config == replace(GRID, stage_rows=(ROW_CUT,), law=VLLM_LAW)
    passed = stats.run_stats(reference, config=GRID, verifier=VLLM_REJECTION)
    assert passed.error is None and passed.passed, passed.carrier_names()
    assert "judged against vLLM's own law" in passed.randomness()
    # a verify that drops min-p commits tokens vLLM's law drops: rejected
    dropped = stats.run_stats(reference, config=GRID, verifier=DROPS_MIN_P)
    assert dropped.error is None and dropped.rejected, f"p = {dropped.p_value:.3g}"


COMBINED = replace(GRID, rows=300, temperatures=(0.8,), truncated=GRID.truncated[1:])


@needs_vllm
@pytest.mark.slow  # about 40 s: the strongest test decoded again on fresh rows
def test_against_our_law_vllms_own_verify_is_rejected_where_truncations_combine() -> None:
    """The law is what this check needs: judged against ours, vLLM's own verify of our
    reference drafter is rejected at the set where vLLM's law is not ours."""
    (reference,) = builtin_implementations(("reference",))
    ours = stats.run_stats(reference, config=COMBINED, verifier=ON_OUR_LAW)
    assert ours.rejected, f"p = {ours.p_value:.3g}"
    assert all("min-p 0.1" in c for c in ours.carrier_names()), ours.carrier_names()


@needs_vllm
def test_the_interpreters_log1p_is_numpys_while_the_block_runs() -> None:
    import triton.language.extra.libdevice as libdevice

    x = torch.tensor([-1.0, -0.999, -0.5, -1e-7, 0.0, 1e-7, 0.5, 3.0, 1e30, -2.0])
    stub = libdevice.log1p
    for dtype in (torch.float32, torch.float64):
        values, out = x.to(dtype), torch.empty(len(x), dtype=dtype)
        with vllm_loader.interpreter_log1p():
            log1p_kernel[(1,)](values, out, len(x), BLOCK=16)
        expected = torch.from_numpy(np.log1p(values.numpy()))  # -inf at -1, NaN below
        assert torch.equal(out.isnan(), expected.isnan())
        assert torch.equal(out.nan_to_num(), expected.nan_to_num())
    assert libdevice.log1p is stub  # put back after the block
    with pytest.raises(Exception, match="NoneType"):  # the stub's body is `...`
        log1p_kernel[(1,)](x, torch.empty_like(x), len(x), BLOCK=16)


def test_the_report_runs_vllms_verifier_only_where_it_is_named() -> None:
    from harness.oracles.verifiers import VERIFIERS, available_verifiers

    assert "vllm-rejection" in VERIFIERS and VLLM_REJECTION not in available_verifiers()
    assert CHAIN_VERIFIER in available_verifiers()


@needs_vllm
def test_stats_takes_vllms_verifier_by_name() -> None:
    from harness.oracles.verifiers import verifiers_named

    assert verifiers_named(("chain", "vllm-rejection")) == (CHAIN_VERIFIER, VLLM_REJECTION)


def test_each_requests_positions_advance_by_what_it_commits_and_its_seed_stays() -> None:
    noise = RequestNoise(seed=3, device=CPU)
    seeds, first = noise.seeds_and_positions(bs=3, gamma=2)
    assert torch.equal(first, torch.tensor([0, 1, 2] * 3))
    noise.advance(torch.tensor([1, 3, 2]))
    again, second = noise.seeds_and_positions(bs=3, gamma=2)
    assert torch.equal(again, seeds) and len(set(seeds.tolist())) == 3
    assert torch.equal(second, torch.tensor([1, 2, 3, 3, 4, 5, 2, 3, 4]))
    # a round's draws sit at the anchor's position and after: never at a used one
    assert torch.equal(second.view(3, 3)[:, 0], first.view(3, 3)[torch.arange(3), [0, 2, 1]] + 1)
    assert torch.equal(
        RequestNoise(seed=3, device=CPU).seeds_and_positions(bs=3, gamma=2)[0], seeds
    )
    with pytest.raises(ValueError, match="same 3 rows"):
        noise.seeds_and_positions(bs=4, gamma=2)
