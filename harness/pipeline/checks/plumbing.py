"""The drafter's and the verifier's streams do not meet: counter-based and keyed
streams (``noise_shared_with_verifier``), one torch generator
(``torch_stream_shared_with_verifier``).

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

Where the plumbing is one torch generator (ours, the PR-era server's, sglang before
0.5.22), the call may draw the stretch of its stream from where the staging found it to
where the call left it, and the verifier draws what follows; what came before was drawn
by earlier parties (the verifier's last round in a decode). Every draw of the call on a
CPU generator is placed in its seed's stream (``harness.pipeline.torch_stream``): a draw
of the server's stream outside that stretch (peeking ahead, rewinding, a clone, a
generator seeded anew from ``torch.initial_seed()``) reads numbers another party reads
(docs/verdicts.md, "One torch generator").
"""

from __future__ import annotations

import torch

from harness.pipeline.check_result import CheckResult, Skip, failed, passed, skipped
from harness.pipeline.checks.subject import Subject, call_draws, counter_noise
from harness.pipeline.observe import RandomDraw
from harness.pipeline.torch_stream import StreamSpot, spot_of
from harness.plugins.conventions import KeyedDraws

NAME = "noise_shared_with_verifier"
TORCH_NAME = "torch_stream_shared_with_verifier"


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


def check_torch_stream_shared_with_verifier(subject: Subject) -> CheckResult:
    """No draw of the call reads the server's torch stream outside the stretch the call
    moved it over (module docstring)."""
    run, result = subject.run, subject.result
    if not run.case.has_sampled_rows:
        return skipped(TORCH_NAME, "no sampled rows", code=Skip.NOT_APPLICABLE)
    own_streams = counter_noise(result) is not None or result.keyed_draws is not None
    if own_streams or result.verifier_counter is not None:
        return skipped(
            TORCH_NAME,
            "the server's noise is counter-based or keyed, not one torch generator: "
            "noise_shared_with_verifier judges it",
            code=Skip.NOT_APPLICABLE,
        )
    window = result.server_stream
    if window is None or run.case.device != "cpu":
        return skipped(
            TORCH_NAME,
            "the server's generator is not a CPU one here (its stream positions are read "
            "from a CPU generator's state): the statistical oracle carries the verdict",
            code=Skip.NOT_VISIBLE,
        )
    start, end = spot_of(window.before), spot_of(window.after)
    if start.word is None or end.word is None:
        return skipped(TORCH_NAME, f"the call began at {start.describe()}", code=Skip.NOT_VISIBLE)
    draws = [(i, d) for i, d in enumerate(call_draws(result)) if d.stream is not None]
    shared = [said for i, d in draws if (said := _shared_read(i, d, start=start, end=end))]
    if shared:
        return failed(TORCH_NAME, "; ".join(shared[:3]))
    moved = (
        f"words {start.word}..{end.word - 1}, the stretch it moved the generator over"
        if end.word > start.word
        else f"word {start.word}, where it left the generator"
    )
    return passed(
        TORCH_NAME,
        f"{len(draws)} draw(s) of the call read nothing of the server's stream (seed "
        f"{start.seed}) outside {moved}",
    )


def _shared_read(index: int, draw: RandomDraw, *, start: StreamSpot, end: StreamSpot) -> str:
    """What another party reads of what ``draw`` read, said; ``""``: nothing."""
    assert draw.stream is not None and start.word is not None and end.word is not None
    first, last = spot_of(draw.stream.before), spot_of(draw.stream.after)
    whose = "torch's generator" if draw.stream.server else "a generator of its own"
    read = f"the call's draw {index} ({draw.describe()}, {whose})"
    if first.word is None or last.word is None:
        if first.seed != start.seed:
            return ""  # another seed's stream, beyond the searched stretch of it
        return f"{read} read the server's stream (seed {first.seed}) {first.describe()}"
    words = f"words {first.word}..{last.word - 1} of the server's stream (seed {first.seed})"
    said = []
    if first.seed == start.seed and first.word < start.word:
        said.append(
            f"{read} read {words}: the staging found the generator at word {start.word}, "
            f"so words {first.word}..{min(last.word, start.word) - 1} were drawn before "
            "the call (by the verifier, in a decode)"
        )
    if first.seed == end.seed and last.word > end.word:
        said.append(
            f"{read} read {words}: the call left the generator at word {end.word}, so "
            f"the verifier draws words {max(first.word, end.word)}..{last.word - 1} next"
        )
    return "; ".join(said)
