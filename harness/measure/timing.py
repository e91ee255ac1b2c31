"""Time of the fix: legacy vs fixed A/B in one process, and callgrind instruction counts.

Wall-clock ratios come from **alternating** calls in one process (legacy, fixed,
then fixed, legacy, ...), so drift of a shared, noisy machine hits both samplers
alike; each repetition gives one paired ratio and the summary is the min, median
and max of those. On CUDA the device is synchronised before every clock read.

Two things are timed:

- **walk-only**: ``sampler(hidden_states, input_ids)`` on a drafter whose lm_head
  is replaced by a lookup of the precomputed base logits
  (``PrecomputedBaseLogits``). It times the real ``__call__`` bodies of legacy and
  fixed (every walk, the corrected-logits copy, the pass-1 view, the output
  writes) minus the one thing the fix does not touch, so it is ~2 by construction;
  timing ``head.sample_block`` directly would only restate the walk count.
- **whole call**: ``sampler(hidden_states, input_ids)`` with the lm_head, whose
  cost grows with ``H``; the production-like shape uses a small ``H`` (256) so the
  lm_head does not swamp the walk, and says so.

Callgrind (``valgrind --tool=callgrind``) gives the noise-free figure: one valgrind
process runs all four measurements, toggling collection around each with torch's
own hooks (what ``torch.utils.benchmark.Timer.collect_callgrind`` does, but that
starts one process per statement, each paying about a minute for importing torch
under valgrind).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.pipeline.case import Case, CaseInputs, build_inputs, case_block, make_case
from harness.pipeline.runner import build_sampler, same_rng_start
from harness.plugins.implementations import BUILTIN_IMPLEMENTATIONS
from harness.render.progress import Progress, no_progress
from harness.render.sections import Section
from reference import ToyDraftModel

PRODUCTION_HIDDEN = 256  # small on purpose: the lm_head must not swamp the walk
WALK_RATIO_RANGE = (1.9, 2.1)
MODES = ("walk_only", "whole_call")
MODE_LABELS = {"walk_only": "walk-only (lm_head precomputed)", "whole_call": "whole call"}
SAMPLERS = ("legacy", "fixed")
REPO_ROOT = Path(__file__).resolve().parents[2]


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


def callgrind_case(*, seed: int = 0) -> Case:
    """The callgrind shape: production-like but V=4096, so valgrind's ~50x slowdown
    keeps the run to well under a minute beyond torch's import."""
    return make_case(
        bs=8,
        gamma=7,
        vocab_size=4096,
        hidden_size=PRODUCTION_HIDDEN,
        markov_rank=256,
        seed=seed,
        name=f"callgrind bs=8 gamma=7 V=4096 r=256 H={PRODUCTION_HIDDEN} vanilla folded",
    )


class PrecomputedBaseLogits(ToyDraftModel):
    """The case's drafter with the lm_head replaced by a lookup of its base logits.

    Shares the lm_head and Markov head modules (no copy); ``compute_base_logits``
    returns the precomputed ``[bs*gamma, V]`` tensor whatever rows it is given.
    """

    def __init__(self, model: ToyDraftModel, *, base_logits: torch.Tensor) -> None:
        super().__init__(
            lm_head=model.lm_head,
            markov_head=model.markov_head,
            sample_from_anchor=model.sample_from_anchor,
        )
        self.base_logits = base_logits  # [bs*gamma, V]

    def compute_base_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, None]:
        del hidden  # the lookup stands in for the lm_head
        return self.base_logits, None


def make_samplers(case: Case, *, inputs: CaseInputs) -> dict[tuple[str, str], Any]:
    """One sampler per (mode, sampler name), each with its own buffers; walk-only
    samplers drive the ``PrecomputedBaseLogits`` drafter."""
    block = case_block(case, inputs)
    base = block.base_logits.reshape(case.bs * case.gamma, -1)  # [bs*gamma, V]
    models = {
        "walk_only": PrecomputedBaseLogits(inputs.model, base_logits=base),
        "whole_call": inputs.model,
    }
    samplers: dict[tuple[str, str], Any] = {}
    for mode in MODES:
        for name in SAMPLERS:
            samplers[mode, name] = build_sampler(
                BUILTIN_IMPLEMENTATIONS[name], case=case, inputs=inputs, model=models[mode]
            )
    return samplers


def make_calls(case: Case, *, inputs: CaseInputs) -> dict[tuple[str, str], Callable[[], None]]:
    """One zero-argument call per (mode, sampler name)."""
    return {
        key: _bind(sampler, inputs) for key, sampler in make_samplers(case, inputs=inputs).items()
    }


