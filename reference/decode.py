"""The decode loop that drives a draft sampler through a verifier (``reference.verifier``).

``speculative_decode`` runs rounds of draft -> verify over many independent rows
with the sampler under test, reading only its public interface (``out``,
``corrected_out``, ``temperatures``, ``greedy_mask``: ``read_draft_block``, or the
reader a caller passes) and staging its sampling parameters before every round, as
the server does before every graph replay, until every row has ``m`` committed
tokens (and a minimum number of rounds ran); the next round's anchor is the row's
last committed token.

Every random stream of a decode comes from one ``DecodeStreams`` value:
``independent_streams`` gives the anchors, the drafter (torch's global RNG) and the
verifier streams of their own; ``shared_torch_streams`` is the PR-era server's
plumbing, the drafter and the verifier drawing in turn from torch's one generator
(disjoint because each draw advances it). A server's own plumbing
(``harness.upstream``) is another such value.
``DraftContext`` gives the drafter hidden states that depend on the round's
context, so ``q`` changes with the anchor as it would in a real drafter (or, when
``anchor_dependent`` is off, the same hidden state for every query row, so a
stateless head's draft law is a first-order chain a target can match).

A round may draft its rows in several batches (``batches_of_round``): each batch
is staged and drafted as one call of the same sampler instance, its rows in the
batch's order, as a server replays one captured graph with the live batch size
and the requests of the moment; every row is verified once per round. An observer
(``on_draft``) sees each call (``DraftCall``) as it is drafted, so a checker can hold
every call of a decode to the exact per-call checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from reference.draft_model import query_rows_per_request
from reference.request_law import Truncation
from reference.sampling_params import SamplingInfo, check_sampling_info
from reference.streams import DecodeStreams, independent_streams
from reference.target_model import MarkovTargetModel
from reference.verifier import (
    CHAIN_VERIFIER,
    DraftBlock,
    DraftReader,
    Verifier,
    VerifyResult,
    VerifyRound,
    plain_block,
    read_draft_block,
)


@dataclass(frozen=True)
class DraftCall:
    """One call of the sampler in a decode, as an observer sees it (``on_draft``): its
    index in the decode, its round, the decode's rows it drafted (in slot order), their
    anchors, the context their inputs came from, their requests and what the verifier
    reads of it."""

    index: int
    round: int
    rows: torch.Tensor  # [bs] int64, the decode's row of each slot
    anchors: torch.Tensor  # [bs] int64
    context: DraftContext
    sampling_info: SamplingInfo  # the batch's requests, as staged for the call
    block: DraftBlock

    def hidden_states(self) -> torch.Tensor:
        """``[bs*Q, H]``: the hidden states the call was given."""
        return self.context.hidden_states(self.anchors)

    def input_ids(self) -> torch.Tensor:
        """``[bs*Q]``: the input ids the call was given."""
        return self.context.input_ids(self.anchors)


DraftObserver = Callable[[DraftCall], None]
# sees each round as the decode built it (the requests' own parameters) and its verdict
VerifyObserver = Callable[[VerifyRound, VerifyResult], None]


class DraftContext:
    """Draft inputs as a deterministic function of the round's context.

    Query row ``j`` of a request sees ``anchor_embedding[anchor] + position_embedding[j]``;
    ``input_ids`` carry the anchor in row 0 and the mask token 0 after it. Without
    ``anchor_dependent`` every query row sees the same vector (the first anchor
    embedding): the drafter's law then depends on the previous tokens only.
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        hidden_size: int,
        gamma: int,
        sample_from_anchor: bool,
        seed: int,
        dtype: torch.dtype = torch.float32,
        anchor_dependent: bool = True,
    ) -> None:
        self.query_rows = query_rows_per_request(gamma=gamma, sample_from_anchor=sample_from_anchor)
        generator = torch.Generator().manual_seed(seed)
        self.anchor_embedding = torch.randn(vocab_size, hidden_size, generator=generator).to(
            dtype
        )  # [V, H]
        self.position_embedding = torch.randn(self.query_rows, hidden_size, generator=generator).to(
            dtype
        )  # [Q, H]
        if not anchor_dependent:
            self.anchor_embedding = self.anchor_embedding[:1].expand(vocab_size, -1).clone()
            self.position_embedding = torch.zeros_like(self.position_embedding)

    def to(self, device: str | torch.device) -> DraftContext:
        self.anchor_embedding = self.anchor_embedding.to(device)
        self.position_embedding = self.position_embedding.to(device)
        return self

    def hidden_states(self, anchor_tokens: torch.Tensor) -> torch.Tensor:
        """``[bs*Q, H]`` for anchor_tokens ``[bs]``."""
        hidden = self.anchor_embedding[anchor_tokens].unsqueeze(1) + self.position_embedding
        return hidden.reshape(-1, hidden.shape[-1])

    def input_ids(self, anchor_tokens: torch.Tensor) -> torch.Tensor:
        """``[bs*Q]`` int64: the anchor, then mask tokens."""
        ids = torch.zeros(
            anchor_tokens.shape[0], self.query_rows, dtype=torch.int64, device=anchor_tokens.device
        )
        ids[:, 0] = anchor_tokens
        return ids.reshape(-1)


