"""What a check judges, and what the checks (and the ledger) share to judge it: the
dtype's tolerances, exact and tolerant comparisons of step logits, the parameters the
tokens were drawn under, and which draws a call made."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.pipeline.check_result import Tier
from harness.pipeline.observe import NOISE_OP, RandomDraw
from harness.pipeline.runner import CaseRun, ImplResult
from harness.plugins.conventions import NoiseCounter
from reference.sampling_params import stage_sampling_params


@dataclass(frozen=True)
class Subject:
    """What a check judges: one implementation's result on a case run (the run holds
    the other implementations' results, the reference's among them)."""

    run: CaseRun
    result: ImplResult
    # Per tier, the first failing per-call check of each replay of the life that has one,
    # named: judged once by ``run_checks`` for both life verdicts (None: no lived life).
    replay_failures: dict[Tier, list[str]] | None = None
    # The instance's other draft calls the harness observed (the second call, the first,
    # the other replays of a life); () for a case's first call: its second call.
    other_calls: tuple[ImplResult, ...] = ()

    def draft_calls_beside(self) -> tuple[ImplResult, ...]:
        """The instance's other observed draft calls."""
        if self.other_calls:
            return self.other_calls
        second = self.result.second_call
        return () if second is None else (second,)


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` of ``torch.testing.assert_close`` for the dtype."""
    return {
        torch.float16: (1e-3, 1e-5),
        torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7),
    }[dtype]


def positions_differ(actual: torch.Tensor, expected: torch.Tensor, *, exact: bool) -> torch.Tensor:
    """``[bs, gamma]`` mask of positions whose trailing values differ (``[bs, gamma, ...]``).

    Exact: bitwise. Otherwise: outside the dtype's ``assert_close`` tolerance.
    """
    if exact:
        differ = actual != expected
    else:
        rtol, atol = tolerances(expected.dtype)
        a, e = actual.double(), expected.double()
        differ = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
    return differ.reshape(*differ.shape[:2], -1).any(dim=-1)


def requested_parameters(run: CaseRun, result: ImplResult) -> tuple[torch.Tensor, torch.Tensor]:
    """The temperatures and greedy mask the tokens must be drawn under: the requests as
    the server stages them (its convention's own rule where it has one, else the
    reference's), never the sampler's own staging (docs/design.md, "What the checks
    compare against")."""
    if result.requested is not None:
        return result.requested.temperatures, result.requested.greedy_mask
    case = run.case
    temperatures = torch.ones(case.bs, dtype=torch.float32, device=run.block.base_logits.device)
    greedy_mask = torch.ones(case.bs, dtype=torch.bool, device=temperatures.device)
    stage_sampling_params(
        bs=case.bs,
        sampling_info=run.inputs.sampling_info,
        temperatures=temperatures,
        greedy_mask=greedy_mask,
    )
    return temperatures, greedy_mask


def staging_disagrees(run: CaseRun, result: ImplResult, rows: torch.Tensor) -> str:
    """Where the sampler's own staging (its convention exposes one) calls a greedy
    request of ``rows`` (``[bs]`` bool) sampled, said; else ``""``."""
    if result.staged is None:
        return ""
    _, greedy = requested_parameters(run, result)
    own = result.staged.greedy_mask.to(greedy.device)
    sampled = (rows.to(greedy.device) & greedy & ~own).nonzero().flatten().tolist()
    if not sampled:
        return ""
    temperatures = result.staged.temperatures[sampled].tolist()
    return (
        f"; the sampler staged greedy request(s) {sampled} (top_k <= 1, as the server "
        f"stages them) as sampled at T = {', '.join(f'{t:g}' for t in temperatures)}"
    )


def contract_logits(result: ImplResult, logits: torch.Tensor) -> torch.Tensor:
    """The reference's step logits as the implementation's contract defines its draft
    law: ``-inf`` off the convention's candidates (vLLM's top-K variant), else as is."""
    return on_candidates(logits, result.candidates)


def on_candidates(logits: torch.Tensor, candidates: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with ``-inf`` off ``candidates`` (``None``: every entry is one)."""
    if candidates is None:
        return logits
    return logits.masked_fill(~candidates.to(logits.device), -math.inf)


def exact_comparison(run: CaseRun) -> bool:
    """Bit-exact where the math is exact: float32 on the case's one device."""
    return run.case.dtype == "float32"


def token_ids_valid(run: CaseRun, tokens: torch.Tensor) -> bool:
    return bool(((tokens >= 0) & (tokens < run.case.vocab_size)).all())


def call_draws(result: ImplResult) -> list[RandomDraw]:
    """The draws of the proposal itself: its staging and its call (not construction)."""
    if result.random_draws:
        return [d for d in result.random_draws if d.phase != "construction"]
    # Results replayed from a CUDA graph carry only the call's exponential_ values.
    return [RandomDraw(NOISE_OP, "call", tuple(v.shape), v) for v in result.noise_draws]


def counter_noise(result: ImplResult) -> NoiseCounter | None:
    """The call's counter-based noise stream, when that is where its noise came from: the
    convention declares a counter (sglang 0.5.23's ``DraftNoise``) and the call drew
    nothing from torch's RNG."""
    return None if call_draws(result) else result.noise_counter


def near_tie_mask(step_logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """``[bs, gamma]``: whether the chosen token's logit is within the dtype's
    ``assert_close`` tolerance of the maximum (a near-tie)."""
    rtol, atol = tolerances(step_logits.dtype)
    top = step_logits.double().amax(dim=-1)
    picked = step_logits.double().gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
    return (top - picked) <= atol + rtol * top.abs()
