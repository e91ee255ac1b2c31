"""The releases sweep: rows a release cannot be judged for, the advisory from the rows,
and the command end to end on wheels of our own modules (the before-fix module as an
sglang 0.5.18 wheel, the after-fix module as 0.5.19), each judged in its own process."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli import main
from harness.oracles.problem import DEFAULT_CONFIG, group_label
from harness.releases import scan, sweep
from harness.releases.advisory import advisories, order_rows
from harness.releases.sweep import (
    ReleaseRow,
    ReleaseTask,
    judge_release,
    oracle_verifiers,
    randomness_of,
    repro_command,
)
from tests.harness.upstream.fake_wheels import (
    AFTER_FIX,
    BEFORE_FIX,
    SHAPE_0_5_16,
    SHAPE_FILE,
    build_wheel,
    sampler_wheel,
)
from tests.helpers import start_harness, subprocess_env

PR_ERA_PLUMBING = "shared: torch's one generator, drafter and verifier in turn"


def _row(version: str, *classes: str, judged: bool = True) -> ReleaseRow:
    return {
        "package": "sglang",
        "version": version,
        "era": "e",
        "judged": judged,
        "lossless": not classes if judged else None,
        "drop_in": None,
        "verifier": ["chain"],
        "randomness": {"chain": PR_ERA_PLUMBING},
        "grid": {"chain": ["T=1", "greedy"]},
        "findings": [
            {"class": c, "evidence": f"{c} in {version}", "repro": f"r {version}"} for c in classes
        ],
        "not_covered": [],
        "seconds": 1.0,
        "life": None,
    }


def test_the_advisory_names_first_last_and_first_fixed() -> None:
    rows = [
        _row("0.5.21"),
        _row("0.5.9", "teacher_forcing"),
        _row("0.5.10", "teacher_forcing", "ran"),
        _row("0.5.20", judged=False),  # not judged: never "fixed in"
        _row("0.5.19"),
    ]
    assert [r["version"] for r in order_rows(rows)] == [
        "0.5.9",
        "0.5.10",
        "0.5.19",
        "0.5.20",
        "0.5.21",
    ]
    assert advisories(rows) == [
        {
            "class": "ran",
            "package": "sglang",
            "affected": {"first": "0.5.10", "last": "0.5.10", "versions": ["0.5.10"]},
            "fixed_in": "0.5.19",
            "evidence": "ran in 0.5.10",
            "repro": "r 0.5.10",
        },
        {
            "class": "teacher_forcing",
            "package": "sglang",
            "affected": {"first": "0.5.9", "last": "0.5.10", "versions": ["0.5.9", "0.5.10"]},
            "fixed_in": "0.5.19",
            "evidence": "teacher_forcing in 0.5.9",  # the first affected release's
            "repro": "r 0.5.9",
        },
    ]


def test_a_class_still_present_in_the_last_release_is_not_fixed() -> None:
    (advisory,) = advisories([_row("0.5.19"), _row("0.5.22", "ran")])
    assert advisory["fixed_in"] is None


def _task(
    tmp_path: Path, version: str, *, package: str = "sglang", scan_triples: int = 4096
) -> ReleaseTask:
    return ReleaseTask(
        package=package,
        version=version,
        cache=str(tmp_path),
        offline=True,
        scan_triples=scan_triples,
    )


def test_a_release_not_in_the_cache_is_not_judged_not_fetched(tmp_path: Path) -> None:
    row = judge_release(_task(tmp_path, "0.5.19"))
    assert not row["judged"] and row["lossless"] is None
    assert row["not_covered"][0].startswith("not judged: not fetched: no sglang-0.5.19 wheel")


def test_a_release_whose_files_differ_from_its_era_is_an_unknown_contract(
    tmp_path: Path,
) -> None:
    sampler_wheel(tmp_path / "sglang-0.5.18", version="0.5.18", source=AFTER_FIX)
    row = judge_release(_task(tmp_path, "0.5.18"))
    assert not row["judged"]
    assert row["not_covered"] == [
        "not judged: unknown contract: its files differ from sglang-0.5.17-0.5.18: "
        "constructor adds tp_sync"
    ]


@pytest.mark.e2e
@pytest.mark.upstream  # the era's light dependencies (msgspec): `tox run -e upstream`
def test_the_first_release_is_judged_as_its_proposer_drives_it(tmp_path: Path) -> None:
    pytest.importorskip("msgspec", reason="the 0.5.16 era's light dependencies")
    sampler_wheel(tmp_path / "sglang-0.5.16", version="0.5.16", source=SHAPE_0_5_16)
    row = judge_release(_task(tmp_path, "0.5.16", scan_triples=256))
    assert (row["era"], row["judged"], row["lossless"]) == ("sglang-0.5.16", True, True)
    assert row["findings"] == []
    # its life folds the all-greedy batches too: those calls keep no step logits and are
    # held to their token ids alone, as a case's checks hold them
    assert row["life"] is not None and row["life"]["lossless"] is True
    # an all-greedy batch is folded: no noise, no step logits, named as drop-in differences
    assert row["drop_in"] is False
    assert row["verifier"] == ["chain"] and row["randomness"] == {"chain": PR_ERA_PLUMBING}
    # the row states the request grid its oracle ran: every group of the default
    assert row["grid"] == {"chain": [group_label(g) for g in DEFAULT_CONFIG.groups]}
    assert row["not_covered"][0].startswith("the no-anchor layout: outside its era's contract")
    assert any("multinomial branch" in n for n in row["not_covered"])


@pytest.mark.e2e
@pytest.mark.upstream
def test_the_first_releases_eager_block_is_held_to_the_law(tmp_path: Path) -> None:
    pytest.importorskip("msgspec", reason="the 0.5.16 era's light dependencies")
    cold = SHAPE_0_5_16.read_text().replace(
        "temperatures=temperatures,", "temperatures=torch.ones_like(temperatures),"
    )  # the eager block drafts every sampled row at T = 1
    assert cold != SHAPE_0_5_16.read_text()
    folder = tmp_path / "sglang-0.5.16"
    build_wheel(folder, package="sglang", version="0.5.16", files={SHAPE_FILE: cold})
    row = judge_release(_task(tmp_path, "0.5.16", scan_triples=0))
    assert (row["judged"], row["lossless"]) == (True, False)
    classes = {f["class"] for f in row["findings"]}
    assert "teacher_forcing" not in classes  # its kept logits are right, its draws are not
    assert {"noise_replay", "statistical oracle"} <= classes


def test_the_first_releases_worker_names_are_stand_ins_that_refuse_use() -> None:
    from harness.upstream.sglang_0_5_16 import WORKER_SURFACE

    batch = WORKER_SURFACE["sglang.srt.managers.schedule_batch"]["ScheduleBatch"]
    with pytest.raises(RuntimeError, match=r"ScheduleBatch\.forward is the worker's"):
        batch.forward()


def test_an_era_without_a_convention_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.upstream.releases import eras

    era = eras.era_of("sglang", "0.5.16")
    assert era is not None
    unknown = replace(era, loading=eras.Loading.NONE, why_not_judged="no convention: test")
    monkeypatch.setattr(eras, "ERAS", (unknown,))
    monkeypatch.setattr(sweep, "era_of", eras.era_of)
    sampler_wheel(tmp_path / "sglang-0.5.16", version="0.5.16", source=SHAPE_0_5_16)
    row = judge_release(_task(tmp_path, "0.5.16"))
    assert not row["judged"]
    assert row["not_covered"] == ["not judged: no convention: test"]


def test_a_release_whose_sampling_kernel_calls_libdevice_is_not_judged_without_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton's interpreter does not run libdevice (a call gives ``None``, the kernel
    raises): without CUDA a release calling a function the harness has no body for
    (``interpreter_libdevice.BODIES``) is not judged, its row naming each such call,
    never a failure of the release. A call with a body (``log1p``) is not named, and a
    call in a comment is not a call."""
    import torch

    from harness.upstream.releases import eras

    era = eras.era_of("sglang", "0.5.16")
    assert era is not None
    kernel = "sglang/kernel.py"
    blocked = replace(era, kernel_files=(kernel,))
    monkeypatch.setattr(eras, "ERAS", (blocked,))
    monkeypatch.setattr(sweep, "era_of", eras.era_of)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    source = (
        "g = -tl.log(-tldevice.log1p(-u))  # not libdevice.isnan(x) here\nr = tldevice.rsqrt(g)\n"
    )
    build_wheel(
        tmp_path / "sglang-0.5.16",
        package="sglang",
        version="0.5.16",
        files={SHAPE_FILE: SHAPE_0_5_16.read_text(), kernel: source},
    )
    row = judge_release(_task(tmp_path, "0.5.16"))
    assert (row["judged"], row["lossless"], row["findings"]) == (False, None, [])
    assert row["not_covered"] == [
        "not judged: its sampling kernel cannot run under Triton's interpreter (no CUDA "
        "here): sglang/kernel.py:2 calls tldevice.rsqrt (libdevice, which the interpreter "
        "does not run and the harness has no body for; on CUDA it runs)"
    ]


