"""The oracle's decodes: the sampler's life over a decode (``life_batches``: which rows
each call drafts, so one instance is restaged with other requests and other batch sizes
between calls), and ``decode_rows``, which builds a sampler for a problem of
``harness.oracles.problem`` and drives it through the reference decode loop
(``reference.verifier``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from harness.case import Case, CaseInputs
from harness.defaults import VerifierNoise
from harness.devices import intra_op_threads
from harness.oracles.problem import StatsConfig, StatsProblem, row_sets
from harness.plugins.conventions import BuiltSampler
from harness.upstream.dispatch import build_for_case
from reference import HEAD_KINDS, SamplingInfo
from reference.decode import DecodeResult, DraftObserver, VerifyObserver, speculative_decode
from reference.streams import independent_streams
from reference.verifier import CHAIN_VERIFIER, DraftBlock, Verifier, derived_seeds


def life_batches(problem: StatsProblem, round_index: int) -> tuple[torch.Tensor, ...]:
    """The calls that draft one round's rows, each its rows in slot order.

    Even rounds (and every round without ``restage``): one call of every row in order,
    at ``bs = max_bs``, so row ``i`` sits in slot ``i`` in rounds 0, 2, ... (noise
    frozen per slot shows as repeats). Odd rounds: the rows sorted by block (each
    temperature group a block, the truncated sets riding in the last one's: greedy at
    the default, a batch mixing greedy rows with top-k, top-p, min-p and all three), the
    blocks' order turned by one each odd round, cut into a call of one row, calls of one
    block only (all one temperature; greedy with the truncated mix) and one call of two
    blocks: other batch sizes, and other requests staged in every slot.
    """
    config = problem.config
    rows, device = config.rows, problem.row_group.device
    every_row = torch.arange(rows, device=device)
    if not config.restage or round_index % 2 == 0:
        return (every_row,)
    groups = sum(1 for g in config.groups if g not in config.truncated)  # the blocks
    block = problem.row_group.clamp_max(groups - 1)  # the truncated sets: the last block
    turn = (round_index // 2) % groups
    rank = (block + groups - turn) % groups  # the block's place in this order
    order = every_row[torch.argsort(rank * rows + every_row)]
    sizes = torch.bincount(rank, minlength=groups).tolist()
    cuts = sorted({0, min(1, rows), *itertools.accumulate(sizes[:-2]), rows})
    return tuple(order[a:b] for a, b in itertools.pairwise(cuts) if b > a)


def head_seed(seed: int, *, head_kind: str) -> int:
    """The decode seed of one head kind's rows: independent streams per head."""
    return derived_seeds(seed, len(HEAD_KINDS))[HEAD_KINDS.index(head_kind)]


def cpu_threads(device: str) -> int | None:
    """Intra-op threads the oracle runs with: one on the CPU, where every op works on
    ``[rows, V]`` with a tiny ``V`` and, on a shared 2-core machine, waiting for a busy
    core made the verdict 5-10x slower; as they are elsewhere."""
    return 1 if torch.device(device).type == "cpu" else None


def oracle_case(config: StatsConfig, *, head_kind: str, seed: int) -> Case:
    """The case a sampler of one head kind is built for in a decode of ``config``
    (folded sampling at ``max_bs = rows``, each row's temperature and greedy flag; the
    truncation is the verifier's), keyed by that head's decode seed."""
    sets = row_sets(config)
    return Case(
        bs=config.rows,
        gamma=config.gamma,
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        markov_rank=config.markov_rank,
        head_kind=head_kind,
        temperatures=tuple(s.temperature for s in sets),
        greedy_rows=tuple(s.greedy for s in sets),
        device=config.device,
        seed=head_seed(seed, head_kind=head_kind),  # a counter-based stream keys its noise from it
    )


def decode_rows(
    sampler_class: type,
    *,
    problem: StatsProblem,
    head_kind: str,
    seed: int,
    verifier: Verifier = CHAIN_VERIFIER,
    observer_of: Callable[[BuiltSampler], DraftObserver] | None = None,
    on_verify: VerifyObserver | None = None,
) -> DecodeResult:
    """Build the sampler at ``max_bs = rows`` (folded sampling, in the sampler's own
    calling convention, ``harness.plugins.conventions``) and run the decode loop for one
    head kind against its target, the instance living through ``life_batches``, verified
    by ``verifier`` on the streams the config's ``verifier_noise`` names (the
    convention's server plumbing, ``BuiltSampler.decode_streams``, or independent ones);
    the loop reads each call's draft through the convention's ``draft_block``, and
    ``observer_of(built)`` (when given) sees every call, ``on_verify`` every round."""
    config = problem.config
    decode_seed = head_seed(seed, head_kind=head_kind)
    case = oracle_case(config, head_kind=head_kind, seed=seed)
    with intra_op_threads(cpu_threads(config.device)):
        built = oracle_sampler(sampler_class, problem=problem, head_kind=head_kind, case=case)
        device = torch.device(config.device)
        streams = (
            built.decode_streams(seed=decode_seed, device=device)
            if config.verifier_noise is VerifierNoise.SHARED
            else independent_streams(decode_seed, device=device)
        )
        return speculative_decode(
            sampler=built,
            target=problem.targets[head_kind],
            context=problem.context,
            sampling_info=problem.sampling_info,
            m=config.m,
            seed=decode_seed,
            min_rounds=config.rounds,
            batches_of_round=lambda r: life_batches(problem, r),
            verifier=verifier,
            read_draft=built_draft_block,
            streams=streams,
            on_draft=None if observer_of is None else observer_of(built),
            on_verify=on_verify,
        )


def oracle_sampler(
    sampler_class: type,
    *,
    problem: StatsProblem,
    head_kind: str,
    case: Case,
    sampling_info: SamplingInfo | None = None,
) -> BuiltSampler:
    """The sampler built for ``case`` over the problem's drafter of ``head_kind``, in its
    own calling convention; the decode makes its hidden states and input ids, and stages
    each call's requests (``sampling_info``: the requests it is built with, default the
    problem's rows)."""
    inputs = CaseInputs(
        model=problem.drafters[head_kind],
        hidden_states=torch.empty(0, case.hidden_size),
        input_ids=torch.empty(0, dtype=torch.int64),
        sampling_info=problem.sampling_info if sampling_info is None else sampling_info,
        confidence_fn=None,
    )
    return build_for_case(sampler_class, case=case, inputs=inputs)


def built_draft_block(built: BuiltSampler, rows: int) -> DraftBlock:
    """What a verifier reads of the built sampler's last call (the decode loop's reader)."""
    return built.draft_block(rows)
