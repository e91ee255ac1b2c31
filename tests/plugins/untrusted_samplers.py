"""Samplers that attack the harness itself: each correct in its outputs, with one planted
way of corrupting other implementations' verdicts or of ending the process.

The harness must blame each on itself alone (mutated inputs, leaked global state, a
background thread that changes the environment later, a leftover child process, a
lowered memory limit) or record it as a failure (``SystemExit``, a hang anywhere, one
that ignores SIGALRM first, abort, ``os._exit``, segfault) while every other
implementation stays clean; what one prints must not reach stdout.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import torch

from fixed import DsparkDraftSampler as FixedSampler
from reference import SamplingInfo


class HiddenStatesMutatingSampler(FixedSampler):
    """Correct tokens, then multiplies the shared ``hidden_states`` in place."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        hidden_states.mul_(3)


class WeightMutatingSampler(FixedSampler):
    """Correct tokens, then perturbs the shared model's ``lm_head`` weight."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        with torch.no_grad():
            self.model.lm_head.weight.add_(1.0)


class DtypeLeakingSampler(FixedSampler):
    """Correct tokens, then leaves float64 as the default dtype."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        torch.set_default_dtype(torch.float64)


class EnvironmentLeakingSampler(FixedSampler):
    """Correct tokens, then sets an environment variable."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        os.environ["DSPARK_PLANTED_LEAK"] = "1"


class ThreadCountLeakingSampler(FixedSampler):
    """Correct tokens, then changes torch's intra-op thread count."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        torch.set_num_threads(torch.get_num_threads() + 1)


class DeterministicFlagLeakingSampler(FixedSampler):
    """Correct tokens, then flips the deterministic-algorithms flag."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        torch.use_deterministic_algorithms(not torch.are_deterministic_algorithms_enabled())


class TidySampler(FixedSampler):
    """Correct, and changes global state only inside its call, restoring it: no alarm."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1)
        scratch = hidden_states.clone().mul_(3)  # in place on its own copy only
        del scratch
        try:
            super().__call__(hidden_states, input_ids)
        finally:
            torch.set_default_dtype(dtype)
            torch.set_num_threads(threads)


class SystemExitSampler(FixedSampler):
    """Raises ``SystemExit(0)`` from its call, as if it were done."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        raise SystemExit(0)


class KeyboardInterruptSampler(FixedSampler):
    """Raises ``KeyboardInterrupt`` itself; no signal was sent."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        raise KeyboardInterrupt


def _hang() -> None:
    while True:
        time.sleep(0.01)


class ConstructorHangingSampler(FixedSampler):
    """Never finishes its constructor."""

    def __init__(self, **kwargs: Any) -> None:
        _hang()


class StagingHangingSampler(FixedSampler):
    """Never finishes staging its sampling parameters."""

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        _hang()


class TimeoutSwallowingSampler(FixedSampler):
    """Catches every ``Exception`` (the time limit's too) three times, then returns."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        swallowed = 0
        while swallowed < 3:  # only a timer that fires again gets it past the first hang
            try:
                _hang()
            except Exception:
                swallowed += 1


class AbortingSampler(FixedSampler):
    """Kills its process with ``SIGABRT``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        os.abort()


class ExitingSampler(FixedSampler):
    """Ends its process with status 0 and no clean-up."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        os._exit(0)


class SegfaultingSampler(FixedSampler):
    """Reads address 0: ``SIGSEGV``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        ctypes.string_at(0)


class SlowSampler(FixedSampler):
    """Correct, but takes half a second per call: a run long enough to interrupt."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        time.sleep(0.5)
        super().__call__(hidden_states, input_ids)


class UnstoppableSampler(FixedSampler):
    """Catches everything, timeouts included, forever: only a process boundary stops it."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        while True:
            with contextlib.suppress(BaseException):  # the planted defect
                _hang()


STATS_BATCH = 256  # the statistical oracle builds samplers with max_bs = its row count


class SystemExitAtStatsSizeSampler(FixedSampler):
    """Correct at the matrix's batch sizes; raises ``SystemExit(0)`` at the oracle's."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if self.max_bs >= STATS_BATCH:
            raise SystemExit(0)
        super().__call__(hidden_states, input_ids)


class SlowAtStatsSizeSampler(FixedSampler):
    """Correct everywhere, but takes 2 s per call at the oracle's batch sizes: a time
    limit reached, never a defect."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if self.max_bs >= STATS_BATCH:
            time.sleep(2.0)
        super().__call__(hidden_states, input_ids)


