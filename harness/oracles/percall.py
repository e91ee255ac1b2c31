"""Every call the statistical oracle's decodes make, held to the exact per-call checks that
apply to it (docs/statistics.md, "Every call of the oracle, held to the per-call checks").

The oracle's decodes make hundreds of thousands of draft positions; a sampler that emits
a wrong token once in that many passes every goodness-of-fit test, yet it is not
lossless. So the decode loop's observer (``reference.decode.DraftCall``) holds every
call to the checks of the registry that apply in the oracle's setting, with the very
functions those checks use, vectorised over the call's block:

- ``outputs_written``: token ids in ``[0, V)``, kept step logits written and finite
  where the drafter's law has the entry (a call that fails it is held to nothing more:
  the other checks index by token id; a call that keeps no step logits, sglang 0.5.16's
  folded greedy call, is held to its ids alone, as a case's checks hold it);
- ``teacher_forcing``: the kept step logits of step ``k`` equal the head's logits rebuilt
  from the anchor and the emitted tokens of steps ``< k`` (bit-exact on a float32
  drafter, else within the dtype's tolerance, as the check on a case);
- ``greedy_rows_argmax``: a greedy request's token (``top_k = 1``, as the server stages
  it) is a maximum of its kept logits;
- ``support``: a sampled request's token has non-zero probability under its ``q``;

and every round the verifier scores to the law the requests ask for:

- ``target_truncation``: on every row whose request truncates (a top-k in ``2 .. V-1``,
  a top-p below 1 or a min-p above 0), the target law the verifier scored the round
  against (``VerifyResult.target_probs``, where the verifier states it) has exactly the
  support ``reference.request_law`` gives for that row's own temperature, top-k, top-p
  and min-p, and its renormalised values within the verifier's dtype's tolerance. A
  verifier's check: a case of the matrix has no verifier, so the registry has no row
  for it. The drafter's side is ``outputs_written`` and ``teacher_forcing``: a drafter
  that declares its own top-k (``draft_top_k``) writes ``-inf`` exactly off it.

A violation is a ``CallFinding`` (per check and decode, the first position, with how
many fail); ``HeldCalls`` says how many calls and positions each check held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch

from harness.oracles.decode import decode_rows
from harness.oracles.problem import StatsProblem
from harness.pipeline.call_findings import CallFinding, HeldCalls
from harness.pipeline.checks.buffers import logits_not_written
from harness.pipeline.checks.subject import tolerances
from harness.pipeline.checks.walk import (
    greedy_rows_not_argmax,
    teacher_forcing_mismatches,
    tokens_outside_support,
)
from harness.pipeline.diffs import max_abs_diff_text
from harness.plugins.conventions import BuiltSampler
from reference import ToyDraftModel, prepare_block, previous_tokens, stage_sampling_params
from reference.decode import DecodeResult, DraftCall
from reference.verifier import Verifier, VerifyResult, VerifyRound

TARGET_TRUNCATION = "target_truncation"  # the verifier's target law, held on every round
# The checks held: the registry's on every draft call, in the registry's order, then the
# verifier's on every round.
HELD_CHECKS = (
    "outputs_written",
    "teacher_forcing",
    "greedy_rows_argmax",
    "support",
    TARGET_TRUNCATION,
)
# A token whose logit is within this many temperatures of the maximum has a positive q:
# exp(-600) is a normal float64, far from exp's underflow near -745.
SURE_GAP = 600.0
# What a check expected at (slot, step) of a call, in words: built for a first failure only.
Why = Callable[[int, int], str]


@runtime_checkable
class MayKeepNoLogits(Protocol):
    """A built sampler whose calls may keep no step logits (sglang 0.5.16's)."""

    def last_call_kept_logits(self) -> bool: ...


def kept_logits(built: BuiltSampler) -> bool:
    """Whether ``built``'s last call kept its step logits (every convention's but one
    always does; sglang 0.5.16's folded greedy call keeps none)."""
    return not isinstance(built, MayKeepNoLogits) or built.last_call_kept_logits()


class CallChecker:
    """The observer of one decode (``on_draft``): holds each call to ``HELD_CHECKS`` and
    keeps, per check, the first failing position and how many fail."""

    def __init__(
        self,
        *,
        model: ToyDraftModel,
        built: BuiltSampler,
        target: str,
        head: str,
        verifier: str,
    ) -> None:
        self.model, self.built = model, built
        self.target, self.head, self.verifier = target, head, verifier
        self.calls = 0
        self.positions = dict.fromkeys(HELD_CHECKS, 0)
        self.first: dict[str, CallFinding] = {}
        self.failing: dict[str, tuple[int, int]] = {}  # check: (positions, calls)
        self.round_calls: list[DraftCall] = []  # the calls of the round being drafted

    def __call__(self, call: DraftCall) -> None:
        if self.round_calls and self.round_calls[-1].round != call.round:
            self.round_calls = []
        self.round_calls.append(call)
        with torch.inference_mode():
            self._hold(call)

    def verified(self, round_: VerifyRound, verdict: VerifyResult) -> None:
        """Holds the round's truncating rows to ``TARGET_TRUNCATION`` (the decode's
        ``on_verify``): nothing where the verifier states no target law."""
        requested, used = round_.target_truncation, verdict.target_probs
        if requested is None or used is None:
            return
        vocab = round_.target.vocab_size
        rows = requested.truncating_rows(vocab_size=vocab).nonzero().squeeze(1)  # [n]
        with torch.inference_mode():
            expected = round_.target.block_probs(
                anchor_tokens=round_.anchors[rows],
                draft_tokens=round_.draft.tokens[rows],
                temperatures=round_.target_temperatures[rows],
                greedy_mask=round_.target_greedy[rows],
                truncation=requested.select(rows),
            )  # [n, gamma+1, V] float64: each row's own law (reference.request_law)
            got = used[rows].to(expected.dtype)
            rtol, atol = tolerances(used.dtype)
            differ = ((got > 0) != (expected > 0)) | ~torch.isclose(
                got, expected, rtol=rtol, atol=atol
            )  # [n, gamma+1, V]

        def finding(index: int, step: int) -> CallFinding:
            row = int(rows[index])
            call = next(c for c in self.round_calls if bool((c.rows == row).any()))
            token = int(differ[index, step].nonzero()[0])
            law = requested.select(rows[index : index + 1])
            top_k = int(law.top_ks[0])
            return self._finding(
                TARGET_TRUNCATION,
                call,
                slot=int((call.rows == row).nonzero()[0]),
                step=step,
                token=token,
                expected=(
                    f"the verifier's target law at step {step} is the request's (T="
                    f"{float(round_.target_temperatures[row]):g}, top-k "
                    f"{top_k if top_k < vocab else 'off'}, "
                    f"top-p {float(law.top_ps[0]):g}, min-p {float(law.min_ps[0]):g}): "
                    f"p(token) {float(expected[index, step, token]):.6g}, "
                    f"it used {float(got[index, step, token]):.6g}"
                ),
            )

        self._tally(
            TARGET_TRUNCATION,
            differ.any(-1),
            held=int(rows.numel()) * int(expected.shape[1]),
            finding=finding,
        )

    def _hold(self, call: DraftCall) -> None:
        draft, vocab = call.block, self.model.vocab_size
        tokens, kept = draft.tokens, draft.step_logits  # [bs, gamma], [bs, gamma, V]
        bs, gamma = tokens.shape
        self.calls += 1
        inputs = prepare_block(
            model=self.model,
            gamma=gamma,
            max_bs=bs,
            hidden_states=call.hidden_states(),
            input_ids=call.input_ids(),
        )
        candidates = self.built.contract_candidates(inputs.base_logits)
        own_top_k = self.built.draft_top_k
        bad_ids = (tokens < 0) | (tokens >= vocab)
        # a call that keeps no step logits (a folded greedy call) is held to its ids alone,
        # as a case's checks hold it (``CallOutputs.keeps_step_logits``)
        unwritten = (
            logits_not_written(
                kept, base_logits=inputs.base_logits, candidates=candidates, draft_top_k=own_top_k
            )
            if kept_logits(self.built)
            else torch.zeros_like(bad_ids)
        )
        self._tally(
            "outputs_written",
            bad_ids | unwritten,
            held=bs * gamma,
            finding=self._at_call("outputs_written", call, _unwritten),
        )
        if bool(bad_ids.any()) or not kept_logits(self.built):
            return  # what follows indexes by token id and reads the kept logits
        differ, rebuilt = teacher_forcing_mismatches(
            kept,
            model=self.model,
            block=inputs,
            tokens=tokens,
            candidates=candidates,
            exact=inputs.base_logits.dtype == torch.float32,  # as on a float32 case
            draft_top_k=own_top_k,
        )
        self._tally(
            "teacher_forcing",
            differ,
            held=bs * gamma,
            finding=self._at_call(
                "teacher_forcing",
                call,
                lambda row, step: _not_rebuilt(
                    kept, rebuilt, previous_tokens(inputs.anchor_tokens, tokens), row, step
                ),
            ),
        )
        temperatures = torch.empty(bs, dtype=torch.float32, device=tokens.device)
        greedy = torch.empty(bs, dtype=torch.bool, device=tokens.device)
        stage_sampling_params(
            bs=bs, sampling_info=call.sampling_info, temperatures=temperatures, greedy_mask=greedy
        )  # the requests as the server stages them, not the sampler's own bookkeeping
        greedy_positions = int(greedy.sum()) * gamma
        self._tally(
            "greedy_rows_argmax",
            greedy_rows_not_argmax(kept, tokens=tokens, greedy_mask=greedy),
            held=greedy_positions,
            finding=self._at_call(
                "greedy_rows_argmax",
                call,
                lambda row, step: (
                    f"a greedy request's token is the argmax "
                    f"{int(kept[row, step].argmax())} of its kept logits"
                ),
            ),
        )
        self._tally(
            "support",
            outside_support(kept, tokens=tokens, temperatures=temperatures, greedy_mask=greedy),
            held=bs * gamma - greedy_positions,
            finding=self._at_call(
                "support",
                call,
                lambda row, step: "a sampled token has non-zero probability under its q",
            ),
        )

    def _tally(
        self,
        check: str,
        failing: torch.Tensor,
        *,
        held: int,
        finding: Callable[[int, int], CallFinding],
    ) -> None:
        """Counts ``check``'s ``held`` positions and the ``failing`` ones (``[slots,
        steps]`` bool); ``finding(slot, step)`` describes the first of the decode."""
        self.positions[check] += held
        count = int(failing.sum())
        if not count:
            return
        positions, calls = self.failing.get(check, (0, 0))
        self.failing[check] = (positions + count, calls + 1)
        if check in self.first:
            return
        slot, step = (int(i) for i in failing.nonzero()[0])
        self.first[check] = finding(slot, step)

    def _at_call(self, check: str, call: DraftCall, why: Why) -> Callable[[int, int], CallFinding]:
        """A draft call's finding at ``(slot, step)``: the token emitted there."""

        def finding(slot: int, step: int) -> CallFinding:
            token = int(call.block.tokens[slot, step])
            return self._finding(
                check, call, slot=slot, step=step, token=token, expected=why(slot, step)
            )

        return finding

    def _finding(
        self, check: str, call: DraftCall, *, slot: int, step: int, token: int, expected: str
    ) -> CallFinding:
        return CallFinding(
            check=check,
            target=self.target,
            head=self.head,
            verifier=self.verifier,
            round=call.round,
            call=call.index,
            row=int(call.rows[slot]),
            slot=slot,
            step=step,
            token=token,
            expected=expected,
            positions=0,  # filled in by ``held``
            calls=0,
        )

    def held(self) -> HeldCalls:
        """What this decode's calls were held to, and its findings."""
        findings = []
        for check in HELD_CHECKS:
            if check in self.first:
                positions, calls = self.failing[check]
                first = self.first[check]
                findings.append(
                    CallFinding(**{**vars(first), "positions": positions, "calls": calls})
                )
        return HeldCalls(calls=self.calls, positions=dict(self.positions), findings=tuple(findings))


def outside_support(
    kept: torch.Tensor,
    *,
    tokens: torch.Tensor,
    temperatures: torch.Tensor,
    greedy_mask: torch.Tensor,
) -> torch.Tensor:
    """``tokens_outside_support`` of a call, its ``q`` built only for the rows that may
    fail it: where every logit is finite and the token's scaled gap to the maximum is
    above ``-SURE_GAP``, ``q`` of the token is at least ``exp(-SURE_GAP) / V`` in float64,
    positive (the oracle's decodes make a quarter of a million such positions)."""
    picked = kept.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [bs, gamma]
    gap = (picked - kept.amax(dim=-1)).float() / temperatures.unsqueeze(1)
    maybe = ~(torch.isfinite(kept).all(dim=-1) & (gap > -SURE_GAP)) & ~greedy_mask.unsqueeze(1)
    outside = torch.zeros_like(maybe)
    rows = maybe.any(dim=1).nonzero().squeeze(1)  # [n]
    if rows.numel():
        outside[rows] = tokens_outside_support(
            kept[rows],
            tokens=tokens[rows],
            temperatures=temperatures[rows],
            greedy_mask=greedy_mask[rows],
        )
    return outside


def _unwritten(row: int, step: int) -> str:
    return f"token ids in [0, V) and kept step logits written and finite (step {step})"


def _not_rebuilt(
    kept: torch.Tensor, rebuilt: torch.Tensor, previous: torch.Tensor, row: int, step: int
) -> str:
    after = "the anchor" if step == 0 else f"step {step - 1}'s emitted token"
    return (
        f"the kept logits of step {step} are those rebuilt after {after} "
        f"{int(previous[row, step])} ({max_abs_diff_text(kept[row, step], rebuilt[row, step])})"
    )


def held_decode(
    sampler_class: type,
    *,
    problem: StatsProblem,
    head_kind: str,
    seed: int,
    verifier: Verifier,
) -> tuple[DecodeResult, HeldCalls]:
    """``decode_rows`` of one head kind with every call held to ``HELD_CHECKS``: the
    decoded rows and what the calls were held to."""
    checkers: list[CallChecker] = []

    def checker_of(built: BuiltSampler) -> CallChecker:
        checkers.append(
            CallChecker(
                model=problem.drafters[head_kind],
                built=built,
                target=problem.target.name,
                head=head_kind,
                verifier=verifier.name,
            )
        )
        return checkers[-1]

    decoded = decode_rows(
        sampler_class,
        problem=problem,
        head_kind=head_kind,
        seed=seed,
        verifier=verifier,
        observer_of=checker_of,
        on_verify=lambda round_, verdict: checkers[-1].verified(round_, verdict),
    )
    return decoded, checkers[0].held()
