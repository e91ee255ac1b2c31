"""One verdict value: every part a command decides on (the support scan, CUDA graphs'
redraws and host syncs, the pair's time ratio, the scaling sweep, the noise words) is a
part of the ``Judgement``, its ``ok`` is the run's, and one rule folds the support scan
into "lossless" and "drop-in" for every table that reads it. Read from the source: no
module outside the judgement decides pass or fail."""

from __future__ import annotations

import ast
from dataclasses import fields, replace
from pathlib import Path

import pytest

from harness.judgement import HeldVerdict, Judgement, PartVerdict, ScanVerdict, hold_to_role
from harness.measure.time_ratio import TimeRatio
from harness.options import Roles, RunOptions
from harness.pipeline.check_result import Tier
from harness.pipeline.verdicts import Verdict
from tests.helpers import REPO_ROOT

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
    # one implementation at a time (the versions table): each scan stays held
    in_turn = judgement.with_scans([ScanVerdict("b", HIT)]).with_scans([ScanVerdict("a")])
    assert in_turn.held_verdict("b").scan == ScanVerdict("b", HIT) and not in_turn.ok


def test_a_part_judged_beside_the_checks_is_held_in_its_own_implementations_verdict() -> None:
    """A release's life and its verify target's law (``Judgement.with_parts``): a part
    that found something makes a clean verdict neither lossless nor drop-in, leads its
    summary and is in its JSON; a part that found nothing changes nothing; the scan held
    before stays held, and a scan held after keeps the parts."""
    roles = Roles(require=Tier.LOSSLESS)
    judgement = _judgement(
        _held("a", roles=roles, scan=None), _held("b", roles=roles, scan=None), roles=roles
    )
    scanned = judgement.with_scans([ScanVerdict("a", HIT)])
    parted = scanned.with_parts([PartVerdict("a", "life"), PartVerdict("b", "law", "drops min-p")])
    a, b = parted.held_verdict("a"), parted.held_verdict("b")
    assert a.scan == ScanVerdict("a", HIT) and not a.lossless  # the scan kept
    assert (b.lossless, b.drop_in, b.ok, parted.ok) == (False, False, False, False)
    assert b.summary().startswith("NOT lossless: law: drops min-p (the checks alone: ")
    assert b.to_json()["parts"] == {"law": "drops min-p"} and b.to_json()["lossless"] is False
    clean = judgement.with_parts([PartVerdict("b", "life")]).held_verdict("b")
    assert clean.lossless and clean.drop_in and clean.to_json()["parts"] == {"life": None}
    rescanned = parted.with_scans([ScanVerdict("b")])
    assert rescanned.held_verdict("b").parts == b.parts


def _timed(ratio_ok: bool) -> TimeRatio:
    return TimeRatio(hidden_size=8, timing=None, failure="" if ratio_ok else "it raised")


class _Part:
    """A part that ran, with the ``ok`` it decided."""

    def __init__(self, ok: bool) -> None:
        self.ok = ok


PARTS = ["ledger", "oracle", "work", "redraws", "syncs", "time_ratio", "scaling", "words"]


@pytest.mark.parametrize("part", PARTS)
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


def test_a_scan_without_a_held_verdict_is_held_to_its_role_alone() -> None:
    roles = Roles(expect_fail=("broken",))
    clean, hit = ScanVerdict("fixed"), ScanVerdict("broken", HIT)
    judgement = Judgement.of_parts(RunOptions(roles=roles)).with_scans([clean, hit])
    assert judgement.ok and judgement.to_json()["scans"]["broken"] == {"ok": False, "finding": HIT}
    assert not Judgement.of_parts(RunOptions()).with_scans([clean, hit]).ok  # a hit unexpected
    missed = Judgement.of_parts(RunOptions(roles=roles)).with_scans([ScanVerdict("broken")])
    assert not missed.ok  # expected to hit, and clean


def test_every_part_of_the_judgement_is_in_its_ok() -> None:
    """A field added to the judgement beside the verdicts must be one of its parts."""
    beside = {f.name for f in fields(Judgement)} - {"options", "records", "held", "timing", "scans"}
    assert beside == set(PARTS)


# -- read from the source: no module outside the judgement decides pass or fail ---------------
HARNESS = REPO_ROOT / "harness"
# The entry points, the tables above the judge and the renderers: they read verdicts.
READERS = sorted(
    [
        *HARNESS.glob("cli/*.py"),
        *HARNESS.glob("render/*.py"),
        *(HARNESS / name for name in ("testing.py", "pytest_plugin.py", "__main__.py")),
        *HARNESS.glob("releases/*.py"),
        *HARNESS.glob("upstream/releases/*.py"),
    ]
)
VERDICT_WORDS = {"ok", "lossless", "drop_in", "passed", "holds"}
# Readers whose ok is no verdict on an implementation, with why (docs/verdicts.md, "One
# verdict"): the release sweep's ok is that every task answered (each release's verdict
# is a row of the advisory, reported, never held).
NOT_A_VERDICT = {"releases/run.py": "every task answered"}
# The rules that decide a part, each called by the judgement alone (and where it lives).
PREDICATES = {
    "redraws_hold": "gpu/graphs.py",
    "syncs_hold": "gpu/host_sync.py",
    "sync_failed": "gpu/host_sync.py",
    "sweeps_ok": "measure/word_sweep.py",
    "meets_expectation": "oracles/stats.py",
    "expectations_hold": "oracles/stats.py",
    "hold_to_role": "judgement.py",
}


def _name(path: Path) -> str:
    return str(path.relative_to(HARNESS))


def _reads_a_verdict(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr in VERDICT_WORDS)
        or (isinstance(n, ast.Name) and n.id in VERDICT_WORDS)
        for n in ast.walk(node)
    )


def _called(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    return function.id if isinstance(function, ast.Name) else getattr(function, "attr", None)


def test_the_rules_that_decide_a_part_are_called_by_the_judgement_alone() -> None:
    callers: dict[str, set[str]] = {name: set() for name in PREDICATES}
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = _called(node)
            if name in callers:
                callers[name].add(_name(path))
    for name, home in PREDICATES.items():
        assert f"def {name}(" in (HARNESS / home).read_text(), f"{name} left {home}"
        assert callers[name] <= {"judgement.py", home}, (name, callers[name])


@pytest.mark.parametrize("path", READERS, ids=_name)
def test_no_reader_decides_pass_or_fail(path: Path) -> None:
    """Every ``ok`` a reader passes on or keeps is read from a verdict (``x.ok``), or is the
    constant true of a section that decides nothing; no reader combines two verdicts."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        values = []
        if isinstance(node, ast.keyword) and node.arg == "ok":
            values = [node.value]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "ok":
                    values.append(node.value)
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    values += [
                        v
                        for t, v in zip(target.elts, node.value.elts, strict=True)
                        if isinstance(t, ast.Name) and t.id == "ok"
                    ]
        for value in values:
            read = isinstance(value, ast.Attribute) and value.attr == "ok"
            constant = isinstance(value, ast.Constant) and value.value is True
            passed_on = isinstance(value, ast.Name) and value.id == "ok"
            emitted = _called(value) == "emit_report"  # the report's ok, given back
            if _name(path) in NOT_A_VERDICT:
                continue
            assert read or constant or passed_on or emitted, (
                f"{_name(path)}:{value.lineno}: ok = {ast.unparse(value)}"
            )
        if isinstance(node, ast.BoolOp):
            verdicts = [v for v in node.values if _reads_a_verdict(v)]
            assert len(verdicts) < 2, f"{_name(path)}:{node.lineno}: {ast.unparse(node)}"