@dataclass(frozen=True)
class DecodeResult:
    """What a decode run committed: the first ``m`` tokens of every row, every round's
    block, and the acceptance record."""

    committed: torch.Tensor  # [rows, m] int64
    accepted_lengths: torch.Tensor  # [rounds counted] int64: accepted drafts per round
    rounds: int
    round_anchors: torch.Tensor  # [rounds, rows] int64: the anchor each round drafted from
    round_blocks: torch.Tensor  # [rounds, rows, gamma+1] int64: committed tokens, -1 after
    round_slots: torch.Tensor  # [rounds, rows] int64: the row's slot in the call drafting it
    shared_noise: bool = False  # drafter and verifier on one plumbing (``DecodeStreams``)
    server: str | None = None  # the released server whose plumbing it was

    @property
    def mean_accepted_length(self) -> float:
        return float(self.accepted_lengths.double().mean())


def draft_batch(
    sampler: Any,
    *,
    context: DraftContext,
    anchors: torch.Tensor,
    sampling_info: SamplingInfo,
    read_draft: DraftReader = read_draft_block,
) -> DraftBlock:
    """Stage one batch's requests, draft from their anchors ``[bs]`` in one call, and read
    what the verifier reads (``read_draft``, each field a plain tensor), copied to the
    anchors' device: tokens ``[bs, gamma]``, kept step logits ``[bs, gamma, V]``, the staged
    temperatures and greedy mask ``[bs]``."""
    bs, device = int(anchors.shape[0]), anchors.device
    sampler.stage_sampling_params(bs=bs, sampling_info=sampling_info)
    sampler(context.hidden_states(anchors), context.input_ids(anchors))
    block = plain_block(read_draft(sampler, bs))
    return DraftBlock(  # copies: the next call of the instance rewrites its buffers
        tokens=block.tokens.to(device, copy=True),
        step_logits=block.step_logits.to(device, copy=True),
        temperatures=block.temperatures.to(device, copy=True),
        greedy_mask=block.greedy_mask.to(device, copy=True),
    )


def gathered_block(blocks: Sequence[DraftBlock], *, batches: Sequence[torch.Tensor]) -> DraftBlock:
    """One round's draft block in row order from its batches' blocks (``batches[i]`` the
    row indices ``[bs]`` of ``blocks[i]``, every row once)."""
    order = torch.cat(list(batches))  # [rows]
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.shape[0], device=order.device)
    return DraftBlock(
        tokens=torch.cat([b.tokens for b in blocks])[inverse],
        step_logits=torch.cat([b.step_logits for b in blocks])[inverse],
        temperatures=torch.cat([b.temperatures for b in blocks])[inverse],
        greedy_mask=torch.cat([b.greedy_mask for b in blocks])[inverse],
    )