def test_the_repro_command_judges_that_release_alone(tmp_path: Path) -> None:
    assert repro_command(_task(tmp_path, "0.5.19")) == (
        f"python -m harness releases --sglang 0.5.19 --vllm none --wheel-dir {tmp_path} --seed 0 "
        "--scan-triples 4096"
    )
    deeper = replace(_task(tmp_path, "0.25.0", package="vllm"), life_only=True, life_rows=2000)
    assert repro_command(deeper).endswith("--scan-triples 4096 --life-only --life-rows 2000")


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--sglang", "0.5.x"], "--sglang: expected versions and ranges"),
        (["--jobs", "0"], "--jobs must be a positive integer"),
        (["--ray-address", "auto"], "--ray-address needs --executor ray"),
        (["--all", "--vllm", "none"], "--all judges every release"),
        (["--wheel-dir", "/definitely/not/here"], "no such folder"),
        (["--sglang", "0.5.23-0.5.19"], "the range 0.5.23-0.5.19 runs backwards"),
        (["--sglang", "none", "--vllm", "none"], "nothing to judge"),
        (["--sglang", "0.4.0-0.4.9", "--vllm", "none"], "no known release in that range"),
        (["--life-rows", "1"], "--life-rows must be 2 or more (rows a request state), got 1"),
    ],
)
def test_bad_options_are_refused_before_any_work(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["releases", *argv, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]
    assert not (tmp_path / "releases.md").exists()  # nothing judged, nothing written


@pytest.mark.e2e
@pytest.mark.upstream  # the era's light dependencies (msgspec): `tox run -e upstream`
def test_the_command_judges_each_release_from_its_wheel_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("msgspec", reason="the 0.5.17-0.5.21 modules import msgspec")
    cache = tmp_path / "wheels"
    sampler_wheel(cache, version="0.5.18", source=BEFORE_FIX)
    sampler_wheel(cache, version="0.5.19", source=AFTER_FIX)
    argv = [
        "releases", "--sglang", "0.5.18-0.5.19", "--vllm", "none", "--wheel-dir", str(cache),
        "--jobs", "2", "--out-dir", str(tmp_path / "out"), "--json", "--quiet",
    ]  # fmt: skip
    assert main(argv) == 1  # 0.5.18 is not lossless: the advisory's finding fails the sweep
    first = json.loads(capsys.readouterr().out)["sections"][0]["data"]
    before, after = first["releases"]
    assert (before["version"], before["judged"], before["lossless"]) == ("0.5.18", True, False)
    assert (after["version"], after["judged"], after["lossless"]) == ("0.5.19", True, True)
    assert before["era"] == "sglang-0.5.17-0.5.18" and after["era"] == "sglang-0.5.19-0.5.21"
    for row in (before, after):  # no verifier of the PR-era server: chain, on its plumbing
        assert row["verifier"] == ["chain"]
        assert row["randomness"] == {"chain": PR_ERA_PLUMBING}
    assert "teacher_forcing" in {f["class"] for f in before["findings"]}
    assert all(
        f["repro"].startswith("python -m harness releases --sglang 0.5.18")
        for f in before["findings"]
    )
    assert {a["fixed_in"] for a in first["advisories"]} == {"0.5.19"}
    assert main([*argv, "--resume", "--exit-zero"]) == 0  # the journal's rows, reported only
    again = json.loads(capsys.readouterr().out)["sections"][0]["data"]
    assert again == first


# Prepended to a sampler module: its import writes the process's pid where the test
# says, then hangs, as a slow judgement would.
_HANGS_AT_IMPORT = (
    "import os as _os, time as _time\n"
    "open(_os.environ['DSPARK_TEST_PID_FILE'], 'w').write(str(_os.getpid()))\n"
    "_time.sleep(600)\n"
)


@pytest.mark.e2e
@pytest.mark.upstream  # the era's light dependencies (msgspec): `tox run -e upstream`
def test_a_stopped_sweep_ends_the_releases_it_is_judging(tmp_path: Path) -> None:
    """SIGTERM stops the sweep at once, 143 and one line, and the release being judged
    in its own process ends with it: the sweep does not wait for the judgement."""
    pytest.importorskip("msgspec", reason="the 0.5.17-0.5.21 modules import msgspec")
    cache = tmp_path / "wheels"
    era = sweep.era_of("sglang", "0.5.18")
    assert era is not None
    future = "from __future__ import annotations\n"
    hangs = BEFORE_FIX.read_text().replace(future, future + _HANGS_AT_IMPORT, 1)
    assert _HANGS_AT_IMPORT in hangs
    build_wheel(
        cache / "sglang-0.5.18",
        package="sglang",
        version="0.5.18",
        files={era.sampler_file: hangs},
    )
    pid_file = tmp_path / "judging.pid"
    process = start_harness(
        *("releases", "--sglang", "0.5.18", "--vllm", "none", "--wheel-dir", str(cache)),
        *("--jobs", "1", "--out-dir", str(tmp_path / "out")),
        env={**subprocess_env(), "DSPARK_TEST_PID_FILE": str(pid_file)},
    )
    try:
        for _ in range(1200):  # the release's process is importing its sampler
            if pid_file.is_file() and pid_file.read_text():
                break
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.1)
        judging = int(pid_file.read_text())
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)  # the judgement would take 600 s
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert err.strip().splitlines()[-1].startswith("interrupted by SIGTERM"), err
    for _ in range(100):
        try:
            os.kill(judging, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the release's process {judging} outlived the sweep")


@pytest.mark.e2e
def test_a_plug_in_file_is_a_row_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lazy = AFTER_FIX.with_name("dspark_after_fix_lazy.py")
    argv = [
        "releases", "--sglang", "none", "--vllm", "none", "--impl", f"up_f={lazy}",
        "--jobs", "1", "--out-dir", str(tmp_path), "--json", "--quiet",
    ]  # fmt: skip
    assert main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)["sections"][0]["data"]["releases"]
    assert (row["package"], row["era"], row["judged"], row["lossless"]) == (
        "impl",
        "pr36934",
        True,
        True,
    )
    assert row["verifier"] == ["chain"]
    assert row["randomness"] == {"chain": PR_ERA_PLUMBING}


