"""The time limit ends with its block: once a time-limited block is over, the SIGALRM
timer raises nothing in the main thread, even when an alarm lands in the limit's own
clean-up, and a repeating timer the block armed itself ends disarmed."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from harness.pipeline import call
from harness.pipeline.call import CallTimeout, time_limit

PERIOD_S = 0.02  # a short timer period for these tests: no pass/fail on timing
PERIODS_AFTER = 10  # how many periods a test listens for a stray timeout after a block


@pytest.fixture(autouse=True)
def _sigalrm_put_back() -> Iterator[None]:
    handler = signal.getsignal(signal.SIGALRM)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)  # even where the code under test left one
    signal.signal(signal.SIGALRM, handler)


def _timer_armed() -> bool:
    return signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0)


def _stray_timeouts() -> int:
    """Listen for a few periods: how many ``CallTimeout`` reached the main thread."""
    landed = 0
    for _ in range(PERIODS_AFTER):
        try:
            time.sleep(PERIOD_S)
        except CallTimeout:
            landed += 1
    return landed


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

    monkeypatch.setattr(call.signal, "setitimer", alarm_at_disarm)
    handler = signal.getsignal(signal.SIGALRM)
    with time_limit(60.0):
        pass  # done long before the limit
    assert forced
    assert not _timer_armed()
    assert signal.getsignal(signal.SIGALRM) == handler
    assert _stray_timeouts() == 0


def test_a_timer_the_block_arms_is_disarmed_when_the_block_ends() -> None:
    handler = signal.getsignal(signal.SIGALRM)
    with (
        pytest.raises(CallTimeout, match="time limit of 60 s"),
        time_limit(60.0),
    ):
        signal.setitimer(signal.ITIMER_REAL, PERIOD_S, PERIOD_S)  # repeating, its own
        while True:  # its own alarm goes to the limit's handler: a timeout it swallows
            try:
                time.sleep(PERIOD_S)
            except CallTimeout:
                break
    assert not _timer_armed()
    assert signal.getsignal(signal.SIGALRM) == handler
    assert _stray_timeouts() == 0


class WrappedTimeout(Exception):
    """What an interpreter raises on an exception inside a kernel: its own, the cause kept."""


def test_a_timeout_the_block_wraps_in_its_own_error_is_still_the_timeout() -> None:
    limited = time_limit(PERIOD_S)
    with pytest.raises(CallTimeout, match="raised WrappedTimeout on it") as raised, limited:
        try:
            while True:
                time.sleep(PERIOD_S / 4)
        except CallTimeout as timeout:
            raise WrappedTimeout(repr(timeout)) from timeout
    assert isinstance(raised.value.__cause__, WrappedTimeout)
    assert _stray_timeouts() == 0


def test_an_error_before_the_limit_stays_the_blocks_own() -> None:
    with pytest.raises(WrappedTimeout), time_limit(60):
        raise WrappedTimeout("a defect, not the time limit")