class AlwaysEqualTensor(torch.Tensor):
    """A tensor whose comparisons always say "equal"."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        result = super().__torch_function__(func, types, args, kwargs or {})
        if func in (torch.equal, torch.Tensor.equal):
            return True
        if func in (torch.eq, torch.Tensor.eq, torch.Tensor.__eq__):
            return torch.ones_like(result.as_subclass(torch.Tensor), dtype=torch.bool)
        return result


class TensorSubclassSampler(FixedSampler):
    """Writes token 0 everywhere, into an ``out`` whose comparisons always say equal."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.out = self.out.as_subclass(AlwaysEqualTensor)

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        self.out.fill_(0)


class SegfaultAtStatsSizeSampler(FixedSampler):
    """Correct at the matrix's batch sizes; reads address 0 at the oracle's."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        if self.max_bs >= STATS_BATCH:
            ctypes.string_at(0)
        super().__call__(hidden_states, input_ids)


class UmaskChangingSampler(FixedSampler):
    """Correct tokens, then sets the umask to 0o077."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        os.umask(0o077)


class TerminationIgnoringSampler(FixedSampler):
    """Correct tokens, then ignores SIGTERM for the rest of the process."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


HANG_BOUND_S = 30.0  # long past any time limit a test sets, short enough to end on its own


class AlarmIgnoringSampler(FixedSampler):
    """Ignores SIGALRM, then hangs in its constructor (for HANG_BOUND_S, then correct)."""

    def __init__(self, **kwargs: Any) -> None:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        deadline = time.monotonic() + HANG_BOUND_S
        while time.monotonic() < deadline:
            time.sleep(0.01)
        super().__init__(**kwargs)


class ChildLeavingSampler(FixedSampler):
    """Correct tokens, and leaves a ``sleep`` child process running."""

    children: list[subprocess.Popen[bytes]] = []  # noqa: RUF012  for the test to check

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        ChildLeavingSampler.children.append(subprocess.Popen(["sleep", "600"]))


THREAD_LEAK_VARIABLE = "DSPARK_THREAD_LEAK"
stop_background_threads = threading.Event()  # set by the test that starts them


class ThreadEnvironmentLeakingSampler(FixedSampler):
    """Correct tokens; its first call starts a thread that keeps rewriting an environment
    variable (every 2 ms) while later implementations run, until told to stop."""

    thread: threading.Thread | None = None

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if ThreadEnvironmentLeakingSampler.thread is None:
            thread = threading.Thread(target=_rewrite_environment, daemon=True)
            thread.start()
            ThreadEnvironmentLeakingSampler.thread = thread


def _rewrite_environment() -> None:
    count = 0
    while not stop_background_threads.wait(0.002):
        count += 1
        os.environ[THREAD_LEAK_VARIABLE] = str(count)


ADDRESS_SPACE_HEADROOM = 16 << 20  # bytes above its own use that it leaves the process


class AddressSpaceLimitingSampler(FixedSampler):
    """Correct tokens, then lowers the soft address-space limit to 16 MiB above what the
    process maps now: the next implementation's allocations fail."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        with open("/proc/self/status") as status:
            mapped = next(int(line.split()[1]) * 1024 for line in status if "VmSize" in line)
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (mapped + ADDRESS_SPACE_HEADROOM, hard))


class PrintingSampler(FixedSampler):
    """Correct tokens, and chatters on stdout three ways: ``print``, ``sys.__stdout__``
    and a raw write to fd 1."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        print("sampler says hello")
        sys.__stdout__.write("sampler writes to sys.__stdout__\n")  # type: ignore[union-attr]
        os.write(1, b"sampler writes to fd 1\n")
        super().__call__(hidden_states, input_ids)


class StdoutClosingSampler(FixedSampler):
    """Correct tokens, then closes file descriptor 1."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        os.close(1)


class CommandLineSampler(FixedSampler):
    """Raises with its own process's command line: what it could learn of ``--out-dir``."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        raise RuntimeError("argv: " + " ".join(sys.argv[1:]))


class TimerArmingSampler(FixedSampler):
    """Correct tokens, then arms a real-time interval timer: SIGALRM in 1000 s."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        signal.setitimer(signal.ITIMER_REAL, 1000.0)
