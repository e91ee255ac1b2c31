"""Request-parameter defects and correct designs, for the oracle's parameter axis.

Planted verifier defects, each our chain verifier with one piece of the request's law
changed (``reference.request_law``): min-p dropped, top-p dropped, top-p applied to the
draft's ``q`` and not to the target's ``p``, top-k kept over the draft's set instead of
the target's, ties at the top-p boundary broken highest token id first, and the rows'
parameters shuffled across the batch (row ``i`` verified under row ``i + 1``'s).

A correct design that differs: a drafter that truncates its own ``q`` with its own top-k
and hands the verifier exactly the ``q`` it sampled from (lossless: rejection sampling
needs only that ``q`` is the draft's law).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference import Truncation, top_k_mask, truncation_mask
from reference.step_samplers import StepSampler
from reference.streams import VerifierNoise
from reference.verifier import (
    VerifyResult,
    VerifyRound,
    VerifyStep,
    chain_verify,
    draft_distribution,
)


@dataclass(frozen=True)
class ChainOnRequestLaw:
    """Our chain verifier, its target law and its ``q`` spelled out so one piece can change."""

    name: str = "chain-on-request-law"
    reads_truncation: bool = True

    def verified(self, round_: VerifyRound) -> VerifyRound:
        return round_

    def target_truncation(self, round_: VerifyRound) -> Truncation | None:
        return round_.target_truncation

    def target_probs(self, round_: VerifyRound) -> torch.Tensor:
        return round_.target.block_probs(
            anchor_tokens=round_.anchors,
            draft_tokens=round_.draft.tokens,
            temperatures=round_.target_temperatures,
            greedy_mask=round_.target_greedy,
            truncation=self.target_truncation(round_),
        )  # [bs, gamma+1, V]

    def draft_probs(self, round_: VerifyRound) -> torch.Tensor:
        draft = round_.draft
        return draft_distribution(
            draft.step_logits, temperatures=draft.temperatures, greedy_mask=draft.greedy_mask
        )  # [bs, gamma, V]

    def start(self, *, noise: VerifierNoise, device: torch.device) -> VerifyStep:
        del device
        generator = noise.generator

        def verify(round_: VerifyRound) -> VerifyResult:
            round_ = self.verified(round_)
            return chain_verify(
                target_probs=self.target_probs(round_),
                draft_probs=self.draft_probs(round_),
                draft_tokens=round_.draft.tokens,
                generator=generator,
            )

        return verify


def _requested(round_: VerifyRound) -> Truncation:
    assert round_.target_truncation is not None
    return round_.target_truncation


@dataclass(frozen=True)
class DropsMinP(ChainOnRequestLaw):
    name: str = "drops-min-p"

    def target_truncation(self, round_: VerifyRound) -> Truncation:
        return replace(_requested(round_), min_ps=torch.zeros_like(_requested(round_).min_ps))


@dataclass(frozen=True)
class DropsTopP(ChainOnRequestLaw):
    name: str = "drops-top-p"

    def target_truncation(self, round_: VerifyRound) -> Truncation:
        return replace(_requested(round_), top_ps=torch.ones_like(_requested(round_).top_ps))


@dataclass(frozen=True)
class TopPOnDraftOnly(DropsTopP):
    """Scores drafts with ``q`` truncated by the request's top-p, the target untruncated
    by it: the draft was drawn from the whole ``q``."""

    name: str = "top-p-on-draft-only"

    def draft_probs(self, round_: VerifyRound) -> torch.Tensor:
        top_ps = _requested(round_).top_ps
        only_top_p = Truncation(
            top_ks=torch.zeros_like(top_ps, dtype=torch.int64),
            top_ps=top_ps,
            min_ps=torch.zeros_like(top_ps),
        )
        return only_top_p.unsqueeze(1).apply(super().draft_probs(round_))


def untruncated_probs(round_: VerifyRound) -> torch.Tensor:
    """The round's target rows at the requests' temperatures, truncated by nothing."""
    return round_.target.block_probs(
        anchor_tokens=round_.anchors,
        draft_tokens=round_.draft.tokens,
        temperatures=round_.target_temperatures,
        greedy_mask=round_.target_greedy,
    )  # [bs, gamma+1, V]


def renormalised(probs: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    kept = torch.where(keep, probs, 0.0)
    return kept / kept.sum(-1, keepdim=True)


@dataclass(frozen=True)
class TopKOverDraftSet(ChainOnRequestLaw):
    """Keeps the target's mass on the draft ``q``'s top-k tokens (the bonus row: the
    target's own) instead of the target's, top-p and min-p as requested: the wrong set."""

    name: str = "top-k-over-draft-set"

    def target_probs(self, round_: VerifyRound) -> torch.Tensor:
        requested = _requested(round_).unsqueeze(1)
        untruncated = untruncated_probs(round_)
        ranked_by = torch.cat([self.draft_probs(round_), untruncated[:, -1:]], dim=1)
        no = Truncation(
            top_ks=torch.zeros_like(requested.top_ks),
            top_ps=torch.ones_like(requested.top_ps),
            min_ps=torch.zeros_like(requested.min_ps),
        )
        top_k_of_draft = truncation_mask(
            ranked_by, top_ks=requested.top_ks, top_ps=no.top_ps, min_ps=no.min_ps
        )
        rest = truncation_mask(
            untruncated, top_ks=no.top_ks, top_ps=requested.top_ps, min_ps=requested.min_ps
        )
        return renormalised(untruncated, top_k_of_draft & rest)


@dataclass(frozen=True)
class TopPTieHighestIdFirst(ChainOnRequestLaw):
    """The request's law with equal probabilities ranked highest token id first."""

    name: str = "top-p-tie-highest-id-first"

    def target_probs(self, round_: VerifyRound) -> torch.Tensor:
        requested = _requested(round_).unsqueeze(1)
        untruncated = untruncated_probs(round_)
        flipped = untruncated.flip(-1)  # a stable sort of the flipped row: highest id first
        keep = truncation_mask(
            flipped, top_ks=requested.top_ks, top_ps=requested.top_ps, min_ps=requested.min_ps
        ).flip(-1)
        return renormalised(untruncated, keep)


@dataclass(frozen=True)
class ShuffledRowParams(ChainOnRequestLaw):
    """Verifies row ``i`` under row ``i + 1``'s temperature and truncation."""

    name: str = "shuffled-row-params"

    def verified(self, round_: VerifyRound) -> VerifyRound:
        requested = _requested(round_)

        def turned(values: torch.Tensor) -> torch.Tensor:
            return values.roll(1, dims=0)

        return replace(
            round_,
            target_temperatures=turned(round_.target_temperatures),
            target_greedy=turned(round_.target_greedy),
            target_truncation=Truncation(
                top_ks=turned(requested.top_ks),
                top_ps=turned(requested.top_ps),
                min_ps=turned(requested.min_ps),
            ),
        )


VERIFIER_DEFECTS = (
    DropsMinP(),
    DropsTopP(),
    TopPOnDraftOnly(),
    TopKOverDraftSet(),
    TopPTieHighestIdFirst(),
    ShuffledRowParams(),
)

OWN_TOP_K = 4


class OwnTopKDrafter(FixedSampler):
    """The fixed sampler that drafts from its own ``q`` truncated to its ``OWN_TOP_K``
    most likely tokens (``reference.top_k_mask``), writes exactly that ``q`` (the
    truncated logits) for the verifier and declares it (``draft_top_k``): a correct design
    that differs."""

    draft_top_k = OWN_TOP_K

    @staticmethod
    def own_top_k(logits: torch.Tensor) -> torch.Tensor:
        """``logits`` ``[..., V]`` with every token off their top ``OWN_TOP_K`` at -inf."""
        return logits.masked_fill(~top_k_mask(logits, k=OWN_TOP_K), float("-inf"))

    def step_sampler(self, bs: int) -> StepSampler:
        race = super().step_sampler(bs)

        def sample_step(step_logits: torch.Tensor, step_idx: int) -> torch.Tensor:
            return race(self.own_top_k(step_logits), step_idx)

        return sample_step

    def store_corrected(self, bs: int, corrected: torch.Tensor | None) -> None:
        assert corrected is not None
        super().store_corrected(bs, self.own_top_k(corrected))


class OwnTopKWrittenOnly(OwnTopKDrafter):
    """A planted defect: declares and writes its own top-k ``q`` but drafts from the
    whole ``q``, so a drafted token can lie outside the ``q`` it hands the verifier."""

    def step_sampler(self, bs: int) -> StepSampler:
        return FixedSampler.step_sampler(self, bs)


class UndeclaredOwnTopK(OwnTopKDrafter):
    """A planted defect: truncates its ``q`` without declaring it, so the ``-inf`` it
    writes is an entry of the drafter's law left unwritten."""

    draft_top_k = None
