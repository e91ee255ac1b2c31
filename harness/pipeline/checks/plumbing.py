"""The drafter's and the verifier's counter-based streams do not meet.

Where a convention declares both streams as (key, counter) — sglang 0.5.23: the draft
noise ``(draft_noise_key(seed), offset)`` and the rejection noise
``(rejection_noise_key(seed), round)``, both from the server's seed — the (key, counter)
pairs the drafter's call reads and those the verifier reads over the decode so far (one
verification per drafted block, rounds ``0 .. end - 1``) must be disjoint: a pair read by
both is a draft token and the acceptance coins or resample noise that judge it taken
from the same numbers. Where a server keys both streams per request — vLLM 0.33: the
draft's Gumbel noise by the request's seed with the step mixed in and its position
with the drafting salt added, the verifier's residual and bonus draws by the request's
seed and the position of its logits row, both through one Murmur3 hash — the keys the
call's draft draws read (observed) must be none of those the verifier reads for any
request over the decode so far (``KeyedDraws``; docs/upstream.md, "The server's own
randomness"). Where the draws are not visible as counters (torch's generator,
a kernel's own RNG, a convention whose verifier stream the harness does not model) the
check skips and the statistical oracle, run on the server's own plumbing, carries the
verdict (docs/statistics.md, "The server's own randomness").
"""

from __future__ import annotations

import torch

from harness.pipeline.check_result import CheckResult, Skip, failed, passed, skipped
from harness.pipeline.checks.subject import Subject, counter_noise
from harness.plugins.conventions import KeyedDraws

NAME = "noise_shared_with_verifier"


def check_noise_shared_with_verifier(subject: Subject) -> CheckResult:
    result = subject.result
    if not subject.run.case.has_sampled_rows:
        return skipped(NAME, "no sampled rows", code=Skip.NOT_APPLICABLE)
    if result.keyed_draws is not None:
        return keyed_draws_apart(
            result.keyed_draws, bs=subject.run.case.bs, gamma=subject.run.case.gamma
        )
    drafter, verifier = counter_noise(result), result.verifier_counter
    if drafter is None or verifier is None:
        return skipped(
            NAME,
            "the drafter's or the verifier's draws are not visible as counters: the "
            "statistical oracle on the server's own plumbing carries the verdict",
            code=Skip.NOT_VISIBLE,
        )
    read = range(drafter.start, max(drafter.end, drafter.start + 1))  # the call's counters
    verified = range(verifier.start, verifier.end)
    met = [c for c in read if c in verified] if drafter.key == verifier.key else []
    if met:
        counters = ", ".join(map(str, met))
        return failed(
            NAME,
            f"the drafter's call read (key {drafter.key}, counter {counters}) for every step "
            f"and row of the block, and the verifier reads the same (key, counter) for its "
            f"acceptance coins and residual or bonus draw of round {counters}",
        )
    return passed(
        NAME,
        f"drafter (key {drafter.key}, counters {read.start}..{read.stop - 1}) and verifier "
        f"(key {verifier.key}, counters {verified.start}..{verified.stop - 1}) never meet",
    )


def keyed_draws_apart(keyed: KeyedDraws, *, bs: int, gamma: int) -> CheckResult:
    """No draft draw of the call reads a key a verifier draw of the decode reads."""
    if not keyed.draft:
        return skipped(NAME, "the call's draft draws were not observed", code=Skip.NOT_VISIBLE)
    met = torch.zeros(bs, gamma, dtype=torch.bool)
    said: list[str] = []
    for key in keyed.draft:
        for request in keyed.verifier:
            at = request.meets(key)
            if at is None:
                continue
            met[key.row, key.step] = True
            if len(said) < 3:
                said.append(
                    f"request {key.row} step {key.step} (its position {key.position}) read "
                    f"the {keyed.hash} key (seed {key.seed}, position word {key.word}), the "
                    f"one the verifier reads for the residual or bonus draw of request "
                    f"{request.row} at position {at}"
                )
            break
    if met.any():
        return failed(
            NAME,
            "a draft draw and a verifier draw read the same noise: " + "; ".join(said),
            met,
        )
    seeds = len({r.seed for r in keyed.verifier})
    return passed(
        NAME,
        f"{len(keyed.draft)} draft draws and the verifier's residual and bonus draws of "
        f"{len(keyed.verifier)} request(s) ({seeds} seed(s)) read disjoint {keyed.hash} "
        f"keys (seed, position word); "
        f"the acceptance coins: {keyed.coins}",
    )
