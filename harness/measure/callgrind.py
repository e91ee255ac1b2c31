"""Instruction counts of legacy and fixed under callgrind: the noise-free time figure.

One valgrind process runs all four measurements (walk-only and whole call, legacy
and fixed), toggling collection around each with torch's own hooks (what
``torch.utils.benchmark.Timer.collect_callgrind`` does, but that starts one process
per statement, each paying about a minute for importing torch under valgrind).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.case import Case, build_inputs, make_case
from harness.defaults import BUGGY_SIDE, PAIR_SIDES
from harness.devices import intra_op_threads
from harness.measure.timing import MODES, PRODUCTION_HIDDEN, make_calls
from harness.pipeline.runner import same_rng_start
from harness.progress import Progress, no_progress

REPO_ROOT = Path(__file__).resolve().parents[2]  # the child imports this checkout


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


CALLGRIND_ORDER = tuple(f"{mode}/{name}" for mode in MODES for name in PAIR_SIDES)
_CHILD = "\n".join(
    (
        "import sys",
        "from harness.measure.callgrind import callgrind_child",
        "callgrind_child(sys.argv[1], int(sys.argv[2]))",
    )
)


def callgrind_child(case_path: str, number: int) -> None:
    """Runs under valgrind: one warm-up call (legacy's whole call runs every operator
    any measurement runs), then collect each of ``CALLGRIND_ORDER`` over ``number``
    calls, dumping one callgrind file per measurement."""
    case = Case.load(case_path)
    calls = make_calls(case, inputs=build_inputs(case))
    with (
        intra_op_threads(1),  # deterministic counts: no thread-pool hand-offs
        same_rng_start(torch.device(case.device), case.seed),
        torch.inference_mode(),
    ):
        calls["whole_call", BUGGY_SIDE]()
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