def test_a_row_judges_every_path_and_names_the_one_that_fails(tmp_path: Path) -> None:
    """A release's further paths (vLLM's top-K beside its dense one) are judged in its
    row: a defect on one path alone makes the row not lossless, its evidence names that
    path, and a correct path beside it adds nothing."""
    from harness.plugins.implementations import builtin_implementations, parse_impl_spec

    fixed, legacy = builtin_implementations(("fixed", "legacy"))
    lazy = parse_impl_spec(f"up_f={AFTER_FIX.with_name('dspark_after_fix_lazy.py')}")
    row = sweep._judged_row(
        _task(tmp_path, "0.5.19", scan_triples=0),
        era="e",
        implementation=fixed,
        other_paths=(lazy, legacy),
        verifier="chain",
        not_covered=[],
        started=time.perf_counter(),
    )
    assert (row["judged"], row["lossless"], row["drop_in"]) == (True, False, False)
    assert row["findings"] and all(f["evidence"].startswith("legacy: ") for f in row["findings"]), (
        row["findings"]
    )
    assert "statistical oracle" in {f["class"] for f in row["findings"]}
    assert (
        "legacy: the support scan: not run on this path (it scans the dense one)"
        in (row["not_covered"])
    )


def test_a_verify_target_that_is_not_its_servers_law_makes_its_row_not_lossless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's two laws (``harness.releases.laws``): a verify target that differs from
    its server's sampler is a finding of its own class that makes a row whose drafter
    passes not lossless; the sets judged are in its grid, what did not run in
    ``not_covered``."""
    from harness.plugins.implementations import builtin_implementations
    from harness.releases.laws import LAW_CLASS, LAWS_GRID, LawsOfRow
    from harness.render.releases import oracle_under

    said = LawsOfRow(judged=["T=1 min-p 0.2 (alone)"], evidence="drops min-p", not_covered=["x"])
    monkeypatch.setattr(sweep, "server_laws", lambda era, root: said)
    (fixed,) = builtin_implementations(("fixed",))
    task = _task(tmp_path, "0.5.19", scan_triples=0)
    row = sweep._judged_row(
        task, era="e", implementation=fixed, verifier="chain", not_covered=[],
        started=time.perf_counter(),
    )  # fmt: skip
    assert (row["judged"], row["lossless"], row["drop_in"]) == (True, False, False)
    assert row["findings"] == [
        {"class": LAW_CLASS, "evidence": "drops min-p", "repro": repro_command(task)}
    ]
    assert row["grid"][LAWS_GRID] == ["T=1 min-p 0.2 (alone)"] and "x" in row["not_covered"]
    assert oracle_under(row).endswith(f"{LAWS_GRID}: 1 set(s) alone or mixed")


def test_a_row_whose_oracle_process_died_gives_no_row_not_a_defect(tmp_path: Path) -> None:
    """SIGKILL in the oracle's process (the OOM killer's signal) shows no defect of the
    release: the task raises, so the sweep counts it as giving no answer and never
    journals it (a resumed sweep judges it again), where it was a ``statistical oracle``
    finding that a resume read back."""
    from harness.plugins.implementations import parse_impl_spec

    killed = parse_impl_spec("killed=tests.plugins.forked_faults:KilledForked")
    with pytest.raises(sweep.OracleGaveNoVerdict, match="died from signal SIGKILL"):
        sweep._judged_row(
            _task(tmp_path, "0.5.19", scan_triples=0), era="e", implementation=killed,
            verifier="chain", not_covered=[], started=time.perf_counter(),
        )  # fmt: skip


def test_a_sampler_that_raises_gives_a_row_not_lossless_as_judge_says(tmp_path: Path) -> None:
    """A sampler that raises fails ``ran`` in the matrix and in its life: the row is
    judged not lossless (a defect shown), as ``judge()`` and the report say, not a task
    that gave no answer; its oracle's and its life's laws are not claimed."""
    from harness.plugins.implementations import parse_impl_spec

    raising = parse_impl_spec("raises=tests.plugins.planted_defects:ConfidenceLogitSampler")
    row = sweep._judged_row(
        _task(tmp_path, "0.5.19", scan_triples=0), era="e", implementation=raising,
        verifier="chain", not_covered=[], started=time.perf_counter(),
    )  # fmt: skip
    assert (row["judged"], row["lossless"], row["drop_in"]) == (True, False, False)
    assert row["findings"][0]["class"] == "ran"
    assert row["life"] is not None and not row["life"]["lossless"]
    assert row["life"]["states"] == {}
    said = "the sampler raised at drafter call 0: AssertionError"
    gap = "its life's law per request state: no state judged ("
    assert any(line.startswith(gap) and said in line for line in row["not_covered"])
    life_only = sweep._judged_row(
        replace(_task(tmp_path, "0.5.19", scan_triples=0), life_only=True), era="e",
        implementation=raising, verifier="chain", not_covered=[], started=time.perf_counter(),
    )  # fmt: skip
    assert (life_only["judged"], life_only["lossless"]) == (True, False)
    assert [f["class"] for f in life_only["findings"]] == ["ran"]
    assert any(line.startswith(gap) and said in line for line in life_only["not_covered"])


def test_each_release_runs_under_its_servers_verifier_and_chain_the_control() -> None:
    assert oracle_verifiers("sglang-blockwise") == ("sglang-blockwise", "chain")
    assert oracle_verifiers("vllm-rejection") == ("vllm-rejection", "chain")
    assert oracle_verifiers("chain") == ("chain",)  # chain stands in: once is enough


def test_a_row_says_which_randomness_each_verifier_ran_on() -> None:
    from harness.oracles.result import StatsResult

    def result(shared: bool | None, server: str | None) -> StatsResult:
        return StatsResult(
            name="x", rows={}, alpha=0.01, family_size=1, statistics=(), marginals=(),
            mean_accepted_length={}, shared_noise=shared, server=server,
        )  # fmt: skip

    assert randomness_of(result(True, "sglang 0.5.23")) == "shared: sglang 0.5.23's plumbing"
    assert randomness_of(result(True, None)) == PR_ERA_PLUMBING
    assert randomness_of(result(False, None)).startswith("independent streams")
    assert randomness_of(result(None, None)) == "nothing decoded"


def test_a_row_states_the_oracles_cut_and_its_bound() -> None:
    """A release whose convention cuts the oracle (vLLM's sampler under Triton's
    interpreter) says so in ``not_covered``, per verifier, with the heads left out and
    the rows that ran; a run cut by nothing adds no line."""
    from harness.oracles.result import StatsResult
    from harness.upstream.vllm_convention import SAMPLER_CUT

    def result(verifier: str, **cut: object) -> StatsResult:
        return StatsResult(
            name="x", rows={"far": 250}, alpha=1e-6, family_size=28, statistics=(),
            marginals=(), mean_accepted_length={}, verifier=verifier, **cut,  # type: ignore[arg-type]
        )  # fmt: skip

    cut = {"cuts": (SAMPLER_CUT,), "heads_not_run": (("gated", "no hidden state"),)}
    lines = sweep.oracle_not_covered([result("vllm-rejection", **cut), result("chain", **cut)])
    assert [line.split(":")[0] for line in lines] == [
        "the statistical oracle under vllm-rejection",
        "the statistical oracle under chain",
    ]
    assert "gated head not run (no hidden state)" in lines[0]
    assert "far target only, at most 250 rows per head, 12 rounds per row" in lines[0]
    assert "ran far 250 rows per head" in lines[0]
    assert sweep.oracle_not_covered([result("chain")]) == []


def test_a_row_states_the_scans_points_not_run_and_its_batch_cut() -> None:
    """The support scan's gaps: points that raised (outside the sampler's contract), by
    reason, and a smaller batch than the default plan's (an interpreted sampler scans
    the triples asked for, 4096 a point, where the default batch covers 65536)."""
    from harness.pipeline.support_scan import PointResult, ScanPlan, full_plan

    asked = full_plan(triples_per_point=4096)
    cut = replace(asked, bs=1024)

    def results(plan: ScanPlan, errors: int) -> list[PointResult]:
        points = list(plan.points())
        failing = len(points) - errors
        return [
            PointResult(implementation="v", point=p, hits=(), hit_count=0, triples=p.triples,
                        wall_s=0.0, error="OutputError: outside" if i >= failing else None)
            for i, p in enumerate(points)
        ]  # fmt: skip

    lines = scan.scan_not_covered(results(cut, 10), plan=cut, default=asked)
    assert lines[0] == "the support scan: 10 of 12 points not run (OutputError: outside)"
    assert lines[1].startswith("the support scan at 4096 triples per point (bs=1024, gamma=4")
    assert "bs=16384, covers 65536" in lines[1]
    assert scan.scan_not_covered(results(asked, 0), plan=asked, default=asked) == []


def test_every_vllm_era_is_loaded_as_the_package_under_its_own_convention() -> None:
    """0.25-0.34 are loaded as the vLLM package, each era bound to its own convention
    (``harness.upstream.vllm_eras``, ``harness.upstream.vllm_0_34``)."""
    from harness.upstream.releases.eras import Loading, era_of

    eras = [era_of("vllm", v) for v in ("0.25.0", "0.30.0", "0.31.0", "0.34.0")]
    assert [era.name if era else None for era in eras] == [
        "vllm-0.25-0.27",
        "vllm-0.28-0.30",
        "vllm-0.31-0.33",
        "vllm-0.34",
    ]
    assert all(era.loading is Loading.VLLM_PACKAGE for era in eras if era)
    conventions = [era.convention.convention for era in eras if era and era.convention]
    assert conventions == [
        "harness.upstream.vllm_eras.VLLM_0_25",
        "harness.upstream.vllm_eras.VLLM_0_28",
        "harness.upstream.vllm_convention.VLLM_0_33",
        "harness.upstream.vllm_0_34.VLLM_0_34",
    ]
