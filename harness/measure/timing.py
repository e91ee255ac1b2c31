"""Time of the fix: the pair (default legacy vs fixed) A/B in one process.

The pair is any two implementations (``--pair BUGGY,FIXED``); in the data the buggy
side's times sit in the ``legacy`` slot and the fixed side's in the ``fixed`` slot
(``harness.defaults.PAIR_SIDES``), and ``pair`` says whose they are.

Wall-clock ratios come from **alternating** calls in one process (legacy, fixed,
then fixed, legacy, ...), so drift of a shared, noisy machine hits both samplers
alike; each repetition gives one paired ratio and the summary is the min, median
and max of those. On CUDA the device is synchronised before every clock read.

Two things are timed:

- **walk-only**: ``sampler(hidden_states, input_ids)`` on a drafter whose lm_head
  is replaced by a lookup of the precomputed base logits
  (``reference.PrecomputedBaseLogits``). It times the real ``__call__`` bodies of
  legacy and fixed (every walk, the corrected-logits copy, the pass-1 view, the output
  writes) minus the one thing the fix does not touch, so it is ~2 by construction;
  timing ``head.sample_block`` directly would only restate the walk count.
- **whole call**: ``sampler(hidden_states, input_ids)`` with the lm_head, whose
  cost grows with ``H``; the production-like shape uses a small ``H`` (256) so the
  lm_head does not swamp the walk, and says so.

Instruction counts under callgrind, the noise-free figure, are in
``harness.measure.callgrind``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from harness.case import Case, CaseInputs, build_inputs, case_block, make_case
from harness.defaults import BUGGY_SIDE, DEFAULT_PAIR, FIXED_SIDE, PAIR_SIDES
from harness.devices import intra_op_threads, synchronize
from harness.pipeline.call import build_sampler, guarded_call, same_rng_start
from harness.pipeline.results import RaisedError
from harness.plugins.conventions import BuiltSampler
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.progress import Progress, no_progress
from harness.wire import answer_types
from reference import PrecomputedBaseLogits

PRODUCTION_HIDDEN = 256  # small on purpose: the lm_head must not swamp the walk
WALK_RATIO_RANGE = (1.9, 2.1)
MODES = ("walk_only", "whole_call")
Pair = tuple[Implementation, Implementation]


class TimingError(RuntimeError):
    """A sampler of the pair raised while being built or timed: there is no time to report."""


def default_pair() -> Pair:
    """The built-in legacy and fixed samplers."""
    legacy, fixed = builtin_implementations(DEFAULT_PAIR)
    return legacy, fixed


def production_like_case(
    *, seed: int = 0, device: str = "cpu", hidden_size: int = PRODUCTION_HIDDEN
) -> Case:
    """Folded sampling, all rows sampled at T=1: V=129280 (DeepSeek V3), gamma=7,
    r=256, bs=8, vanilla head, float32, and a small hidden size (default 256)."""
    return make_case(
        bs=8,
        gamma=7,
        vocab_size=129280,
        hidden_size=hidden_size,
        markov_rank=256,
        seed=seed,
        device=device,
        name=f"production-like bs=8 gamma=7 V=129280 r=256 H={hidden_size} vanilla folded",
    )


def make_samplers(
    case: Case, *, inputs: CaseInputs, pair: Pair | None = None
) -> dict[tuple[str, str], BuiltSampler]:
    """One sampler per (mode, slot of ``PAIR_SIDES``), each with its own buffers; the slots
    hold the pair (default legacy, fixed); walk-only samplers drive the
    ``PrecomputedBaseLogits`` drafter."""
    block = case_block(case, inputs)
    base = block.base_logits.reshape(case.bs * case.gamma, -1)  # [bs*gamma, V]
    models = {
        "walk_only": PrecomputedBaseLogits(inputs.model, base_logits=base),
        "whole_call": inputs.model,
    }
    implementations = dict(zip(PAIR_SIDES, pair or default_pair(), strict=True))
    samplers: dict[tuple[str, str], BuiltSampler] = {}
    for mode in MODES:
        for name, implementation in implementations.items():
            built = guarded_call(
                partial(
                    build_sampler,
                    implementation.sampler_class,
                    case=case,
                    inputs=inputs,
                    model=models[mode],
                ),
                owner=implementation.name,
            )
            if built.error is not None:  # the implementation under test failed
                raise TimingError(f"{implementation.name} ({mode}): {built.error.summary()}")
            samplers[mode, name] = built.returned()
    return samplers


def make_calls(
    case: Case, *, inputs: CaseInputs, pair: Pair | None = None
) -> dict[tuple[str, str], Callable[[], None]]:
    """One zero-argument call per (mode, slot)."""
    samplers = make_samplers(case, inputs=inputs, pair=pair)
    names = {slot: i.name for slot, i in zip(PAIR_SIDES, pair or default_pair(), strict=True)}
    return {key: _bind(sampler, inputs, name=names[key[1]]) for key, sampler in samplers.items()}


def _bind(sampler: BuiltSampler, inputs: CaseInputs, *, name: str) -> Callable[[], None]:
    def stage_and_call() -> None:
        sampler.stage_sampling_params(  # the server stages before every replay
            bs=inputs.sampling_info.temperatures.shape[0], sampling_info=inputs.sampling_info
        )
        sampler(inputs.hidden_states, inputs.input_ids)

    def call() -> None:
        failure = guarded_call(stage_and_call).error
        if failure is not None:  # the implementation under test failed
            raise TimingError(f"{name}: {failure.summary()}")

    return call


@dataclass(frozen=True)
class PairedTimes:
    """Seconds per call of each sampler, one pair per repetition."""

    legacy_s: tuple[float, ...]
    fixed_s: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(lg / fx for lg, fx in zip(self.legacy_s, self.fixed_s, strict=True))

    def summary(self) -> dict[str, float]:
        ratios = self.ratios
        return {
            "legacy_median_s": statistics.median(self.legacy_s),
            "fixed_median_s": statistics.median(self.fixed_s),
            "ratio_min": min(ratios),
            "ratio_median": statistics.median(ratios),
            "ratio_max": max(ratios),
        }


CLOCKS = ("wall", "cpu")  # perf_counter (device synchronised); process CPU time


@dataclass(frozen=True)
class ABTiming:
    """Alternating timing of the pair on one case, by mode and clock (``pair``: the
    names in the ``legacy`` and ``fixed`` slots).

    ``wall`` is the wall clock around each call (CUDA synchronised); ``cpu`` is the
    process CPU time of the same call (all threads): on a shared CPU it is much less
    sensitive to neighbours, exactly so with one intra-op thread.
    """

    case: Case
    repeats: int
    warmup: int
    threads: int
    times: dict[str, dict[str, PairedTimes]]  # mode -> clock -> times
    pair: tuple[str, str] = DEFAULT_PAIR

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json_dict()["case"],
            "pair": list(self.pair),
            "repeats": self.repeats,
            "warmup": self.warmup,
            "threads": self.threads,
            **{mode: times_json(by_clock) for mode, by_clock in self.times.items()},
        }


def times_json(by_clock: dict[str, PairedTimes]) -> dict[str, Any]:
    """Raw seconds and the summary of each clock."""
    return {
        clock: {"legacy_s": list(t.legacy_s), "fixed_s": list(t.fixed_s), **t.summary()}
        for clock, t in by_clock.items()
    }


def timed(call: Callable[[], None], *, device: torch.device) -> tuple[float, float]:
    """Wall and process-CPU seconds of one call; the device is synchronised before
    each clock read."""
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def ab_timing(
    case: Case,
    *,
    repeats: int,
    warmup: int = 1,
    threads: int | None = None,
    modes: tuple[str, ...] = MODES,
    inputs: CaseInputs | None = None,
    progress: Progress = no_progress,
    pair: Pair | None = None,
) -> ABTiming:
    """Time the pair (default legacy and fixed) alternately: per repetition and mode,
    one call of each, staged first, the order flipped every repetition. The global RNG
    is left as it was."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    device = torch.device(case.device)
    inputs = inputs if inputs is not None else build_inputs(case)
    pair = pair or default_pair()
    names = dict(zip(PAIR_SIDES, (i.name for i in pair), strict=True))
    calls = make_calls(case, inputs=inputs, pair=pair)
    seconds: dict[tuple[str, str, str], list[float]] = {
        (mode, name, clock): [] for mode, name in calls for clock in CLOCKS
    }
    with (
        intra_op_threads(threads) as used_threads,
        same_rng_start(device, case.seed),
        torch.inference_mode(),
    ):
        for _ in range(warmup):
            for key in calls:
                calls[key]()
        for rep in range(repeats):
            order = PAIR_SIDES if rep % 2 == 0 else PAIR_SIDES[::-1]
            for mode in modes:
                for name in order:
                    wall, cpu = timed(calls[mode, name], device=device)
                    seconds[mode, name, "wall"].append(wall)
                    seconds[mode, name, "cpu"].append(cpu)
            progress(
                f"[timing {rep + 1}/{repeats}] "
                + ", ".join(
                    f"{mode}: "
                    + ", ".join(
                        f"{names[side]} {seconds[mode, side, 'wall'][-1] * 1e3:.1f} ms"
                        for side in PAIR_SIDES
                    )
                    for mode in modes
                )
            )
    times = {
        mode: {
            clock: PairedTimes(
                tuple(seconds[mode, BUGGY_SIDE, clock]), tuple(seconds[mode, FIXED_SIDE, clock])
            )
            for clock in CLOCKS
        }
        for mode in modes
    }
    whose = (names[BUGGY_SIDE], names[FIXED_SIDE])
    return ABTiming(case, repeats, warmup, used_threads, times, whose)


answer_types(PairedTimes)


def timing_task(
    case: Case, *, repeats: int, pair: Pair
) -> tuple[int, dict[str, dict[str, PairedTimes]]] | RaisedError:
    """A task: ``ab_timing`` of the pair, as its threads and times (the caller holds the
    case and the names), or the pair's failure (``TimingError``) as data."""
    try:
        timing = ab_timing(case, repeats=repeats, pair=pair)
    except TimingError as error:  # a plug-in that raises: a result, not a crash
        return RaisedError(type="TimingError", message=str(error), where="worker")
    return timing.threads, timing.times
