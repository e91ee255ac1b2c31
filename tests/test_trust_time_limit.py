"""The time limit ends with its block: once a time-limited block is over, neither the
SIGALRM timer nor the backstop's watchdog raises anything in the main thread, even when
a timeout lands in the limit's own clean-up, and a timer the implementation left armed
is disarmed and blamed on it."""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from harness.pipeline import runner
from harness.pipeline.guard import AlarmBackstop, alarm_timer_armed, implementation_world
from harness.pipeline.runner import CallTimeout, time_limit

PERIOD_S = 0.02  # the watchdog's period in these tests: short, no pass/fail on timing
PERIODS_AFTER = 10  # how many periods a test listens for a stray exception after a block


class Landed(Exception):
    """The exception the watchdog raises in these tests."""


@pytest.fixture(autouse=True)
def _sigalrm_put_back() -> Iterator[None]:
    handler = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)  # even where the code under test left one
    signal.signal(signal.SIGALRM, handler)


def _watchdogs_running() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "time-limit"]


def _stray_exceptions(kind: type[BaseException]) -> int:
    """Listen for a few watchdog periods: how many ``kind`` reached the main thread."""
    landed = 0
    for _ in range(PERIODS_AFTER):
        try:
            time.sleep(PERIOD_S)
        except kind:
            landed += 1
    return landed


class _RaceLock:
    """A lock whose first use by the main thread makes a watchdog exception pending in
    the main thread (as ``AlarmBackstop`` does), so it lands in the exit's first steps:
    the race, forced."""

    def __init__(self, *, exception: type[BaseException]):
        self._lock = threading.Lock()
        self._exception = exception
        self.forced = False

    def __enter__(self) -> bool:
        if threading.current_thread() is threading.main_thread() and not self.forced:
            self.forced = True
            main = ctypes.c_ulong(threading.main_thread().ident or 0)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(main, ctypes.py_object(self._exception))
        return self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def test_a_watchdog_exception_that_lands_in_the_exit_leaves_nothing_running() -> None:
    backstop = AlarmBackstop(first_s=0.0, every_s=PERIOD_S, exception=Landed, max_raises=1000)
    race = _RaceLock(exception=Landed)
    backstop._lock = race  # type: ignore[assignment]  # only to force the race
    escaped = 0
    try:
        with backstop:
            while True:  # SIGALRM is never heard: the watchdog raises; swallowed
                try:
                    if backstop.raised:
                        break
                    time.sleep(PERIOD_S / 4)
                except Landed:
                    pass
    except Landed:  # what the exit let through
        escaped += 1
    assert race.forced  # the exception did land in the exit
    assert not _watchdogs_running()
    assert _stray_exceptions(Landed) == 0
    assert escaped == 0


def test_the_watchdog_raises_into_one_block_at_most_max_raises_times() -> None:
    caught = 0
    with AlarmBackstop(first_s=0.0, every_s=PERIOD_S, exception=Landed, max_raises=3) as backstop:
        while True:  # swallows every timeout, for as long as one may come
            try:
                if not _watchdogs_running():
                    break
                time.sleep(PERIOD_S / 4)
            except Landed:
                caught += 1
    assert backstop.raises == 3
    assert caught <= 3  # the last may be withdrawn at the exit, unseen
    assert not _watchdogs_running()
    assert _stray_exceptions(Landed) == 0


def test_an_alarm_that_lands_in_the_limits_clean_up_raises_nothing_after_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_setitimer = signal.setitimer
    forced = []

    def alarm_at_disarm(which: int, seconds: float, interval: float = 0.0) -> tuple[float, float]:
        if seconds == 0 and not forced:  # the clean-up's disarm: SIGALRM arrives just then
            forced.append(True)
            signal.raise_signal(signal.SIGALRM)
        return real_setitimer(which, seconds, interval)

    monkeypatch.setattr(runner.signal, "setitimer", alarm_at_disarm)
    handler = signal.getsignal(signal.SIGALRM)
    with time_limit(60.0, backstop_period_s=PERIOD_S):
        pass  # done long before the limit
    assert forced
    assert not alarm_timer_armed()
    assert signal.getsignal(signal.SIGALRM) == handler
    assert _stray_exceptions(CallTimeout) == 0


def test_a_timer_the_block_arms_is_disarmed_when_the_block_ends() -> None:
    handler = signal.getsignal(signal.SIGALRM)
    with (
        pytest.raises(CallTimeout, match="time limit of 60 s"),
        time_limit(60.0, backstop_period_s=PERIOD_S),
    ):
        signal.setitimer(signal.ITIMER_REAL, PERIOD_S, PERIOD_S)  # repeating, its own
        while True:  # its own alarm goes to the limit's handler: a timeout it swallows
            try:
                time.sleep(PERIOD_S)
            except CallTimeout:
                break
    assert not alarm_timer_armed()
    assert signal.getsignal(signal.SIGALRM) == handler
    assert _stray_exceptions(CallTimeout) == 0


def test_a_sigalrm_ignoring_block_that_swallows_timeouts_is_still_timed_out() -> None:
    caught = 0
    with (
        pytest.raises(CallTimeout, match="SIGALRM was ignored"),
        time_limit(PERIOD_S, backstop_period_s=PERIOD_S, backstop_raises=2),
    ):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        while caught < 2:
            try:
                time.sleep(PERIOD_S)
            except CallTimeout:
                caught += 1
    assert not _watchdogs_running()
    assert _stray_exceptions(CallTimeout) == 0


def test_the_world_guard_disarms_a_timer_left_armed_and_blames_it() -> None:
    with implementation_world(owner="planted") as changes:
        signal.setitimer(signal.ITIMER_REAL, 600.0)
    assert not alarm_timer_armed()
    assert "SIGALRM timer disarmed -> armed" in changes.lines
    with implementation_world(owner="fixed") as untouched:
        pass
    assert untouched.lines == []
