"""Run implementations side by side on one case, from the same RNG state.

For each implementation the runner forks the device RNG and seeds it with the
case seed, builds a sampler over the case's shared inputs in its own calling
convention (``harness.plugins.conventions``), poisons its output buffers with
sentinels, stages the sampling parameters and runs one call — the
server's protocol: staging before every call — all under the observers, then
copies the live batch out and notes any write past it. Cases with sampled rows
get a second staged call on the same inputs (each call must draw fresh noise).
A case with ``replays`` then lives a server's life on a new instance
(``harness.pipeline.life``).
The caller's RNG state is restored afterwards. An implementation that raises
(``SystemExit`` and its own ``KeyboardInterrupt`` included) is a recorded result,
never a crash of the harness; the time limit covers construction, staging and the
calls. Around each implementation the guards of ``harness.pipeline.guard`` (the
inputs) and ``harness.world`` (the process) record changed inputs and leaked global
state, and the next implementation gets both pristine.

``guarded_call`` (``harness.pipeline.call``) is the one failure boundary. Where each
implementation runs is the executor's business (``harness.executor``): ``run_case``
submits one task per implementation (``case_task``) to its trust domain's executor, in
this process or in a worker process, and an implementation whose task gave no answer
(its worker died or hung) has that as its failure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from harness.case import Case, CaseInputs, build_inputs, case_block
from harness.executor import IN_PROCESS, Executor, TimeLimited, WorkerFailure, for_domain
from harness.options import DEFAULT_OPTIONS, RunOptions
from harness.pipeline.call import CallTimeout as CallTimeout
from harness.pipeline.call import Guarded as Guarded
from harness.pipeline.call import build_sampler as build_sampler
from harness.pipeline.call import (
    failed_in_worker,
    guarded_call,
    latest_draws,
    observed_call,
    same_rng_start,
)
from harness.pipeline.call import raised_error as raised_error
from harness.pipeline.call import time_limit as time_limit
from harness.pipeline.guard import changed_inputs, input_digests
from harness.pipeline.life import run_life
from harness.pipeline.observe import DispatchObserver
from harness.pipeline.results import ImplResult
from harness.pipeline.results import RaisedError as RaisedError
from harness.pipeline.results import WorkCounts as WorkCounts
from harness.plugins.implementations import Implementation
from harness.progress import no_progress
from harness.upstream.dispatch import build_for_case, convention_of
from harness.world import implementation_world, take_thread_blame
from reference import BlockInputs


@dataclass
class CaseRun:
    """All implementations' results on one case, plus the shared inputs as generated
    (pristine: rebuilt after any implementation that changed them)."""

    case: Case
    inputs: CaseInputs
    block: BlockInputs
    results: dict[str, ImplResult]


def run_implementation(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    options: RunOptions = DEFAULT_OPTIONS,
) -> ImplResult:
    """Construction, staging and one call of one implementation on the case, observed
    and under ``options.time_limit_s``; with sampled rows, a second staged call in
    ``second_call``."""
    result = ImplResult(name=implementation.name)
    record_noise, time_limit_s = options.record_noise, options.time_limit_s
    device = torch.device(case.device)

    def construct_and_call() -> None:
        with same_rng_start(device, case.seed), torch.inference_mode():
            # A leak undone by the next call (a toggled flag) is still a leak: check each call.
            with implementation_world(owner=implementation.name) as first_call:
                dispatch = DispatchObserver(record_noise=record_noise)
                with time_limit(time_limit_s), dispatch.in_phase("construction"):
                    sampler = build_for_case(implementation.sampler_class, case=case, inputs=inputs)
                result.carried_draws = list(dispatch.draws)  # construction's draws
                sampler.poison()
                observed_call(
                    sampler,
                    case=case,
                    inputs=inputs,
                    dispatch=dispatch,
                    result=result,
                    time_limit_s=time_limit_s,
                )
            result.leaked_state = first_call.lines
            if case.has_sampled_rows:
                second = ImplResult(name=implementation.name)
                sampler.poison()
                observed_call(
                    sampler,
                    case=case,
                    inputs=inputs,
                    dispatch=DispatchObserver(record_noise=record_noise),
                    result=second,
                    time_limit_s=time_limit_s,
                )
                second.carried_draws = latest_draws(result)
                result.second_call = second
            if case.replays:
                result.life = run_life(implementation, case=case, inputs=inputs, options=options)

    result.error = guarded_call(construct_and_call).error
    return result


def run_guarded(
    implementation: Implementation,
    *,
    case: Case,
    inputs: CaseInputs,
    options: RunOptions = DEFAULT_OPTIONS,
) -> ImplResult:
    """``run_implementation`` between two guards: the shared inputs are digested before
    and after (changes land in ``mutated_inputs``), and the global state is restored
    afterwards (changes land in ``leaked_state``). A case outside the implementation's
    convention (``Convention.outside_contract``) is not run."""
    sampler_class = implementation.sampler_class
    outside = convention_of(sampler_class).outside_contract(case, sampler_class=sampler_class)
    if outside is not None:
        return ImplResult(name=implementation.name, outside_contract=outside)
    before_inputs = input_digests(inputs)
    with implementation_world(owner=implementation.name) as world:
        result = run_implementation(implementation, case=case, inputs=inputs, options=options)
    leaks = [*result.leaked_state, *world.lines]
    result.leaked_state = list(dict.fromkeys(leaks))  # once each, in order
    result.mutated_inputs = changed_inputs(before_inputs, input_digests(inputs))
    return result


_shared: list[tuple[Case, CaseInputs]] = []  # at most one: the case this process runs now


def share_inputs(case: Case, inputs: CaseInputs) -> None:
    """Make ``inputs`` the ones the implementations of ``case`` run on in this process."""
    _shared[:] = [(case, inputs)]


def pristine_inputs(case: Case) -> CaseInputs:
    """The inputs the implementations of ``case`` run on in this process: those shared
    for it, else built from its seed (on the CPU: rebuilding is exact)."""
    if not _shared or _shared[0][0] != case:
        share_inputs(case, build_inputs(case))
    return _shared[0][1]


def case_task(implementation: Implementation, *, case: Case, options: RunOptions) -> ImplResult:
    """A task: ``run_guarded`` of one implementation on the inputs this process holds for
    ``case``; inputs it changed are dropped, so the next one gets them rebuilt."""
    result = run_guarded(implementation, case=case, inputs=pristine_inputs(case), options=options)
    if result.mutated_inputs:
        _shared.clear()
    return result


def run_in_domain(
    implementation: Implementation, *, case: Case, options: RunOptions, executor: Executor
) -> ImplResult:
    """``case_task`` on ``executor``, in the implementation's trust domain (sent without
    the judge's progress sink); a task that gave no answer, or answered something that is
    not this result, is the implementation's failure."""
    task = TimeLimited(case_task, options.time_limit_s)
    sent = dataclasses.replace(options, progress=no_progress)
    future = for_domain(executor, implementation.trust_domain).submit(
        task, implementation, case=case, options=sent
    )
    try:
        result = future.result()
    except WorkerFailure as failure:
        return ImplResult(name=implementation.name, error=failed_in_worker(failure))
    if not isinstance(result, ImplResult) or result.name != implementation.name:
        not_this = WorkerFailure("BadAnswer", "the worker's answer is not this result")
        return ImplResult(name=implementation.name, error=failed_in_worker(not_this))
    return result


def run_case(
    case: Case,
    implementations: list[Implementation],
    *,
    options: RunOptions = DEFAULT_OPTIONS,
    executor: Executor = IN_PROCESS,
) -> CaseRun:
    """Run every implementation on the case from the same RNG start, each on pristine
    inputs and global state, under ``options`` (the time limit, noise recording), each on
    ``executor`` in its trust domain (with the isolated executor, in its domain's worker
    process, so even a crash of the process is its result); the run holds pristine
    inputs for the checks."""
    share_inputs(case, build_inputs(case))
    results: dict[str, ImplResult] = {}
    for impl in implementations:
        results[impl.name] = run_in_domain(impl, case=case, options=options, executor=executor)
        for name, earlier in results.items():  # its threads may have acted in later calls
            earlier.leaked_state += take_thread_blame(name)
    inputs = pristine_inputs(case)  # rebuilt if the last one run here changed them
    block = case_block(case, inputs)
    return CaseRun(case=case, inputs=inputs, block=block, results=results)