def _bind(sampler: Any, inputs: CaseInputs) -> Callable[[], None]:
    def call() -> None:
        sampler.stage_sampling_params(  # the server stages before every replay
            bs=inputs.sampling_info.temperatures.shape[0], sampling_info=inputs.sampling_info
        )
        sampler(inputs.hidden_states, inputs.input_ids)

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
    """Alternating legacy/fixed timing of one case, by mode and clock.

    ``wall`` is the wall clock around each call (CUDA synchronised); ``cpu`` is the
    process CPU time of the same call (all threads): on a shared CPU it is much less
    sensitive to neighbours, exactly so with one intra-op thread.
    """

    case: Case
    repeats: int
    warmup: int
    threads: int
    times: dict[str, dict[str, PairedTimes]]  # mode -> clock -> times

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json_dict()["case"],
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


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], None], *, device: torch.device) -> tuple[float, float]:
    """Wall and process-CPU seconds of one call; the device is synchronised before
    each clock read."""
    _synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    _synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[int]:
    """Run with ``threads`` intra-op threads (``None``: torch's default), restored after."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def ab_timing(
    case: Case,
    *,
    repeats: int,
    warmup: int = 1,
    threads: int | None = None,
    modes: tuple[str, ...] = MODES,
    inputs: CaseInputs | None = None,
    progress: Progress = no_progress,
) -> ABTiming:
    """Time legacy and fixed alternately: per repetition and mode, one call of each,
    the order flipped every repetition. The global RNG is left as it was."""
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    device = torch.device(case.device)
    inputs = inputs if inputs is not None else build_inputs(case)
    calls = make_calls(case, inputs=inputs)
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
            order = SAMPLERS if rep % 2 == 0 else SAMPLERS[::-1]
            for mode in modes:
                for name in order:
                    wall, cpu = timed(calls[mode, name], device=device)
                    seconds[mode, name, "wall"].append(wall)
                    seconds[mode, name, "cpu"].append(cpu)
            progress(
                f"[timing {rep + 1}/{repeats}] "
                + ", ".join(
                    f"{mode}: legacy {seconds[mode, 'legacy', 'wall'][-1] * 1e3:.1f} ms, "
                    f"fixed {seconds[mode, 'fixed', 'wall'][-1] * 1e3:.1f} ms"
                    for mode in modes
                )
            )
    times = {
        mode: {
            clock: PairedTimes(
                tuple(seconds[mode, "legacy", clock]), tuple(seconds[mode, "fixed", clock])
            )
            for clock in CLOCKS
        }
        for mode in modes
    }
    return ABTiming(case, repeats, warmup, used_threads, times)


# -- callgrind ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallgrindCounts:
    """Instructions per call under callgrind (one thread), by (mode, sampler)."""

    case: Case
    number: int
    instructions: dict[str, int]  # "walk_only/legacy" -> Ir per call

    def ratio(self, mode: str) -> float:
        return self.instructions[f"{mode}/legacy"] / self.instructions[f"{mode}/fixed"]

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case.to_json_dict()["case"],
            "calls_per_measurement": self.number,
            "instructions_per_call": self.instructions,
            "ratios": {mode: self.ratio(mode) for mode in MODES},
        }


CALLGRIND_ORDER = tuple(f"{mode}/{name}" for mode in MODES for name in SAMPLERS)
_CHILD = "\n".join(
    (
        "import sys",
        "from harness.measure.timing import callgrind_child",
        "callgrind_child(sys.argv[1], int(sys.argv[2]))",
    )
)


def callgrind_child(case_path: str, number: int) -> None:
    """Runs under valgrind: one warm-up call (legacy's whole call runs every operator
    any measurement runs), then collect each of ``CALLGRIND_ORDER`` over ``number``
    calls, dumping one callgrind file per measurement."""
    torch.set_num_threads(1)  # deterministic counts: no thread-pool hand-offs
    case = Case.load(case_path)
    calls = make_calls(case, inputs=build_inputs(case))
    with same_rng_start(torch.device(case.device), case.seed), torch.inference_mode():
        calls["whole_call", "legacy"]()
        for key in CALLGRIND_ORDER:
            mode, name = key.split("/")
            torch._C._valgrind_toggle()
            for _ in range(number):
                calls[mode, name]()
            torch._C._valgrind_toggle_and_dump_stats()


def valgrind_path() -> str | None:
    """The valgrind executable, when this machine has one and torch supports it."""
    supported = getattr(torch._C, "_valgrind_supported_platform", lambda: False)()
    return shutil.which("valgrind") if supported else None


def callgrind_instructions(
    case: Case,
    *,
    number: int = 1,
    timeout_s: float = 900.0,
    progress: Progress = no_progress,
) -> CallgrindCounts:
    """Instruction counts per call of legacy and fixed, walk-only and whole call.

    Raises ``RuntimeError`` when valgrind is missing or the run fails.
    """
    valgrind = valgrind_path()
    if valgrind is None:
        raise RuntimeError("valgrind is not on PATH (or torch has no valgrind support)")
    if case.device != "cpu":
        raise ValueError("callgrind counts CPU instructions; give a CPU case")
    with tempfile.TemporaryDirectory(prefix="dspark-callgrind-") as scratch:
        case_path = Path(scratch) / "case.json"
        case.save(case_path)
        out_pattern = str(Path(scratch) / "callgrind.out.%p")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        command = [
            valgrind,
            "--tool=callgrind",
            "--collect-atstart=no",
            f"--callgrind-out-file={out_pattern}",
            sys.executable,
            "-c",
            _CHILD,
            str(case_path),
            str(number),
        ]
        progress(f"callgrind: {case.label()} under valgrind (about a minute for torch's import)")
        started = time.perf_counter()
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"valgrind exited {done.returncode}: {done.stderr[-2000:]}")
        dumps = sorted(
            Path(scratch).glob("callgrind.out.*.*"), key=lambda p: int(p.name.rsplit(".", 1)[1])
        )
        if len(dumps) != len(CALLGRIND_ORDER):
            raise RuntimeError(f"expected {len(CALLGRIND_ORDER)} callgrind dumps, got {len(dumps)}")
        counts = {
            key: _totals(path) // number for key, path in zip(CALLGRIND_ORDER, dumps, strict=True)
        }
        progress(f"callgrind: done in {time.perf_counter() - started:.0f} s")
    return CallgrindCounts(case, number, counts)


def _totals(path: Path) -> int:
    match = re.search(r"^(?:totals|summary):\s*(\d+)", path.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"{path.name}: no totals line")
    return int(match.group(1))


# -- report ---------------------------------------------------------------------------------
def format_timing(timing: ABTiming) -> str:
    """Median times and the paired-ratio spread, per mode and clock."""
    case = timing.case
    rows = [
        f"{case.label()}, {case.dtype}, {case.device}, {timing.threads} intra-op threads; "
        f"{timing.repeats} alternating repetitions after {timing.warmup} warm-up",
        f"{'mode':34}  {'clock':5}  {'legacy ms':>10}  {'fixed ms':>10}  "
        f"{'ratio min':>9}  {'median':>7}  {'max':>7}",
    ]
    for mode, by_clock in timing.times.items():
        for clock, times in by_clock.items():
            s = times.summary()
            rows.append(
                f"{MODE_LABELS[mode]:34}  {clock:5}  {s['legacy_median_s'] * 1e3:10.1f}  "
                f"{s['fixed_median_s'] * 1e3:10.1f}  {s['ratio_min']:9.3f}  "
                f"{s['ratio_median']:7.3f}  {s['ratio_max']:7.3f}"
            )
    return "\n".join(rows)


def format_callgrind(counts: CallgrindCounts) -> str:
    rows = [
        f"callgrind, {counts.case.label()}, 1 thread, instructions per call:",
        f"{'mode':34}  {'legacy':>15}  {'fixed':>15}  {'ratio':>7}",
    ]
    for mode in MODES:
        rows.append(
            f"{MODE_LABELS[mode]:34}  {counts.instructions[f'{mode}/legacy']:15,}  "
            f"{counts.instructions[f'{mode}/fixed']:15,}  {counts.ratio(mode):7.3f}"
        )
    return "\n".join(rows)


def timing_section(
    *,
    seed: int,
    device: str,
    repeats: int,
    hidden_size: int = PRODUCTION_HIDDEN,
    callgrind: bool = True,
    progress: Progress = no_progress,
) -> Section:
    """A/B timing at the production-like shape (+ callgrind where valgrind exists);
    ok iff the median walk-only ratio lies in ``WALK_RATIO_RANGE``."""
    case = production_like_case(seed=seed, device=device, hidden_size=hidden_size)
    progress(f"timing: {case.label()} ({repeats} alternating repetitions)")
    timing = ab_timing(case, repeats=repeats, progress=progress)
    walk = timing.times["walk_only"]["wall"].summary()
    whole = timing.times["whole_call"]["wall"].summary()
    low, high = WALK_RATIO_RANGE
    ok = low <= walk["ratio_median"] <= high
    parts = [format_timing(timing)]
    data: dict[str, Any] = {"ab": timing.to_json(), "callgrind": None}
    if not callgrind:
        parts.append("callgrind: skipped (--no-callgrind)")
    elif device != "cpu":
        parts.append("callgrind: skipped (counts CPU instructions; the device is not the CPU)")
    elif valgrind_path() is None:
        parts.append("callgrind: skipped (valgrind is not on PATH)")
    else:
        try:
            counts = callgrind_instructions(callgrind_case(seed=seed), progress=progress)
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            parts.append(f"callgrind: failed ({error})")
        else:
            parts.append(format_callgrind(counts))
            data["callgrind"] = counts.to_json()
    verdict = (
        f"legacy/fixed wall time: walk-only median {walk['ratio_median']:.3f} "
        f"(min {walk['ratio_min']:.3f}, max {walk['ratio_max']:.3f}; expected "
        f"{low}-{high}), whole call median {whole['ratio_median']:.3f} at H={hidden_size}"
    )
    return Section(title="time ratio", ok=ok, verdict=verdict, text="\n\n".join(parts), data=data)