def speculative_decode(
    *,
    sampler: Any,
    target: MarkovTargetModel,
    context: DraftContext,
    sampling_info: SamplingInfo,
    m: int,
    seed: int,
    min_rounds: int = 1,
    batches_of_round: Callable[[int], Sequence[torch.Tensor]] | None = None,
    verifier: Verifier = CHAIN_VERIFIER,
    read_draft: DraftReader = read_draft_block,
    streams: DecodeStreams | None = None,
    on_draft: DraftObserver | None = None,
    on_verify: VerifyObserver | None = None,
) -> DecodeResult:
    """Draft with ``sampler``, verify against ``target``, until every row has ``m`` tokens
    and at least ``min_rounds`` rounds ran.

    ``sampler`` is any ``DsparkDraftSampler``-compatible object built with
    ``max_bs >= rows`` and folded sampling. Rows are ``sampling_info``'s requests,
    staged before every round as the server stages before every graph replay.
    ``streams`` gives the first anchors, the sampler's noise (torch's global RNG is
    seeded with its drafter seed; a counter-based drafter keeps its own) and the
    verifier's draws (default: ``independent_streams(seed)``); the global RNG is
    forked, so the caller's state is left as it was.
    Every row takes part in every round; tokens past the first ``m`` are kept in
    ``round_blocks`` only, and only the rounds of rows still short of ``m`` count
    in ``accepted_lengths``. ``batches_of_round(r)`` splits round ``r``'s rows into
    the calls that draft them (row indices ``[bs]`` each, every row once; default:
    one call of every row in order). ``on_draft`` sees every call as it is drafted,
    before its round is verified (``DraftCall``), and ``on_verify`` every round as it
    was handed to the verifier with its verdict; they draw no random numbers.
    """
    if m <= 0:
        raise ValueError(f"m must be positive, got {m}")
    if min_rounds <= 0:
        raise ValueError(f"min_rounds must be positive, got {min_rounds}")
    check_sampling_info(sampling_info)  # before anything runs
    device = target.device
    rows = int(sampling_info.temperatures.shape[0])
    gamma = int(sampler.gamma)
    streams = streams if streams is not None else independent_streams(seed, device=device)
    target_temperatures = sampling_info.temperatures.to(device, torch.float64)
    target_greedy = sampling_info.greedy_mask.to(device)
    requested = sampling_info.truncation
    target_truncation = (  # None where no request drops a token: no sort per round
        Truncation(
            top_ks=requested.top_ks.to(device),
            top_ps=requested.top_ps.to(device, torch.float64),
            min_ps=requested.min_ps.to(device, torch.float64),
        )
        if requested.truncates(vocab_size=target.vocab_size)
        else None
    )
    anchors = target.sample_anchors(
        rows, generator=torch.Generator(device).manual_seed(streams.anchor_seed)
    )  # [rows]
    committed = torch.full((rows, m), -1, dtype=torch.int64, device=device)
    filled = torch.zeros(rows, dtype=torch.int64, device=device)
    row_ids = torch.arange(rows, device=device).unsqueeze(1)
    positions = torch.arange(gamma + 1, device=device)
    accepted_lengths: list[torch.Tensor] = []
    round_anchors: list[torch.Tensor] = []  # [rows] each
    round_blocks: list[torch.Tensor] = []  # [rows, gamma+1] each
    round_slots: list[torch.Tensor] = []  # [rows] each
    calls = 0  # the sampler's calls so far in this decode
    fork_devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices):
        torch.manual_seed(streams.drafter_seed)
        verify = verifier.start(noise=streams.verifier, device=device)
        while bool((filled < m).any()) or len(round_blocks) < min_rounds:
            batches = (
                batches_of_round(len(round_blocks))
                if batches_of_round is not None
                else (torch.arange(rows, device=device),)
            )
            if streams.requests is not None:  # a server keying its draws per request
                streams.requests.start_round(batches)
            slots = torch.empty(rows, dtype=torch.int64, device=device)
            for batch in batches:
                slots[batch] = torch.arange(batch.shape[0], device=device)
            blocks = []
            for batch in batches:
                requests = sampling_info.select(batch)
                blocks.append(
                    draft_batch(
                        sampler,
                        context=context,
                        anchors=anchors[batch],
                        sampling_info=requests,
                        read_draft=read_draft,
                    )
                )
                if on_draft is not None:
                    on_draft(
                        DraftCall(
                            index=calls,
                            round=len(round_blocks),
                            rows=batch,
                            anchors=anchors[batch],
                            context=context,
                            sampling_info=requests,
                            block=blocks[-1],
                        )
                    )
                calls += 1
            draft = gathered_block(blocks, batches=batches)
            round_ = VerifyRound(
                anchors=anchors,
                draft=draft,
                target=target,
                target_temperatures=target_temperatures,
                target_greedy=target_greedy,
                target_truncation=target_truncation,
            )
            verdict = verify(round_)
            if on_verify is not None:
                on_verify(round_, verdict)
            active = filled < m
            if bool(active.any()):
                accepted_lengths.append(verdict.accepted[active])
            round_anchors.append(anchors)
            round_blocks.append(verdict.committed)
            round_slots.append(slots)
            slot = filled.unsqueeze(1) + positions  # [rows, gamma+1]: where each token lands
            keep = (positions < verdict.num_committed.unsqueeze(1)) & (slot < m)
            committed[row_ids.expand_as(slot)[keep], slot[keep]] = verdict.committed[keep]
            filled = (filled + verdict.num_committed).clamp_max(m)
            if streams.requests is not None:
                streams.requests.commit(verdict.num_committed)
            anchors = verdict.committed.gather(1, verdict.accepted.unsqueeze(1)).squeeze(1)
    return DecodeResult(
        committed=committed,
        accepted_lengths=torch.cat(accepted_lengths),
        rounds=len(round_blocks),
        round_anchors=torch.stack(round_anchors),
        round_blocks=torch.stack(round_blocks),
        round_slots=torch.stack(round_slots),
        shared_noise=streams.shared,
        server=streams.server,
    )
