"""One verdict value: every part a command decides on (the support scan, CUDA graphs'
redraws and host syncs, the pair's time ratio) is a part of the ``Judgement``, its
``ok`` is the run's, and one rule folds the support scan into "lossless" and
"drop-in" for every table that reads it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.judgement import HeldVerdict, Judgement, ScanVerdict, hold_to_role
from harness.measure.time_ratio import TimeRatio
from harness.options import Roles, RunOptions
from harness.pipeline.check_result import Tier
from harness.pipeline.verdicts import Verdict

HIT = "support scan: 3 drafts outside the support in 6.55e+04 triples (first: ...)"


def _verdict(name: str, *, lossless: bool = True, drop_in: bool = True) -> Verdict:
    return Verdict(name, lossless=lossless, drop_in=drop_in and lossless, cases=4, failures=())


def _held(name: str, *, roles: Roles, scan: ScanVerdict | None, **verdict: bool) -> HeldVerdict:
    return hold_to_role(_verdict(name, **verdict), roles=roles, scan=scan)


@pytest.mark.parametrize("require", [Tier.LOSSLESS, Tier.DROP_IN])
def test_a_scan_hit_makes_a_clean_verdict_neither_lossless_nor_drop_in(require: Tier) -> None:
    roles = Roles(require=require)
    clean = _held("mine", roles=roles, scan=ScanVerdict("mine"))
    assert clean.lossless and clean.drop_in and clean.ok
    hit = _held("mine", roles=roles, scan=ScanVerdict("mine", HIT))
    assert (hit.lossless, hit.drop_in, hit.ok) == (False, False, False)
    checks_alone = _verdict("mine").summary()
    assert hit.summary() == f"NOT lossless: {HIT} (the checks alone: {checks_alone})"
    assert hit.to_json()["lossless"] is False and hit.to_json()["scan"] == HIT


def test_a_scan_hit_on_an_implementation_expected_to_fail_holds() -> None:
    roles = Roles(expect_fail=("broken",))
    assert _held("broken", roles=roles, scan=ScanVerdict("broken", HIT)).ok
    assert not _held("broken", roles=roles, scan=ScanVerdict("broken")).ok


def test_a_lossless_verdict_not_drop_in_stays_not_drop_in_with_a_clean_scan() -> None:
    held = _held("other", roles=Roles(require=Tier.LOSSLESS), scan=None, drop_in=False)
    assert held.lossless and not held.drop_in and held.ok
    assert "scan" not in held.to_json()  # no scan ran: the verdict's own JSON


def _judgement(*held: HeldVerdict, roles: Roles) -> Judgement:
    return Judgement(options=RunOptions(roles=roles), records=(), held=held)


def test_with_scans_holds_each_scan_in_its_own_implementations_verdict() -> None:
    roles = Roles(require=Tier.LOSSLESS)
    judgement = _judgement(
        _held("a", roles=roles, scan=None), _held("b", roles=roles, scan=None), roles=roles
    )
    assert judgement.ok
    scanned = judgement.with_scans([ScanVerdict("a"), ScanVerdict("b", HIT)])
    assert scanned.held_verdict("a").ok and not scanned.held_verdict("b").ok
    assert not scanned.ok


def _timed(ratio_ok: bool) -> TimeRatio:
    return TimeRatio(hidden_size=8, timing=None, failure="" if ratio_ok else "it raised")


class _Part:
    """A part that ran, with the ``ok`` it decided."""

    def __init__(self, ok: bool) -> None:
        self.ok = ok


@pytest.mark.parametrize("part", ["ledger", "oracle", "work", "redraws", "syncs", "time_ratio"])
def test_every_part_a_command_adds_decides_the_judgements_ok(part: str) -> None:
    roles = Roles(require=Tier.LOSSLESS)
    judgement = _judgement(_held("a", roles=roles, scan=None), roles=roles)
    assert judgement.ok
    assert replace(judgement, **{part: _Part(True)}).ok
    assert not replace(judgement, **{part: _Part(False)}).ok


def test_a_time_ratio_that_failed_fails_the_judgement() -> None:
    roles = Roles(require=Tier.LOSSLESS)
    judgement = _judgement(_held("a", roles=roles, scan=None), roles=roles)
    failed = replace(judgement, time_ratio=_timed(False))
    assert not failed.ok and failed.to_json()["time_ratio"] == {"ok": False}
