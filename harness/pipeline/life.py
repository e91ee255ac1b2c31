"""A server's life: one sampler instance replayed many times, as a captured draft graph is.

The driver builds one instance through its calling convention
(``harness.plugins.conventions``), handing it a server-owned token buffer where its
constructor takes ``out=``, then replays it ``case.replays`` times. Every convention
lives a life, sglang 0.5.23's too (its noise counter keeps running across replays).
Between replays the live batch size changes within ``max_bs`` (full, 1 and in between),
every replay gets new hidden states and anchors, and the sampling parameters are
restaged with new temperatures, another greedy mix (all greedy, mixed, all sampled, in
changing order) and, on each sampled row, a request's truncation in turn (none, top-k,
top-p, min-p, all three: ``LIFE_TRUNCATIONS``). Each replay is poisoned, staged, called
and read (from the server's buffer) through the convention's built sampler, under the
same observers as any call; ``harness.pipeline.checks`` holds every replay to the
per-call checks for its own inputs and parameters
(``docs/design.md``, "A server's life").
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch

from harness.case import SEED_LIMIT, Case, CaseInputs
from harness.options import RunOptions
from harness.pipeline.call import guarded_call, latest_draws, observed_call
from harness.pipeline.observe import DispatchObserver, RandomDraw
from harness.pipeline.results import GreedyMix, ImplResult, Life, LifeReplay, LifeStep
from harness.plugins.conventions import TOKEN_SENTINEL, BuiltSampler
from harness.plugins.implementations import Implementation
from harness.upstream.dispatch import convention_of

MIN_REPLAYS = 8  # replays of one bucket in the standard matrix's lives
LIFE_TEMPERATURES = (0.4, 1.6)  # range of a sampled row's temperature in a life
# A sampled row's (top-k, top-p, min-p) in a life, taken in turn by row and replay: none,
# each truncation alone, and all three (docs/sampling-params.md).
LIFE_TRUNCATIONS = ((0, 1.0, 0.0), (3, 1.0, 0.0), (0, 0.8, 0.0), (0, 1.0, 0.2), (6, 0.9, 0.1))


# Three orders, so every mix follows every other one over a life.
MIX_ORDERS = (
    (GreedyMix.MIXED, GreedyMix.ALL_GREEDY, GreedyMix.ALL_SAMPLED),
    (GreedyMix.ALL_SAMPLED, GreedyMix.MIXED, GreedyMix.ALL_GREEDY),
    (GreedyMix.ALL_GREEDY, GreedyMix.ALL_SAMPLED, GreedyMix.MIXED),
)


def life_batch_sizes(max_bs: int, replays: int) -> list[int]:
    """Full, 1 and in between, each size coming back after others ran."""
    middle, low = (max_bs + 1) // 2, max(1, (max_bs + 2) // 4)
    pattern = (max_bs, 1, middle, max_bs, middle, 1, max_bs, low)
    return [pattern[i % len(pattern)] for i in range(replays)]


def _greedy_rows(mix: GreedyMix, *, bs: int, index: int) -> tuple[bool, ...]:
    if mix is GreedyMix.ALL_GREEDY:
        return (True,) * bs
    if mix is GreedyMix.ALL_SAMPLED:
        return (False,) * bs
    return tuple((row + index) % 2 == 0 for row in range(bs))  # alternate, shifting


def life_schedule(case: Case) -> list[LifeStep]:
    """The case's life: ``case.replays`` steps, a function of the case alone."""
    generator = torch.Generator().manual_seed(case.seed + 5)
    low, high = LIFE_TEMPERATURES
    steps = []
    for index, bs in enumerate(life_batch_sizes(case.max_bs, case.replays)):
        mix = MIX_ORDERS[(index // 3) % 3][index % 3]
        greedy = _greedy_rows(mix, bs=bs, index=index)
        drawn = low + (high - low) * torch.rand(bs, generator=generator, dtype=torch.float64)
        temperatures = tuple(
            1.0 if g else round(float(t), 3) for g, t in zip(greedy, drawn, strict=True)
        )
        truncations = [
            LIFE_TRUNCATIONS[0] if g else LIFE_TRUNCATIONS[(row + index) % len(LIFE_TRUNCATIONS)]
            for row, g in enumerate(greedy)
        ]
        top_ks, top_ps, min_ps = (tuple(values) for values in zip(*truncations, strict=True))
        steps.append(
            LifeStep(
                index=index,
                bs=bs,
                mix=mix,
                temperatures=temperatures,
                greedy_rows=greedy,
                input_seed=(case.seed * 1009 + 17 + index) % SEED_LIMIT,
                top_ks=top_ks,
                top_ps=top_ps,
                min_ps=min_ps,
            )
        )
    return steps


def replay_inputs(case: Case, step: LifeStep, inputs: CaseInputs) -> CaseInputs:
    """The replay's inputs: the life's model, new hidden states and anchors (generated on
    the CPU from the step's seed), and the step's sampling parameters, truncations
    included (``Case.requests``)."""
    device = torch.device(case.device)
    generator = torch.Generator().manual_seed(step.input_seed)
    rows = step.bs * case.query_rows
    hidden_states = torch.randn(
        rows, case.hidden_size, generator=generator, dtype=torch.float32
    )  # [bs*Q, H]
    input_ids = torch.randint(0, case.vocab_size, (rows,), generator=generator)  # [bs*Q]
    return replace(
        inputs,
        hidden_states=hidden_states.to(case.torch_dtype).to(device),
        input_ids=input_ids.to(device),
        sampling_info=step.case_of(case).requests(device),  # as a server stages them
    )


def run_life(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    options: RunOptions,
) -> Life:
    """Build one instance (with the server's ``out=`` where its constructor takes it),
    then stage, call and read it once per step of ``life_schedule``. Runs inside the
    runner's RNG fork and guards; a replay that raises is recorded and ends the life."""
    device = torch.device(case.device)
    steps = life_schedule(case)
    convention = convention_of(implementation.sampler_class)
    takes_out = convention.takes_out(implementation.sampler_class)
    server_out = (
        torch.full((case.max_bs * case.gamma,), TOKEN_SENTINEL, dtype=torch.int64, device=device)
        if takes_out
        else None
    )  # [max_bs*gamma], owned by the server
    life = Life(planned=len(steps), out_passed=takes_out)
    record_noise, time_limit_s = options.record_noise, options.time_limit_s
    construction = DispatchObserver(record_noise=record_noise)

    def construct() -> BuiltSampler:
        with construction.in_phase("construction"):
            return convention.build(
                implementation.sampler_class, case=case, inputs=inputs, out=server_out
            )

    built = guarded_call(construct, time_limit_s=time_limit_s)
    if built.error is not None:  # the instance is the life: nothing to replay
        life.error = built.error
        return life
    sampler = built.returned()
    carried: list[RandomDraw] = list(construction.draws)
    for step in steps:
        step_case, step_inputs = step.case_of(case), replay_inputs(case, step, inputs)
        result = ImplResult(name=implementation.name, carried_draws=carried)
        life.replays.append(LifeReplay(step=step, result=result))
        sampler.poison()  # the server's out= too: the buffer the outputs are read from
        replayed = guarded_call(
            functools.partial(
                observed_call,
                sampler,
                case=step_case,
                inputs=step_inputs,
                dispatch=DispatchObserver(record_noise=record_noise),
                result=result,
                time_limit_s=time_limit_s,
            )
        )
        if replayed.error is not None:  # recorded on the replay; the life ends here
            result.error = replayed.error
            break
        carried = latest_draws(result)
    return life
