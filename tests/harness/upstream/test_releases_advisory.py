"""The advisory exits as an audit tool does (docs/releases.md, "The advisory and its exit
status"): ``python -m harness releases`` run over stub rows, one per exit path, with the
sweep itself replaced, so each path is the command's own."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from harness.cli import main
from harness.releases import run
from harness.releases.advisory import advisory_verdict
from harness.releases.sweep import Finding, ReleaseRow, ReleaseTask, not_judged, repro_command

ARGV = ["releases", "--sglang", "0.5.19", "--vllm", "none", "--jobs", "1", "--quiet"]


def _row(version: str, *classes: str, judged: bool = True) -> ReleaseRow:
    task = ReleaseTask(package="sglang", version=version, cache="/c", offline=True)
    findings: list[Finding] = [
        {"class": c, "evidence": f"{c} seen in {version}", "repro": repro_command(task)}
        for c in classes
    ]
    return {
        "package": "sglang",
        "version": version,
        "era": "e",
        "judged": judged,
        "lossless": (not classes) if judged else None,
        "drop_in": True if judged else None,
        "verifier": ["chain"] if judged else [],
        "randomness": {},
        "grid": {},
        "findings": findings,
        "not_covered": [] if judged else ["not judged: no convention for this contract"],
        "seconds": 1.0,
        "life": None,
    }


def _sweep_of(
    monkeypatch: pytest.MonkeyPatch, rows: Sequence[ReleaseRow], *, unanswered: int = 0
) -> None:
    def stub(tasks: object, **_: object) -> run.Sweep:
        return run.Sweep(rows=tuple(rows), ok=unanswered == 0, unanswered=unanswered)

    monkeypatch.setattr(run, "run_sweep", stub)


def _releases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, object]]:
    code = main([*ARGV, "--out-dir", str(tmp_path), "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


AFFECTED = [_row("0.5.18", "teacher_forcing", "ran"), _row("0.5.19"), _row("0.5.20", judged=False)]


def test_a_judged_release_that_is_not_lossless_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sweep_of(monkeypatch, AFFECTED)
    code, report = _releases(tmp_path, capsys)
    assert code == 1 and report["ok"] is False
    assert report["verdict"] == (
        "1 of 3 releases affected by 2 defect classes (ran, teacher_forcing); "
        "2 judged, 1 not judged"
    )
    assert "PASS" not in str(report["verdict"]) and "FAIL" not in str(report["verdict"])


def test_exit_zero_reports_the_same_findings_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sweep_of(monkeypatch, AFFECTED)
    failed = _releases(tmp_path / "a", capsys)[1]
    code, reported = _releases(tmp_path / "b", capsys, "--exit-zero")
    assert code == 0 and reported["ok"] is True
    assert str(reported["verdict"]).endswith("(--exit-zero: reported, exit 0)")
    assert reported["releases"] == failed["releases"]
    assert reported["advisories"] == failed["advisories"]


def test_a_sweep_whose_judged_releases_are_all_lossless_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sweep_of(monkeypatch, [_row("0.5.19"), _row("0.5.20", judged=False)])
    code, report = _releases(tmp_path, capsys)
    assert code == 0 and report["ok"] is True
    assert report["verdict"] == (
        "no judged release affected: 1 of 2 releases judged lossless, 1 not judged"
    )
    assert report["advisories"] == []


@pytest.mark.parametrize("extra", [(), ("--exit-zero",)])
def test_a_sweep_that_judged_nothing_is_not_clean(
    extra: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _sweep_of(monkeypatch, [_row("0.5.19", judged=False), _row("0.5.20", judged=False)])
    code, report = _releases(tmp_path, capsys, *extra)
    assert code == 1 and report["ok"] is False
    assert report["verdict"] == "nothing judged: none of 2 releases could be"


@pytest.mark.parametrize("extra", [(), ("--exit-zero",)])
def test_a_task_that_gave_no_answer_fails_the_sweep(
    extra: tuple[str, ...],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = ReleaseTask(package="sglang", version="0.5.20", cache="/c", offline=True)
    lost = not_judged(task, reason="the task failed: BrokenProcessPool: died")
    _sweep_of(monkeypatch, [_row("0.5.19"), lost], unanswered=1)
    code, report = _releases(tmp_path, capsys, *extra)
    assert code == 1 and report["ok"] is False
    assert str(report["verdict"]).endswith("; 1 gave no answer (its row says why)")


def test_the_json_keeps_releases_and_advisories_at_its_top_level(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sweep_of(monkeypatch, AFFECTED)
    _, report = _releases(tmp_path, capsys)
    assert {"releases", "advisories"} <= set(report)
    assert [r["version"] for r in report["releases"]] == ["0.5.18", "0.5.19", "0.5.20"]  # type: ignore[attr-defined]
    written = json.loads((tmp_path / "releases.json").read_text())
    assert written["advisories"] == report["advisories"]


def test_every_finding_of_the_advisory_carries_its_class_evidence_and_repro(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _sweep_of(monkeypatch, AFFECTED)
    _, report = _releases(tmp_path, capsys)
    advisories = report["advisories"]
    assert isinstance(advisories, list) and len(advisories) == 2
    for advisory in advisories:
        assert advisory["evidence"] == f"{advisory['class']} seen in 0.5.18"
        assert advisory["repro"].startswith("python -m harness releases --sglang 0.5.18 ")


@pytest.mark.parametrize(
    ("package", "version", "seed", "life_only"),
    [
        ("sglang", "0.5.19", 0, False),
        ("vllm", "0.33.0", 7, False),
        ("impl", "mine=PLUGIN", 3, False),
        ("sglang", "0.5.23", 0, True),  # a life finding's repro: the life alone
        ("vllm", "0.33.0", 7, True),
    ],
)
def test_the_repro_command_parses_as_pasted(
    package: str,
    version: str,
    seed: int,
    life_only: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The repro, split as a shell splits it, is a valid command line (``--dry-run``)
    with the row's seed and scan; paths with a space survive the paste."""
    cache, plugin = tmp_path / "a cache", tmp_path / "my file.py"
    cache.mkdir()
    plugin.write_text("")  # --dry-run checks the options; the file need not load
    task = ReleaseTask(
        package=package,
        version=version.replace("PLUGIN", str(plugin)),
        cache=str(cache),
        offline=False,
        seed=seed,
        scan_triples=256,
        life_only=life_only,
    )
    words = shlex.split(repro_command(task))
    assert ("--life-only" in words) is life_only
    assert words[:4] == ["python", "-m", "harness", "releases"]
    assert words[words.index("--seed") + 1] == str(seed)
    assert words[words.index("--scan-triples") + 1] == "256"
    code = main([*words[3:], "--dry-run", "--out-dir", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    assert "every option is valid" in capsys.readouterr().out


def test_the_verdict_counts_rows_not_findings() -> None:
    """Two classes on one release are one release affected; an unjudged release is no
    finding; the classes are those of the affected releases."""
    verdict = advisory_verdict(
        [_row("0.5.18", "a", "b"), _row("0.5.19", judged=False)], unanswered=0
    )
    assert (verdict.releases, verdict.judged) == (2, 1)
    assert (verdict.affected, verdict.classes) == (("sglang 0.5.18",), ("a", "b"))
    assert verdict.ok is False
