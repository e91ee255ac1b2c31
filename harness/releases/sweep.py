"""One release judged in a process of its own, the sweep, and the advisory.

``judge_release(task)`` is the task an executor runs (module-level, plain arguments,
plain answer): it fetches the version's wheel into the cache, extracts it, checks its
files against its era's contract, loads its sampler unchanged the way its era says
(``eras.Loading``), and judges it with ``harness.judge.judge`` on the standard matrix
with the statistical oracle under its own server's verifier (chain where the harness
has none, said so in ``not_covered``). A release the harness cannot judge is a row with
``judged`` false and the reason, never a pass; ``harness.releases.advisory`` turns the
rows into the advisory.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from harness.executor import ForkedExecutor
from harness.releases.laws import LAW_CLASS, LAWS_GRID, server_laws
from harness.releases.scan import SCAN_CLASS, support_scan
from harness.upstream.releases.eras import (
    Loading,
    ReleaseEra,
    contract_differences,
    era_of,
    libdevice_calls,
    nearest_era,
    unknown_contract,
)

if TYPE_CHECKING:
    from harness.case import Case
    from harness.oracles.result import StatsResult
    from harness.plugins.implementations import Implementation
    from harness.releases.life import LifeRecord

from harness.upstream.releases.wheels import NotFetched, Wheel, extract, fetch

CHAIN = "chain"
LIFE = "its life across the junction"  # the part a row's life is held as
ORACLE_CLASS = "statistical oracle"  # the class of a finding the oracle makes


# One defect class a release shows, its first evidence and the command that replays it
# ("class" is a keyword: the functional form keeps the JSON name).
Finding = TypedDict("Finding", {"class": str, "evidence": str, "repro": str})


class ReleaseRow(TypedDict):
    """One release (or one ``--impl`` file) in the advisory."""

    package: str
    version: str
    era: str
    judged: bool
    lossless: bool | None
    drop_in: bool | None
    # the verifiers its oracle ran under: its server's own first (where the harness has
    # it), then chain, the control; empty: not judged
    verifier: list[str]
    # per verifier, the randomness it was judged on: "shared: <server>'s plumbing" (the
    # drafter and the verifier on its server's one source) or "independent streams"
    randomness: dict[str, str]
    # per verifier, the request-parameter groups its oracle ran (the default grid, or the
    # temperature groups where a verifier applies no truncation: docs/releases.md)
    grid: dict[str, list[str]]
    findings: list[Finding]
    not_covered: list[str]
    seconds: float
    # its life across the junction (harness.releases.life); None: not lived
    life: LifeRecord | None


@dataclass(frozen=True)
class ReleaseTask:
    """What one task judges: a release of a package (or a plug-in file, ``impl``)."""

    package: str  # "sglang", "vllm" or "impl"
    version: str  # the release's version, or the --impl spec of a file
    cache: str  # the wheel cache folder
    offline: bool  # --wheel-dir given: never fetch
    seed: int = 0
    scan_triples: int = 4096  # the support scan's triples per point (0: no scan)
    life_only: bool = False  # its life across the junction alone (--life-only)
    life_rows: int | None = None  # rows a state its life asks for (--life-rows; None: its era's)


def repro_command(task: ReleaseTask) -> str:
    """The command that judges this one release (or ``--impl`` file) again, as a user
    pastes it into a shell: the same seed, the same scan, the same wheel cache."""
    if task.package == "impl":
        selection = ["--sglang", "none", "--vllm", "none", "--impl", task.version]
    else:
        other = "vllm" if task.package == "sglang" else "sglang"
        selection = [f"--{task.package}", task.version, f"--{other}", "none"]
        selection += ["--wheel-dir", task.cache]
    words = [*selection, "--seed", str(task.seed), "--scan-triples", str(task.scan_triples)]
    words += ["--life-only"] if task.life_only else []
    words += ["--life-rows", str(task.life_rows)] if task.life_rows is not None else []
    return shlex.join(["python", "-m", "harness", "releases", *words])


def _row(
    task: ReleaseTask, *, era: str, started: float, reason: str = "", **judged: object
) -> ReleaseRow:
    row: ReleaseRow = {
        "package": task.package,
        "version": task.version,
        "era": era,
        "judged": False,
        "lossless": None,
        "drop_in": None,
        "verifier": [],
        "randomness": {},
        "grid": {},
        "findings": [],
        "not_covered": [reason] if reason else [],
        "seconds": round(time.perf_counter() - started, 1),
        "life": None,
    }
    row.update(judged)  # type: ignore[typeddict-item]
    return row


def not_judged(task: ReleaseTask, *, reason: str) -> ReleaseRow:
    """The row of a task that gave none (its process died or it raised): why."""
    return _row(task, era="?", started=time.perf_counter(), reason=f"not judged: {reason}")


def _release_files(task: ReleaseTask, members: tuple[str, ...]) -> Wheel:
    wheel = fetch(task.package, task.version, cache=Path(task.cache), offline=task.offline)
    return extract(task.package, task.version, wheel=wheel, members=members)


def judge_release(task: ReleaseTask) -> ReleaseRow:
    """The task: one release (or ``--impl`` file) judged in this process."""
    started = time.perf_counter()
    if task.package == "impl":
        return _judge_file(task, started=started)
    era = era_of(task.package, task.version)
    contract = era or nearest_era(task.package, task.version)
    try:  # the sampler's file first: the contract is read before anything is loaded
        files = _release_files(task, (contract.sampler_file,))
    except NotFetched as error:
        return _row(
            task,
            era=era.name if era else "?",
            started=started,
            reason=(f"not judged: not fetched: {error}"),
        )
    if era is None:
        why = unknown_contract(task.package, task.version, files=files.extracted)
        return _row(task, era="?", started=started, reason=f"not judged: unknown contract: {why}")
    differences = contract_differences(era, files=files.extracted)
    if differences:
        return _row(
            task,
            era=era.name,
            started=started,
            reason=(
                f"not judged: unknown contract: its files differ from {era.name}: "
                + "; ".join(differences)
            ),
        )
    blocked = _kernels_not_run_here(task, era)
    if blocked:
        reasons = [era.why_not_judged] if era.loading is Loading.NONE else []
        return _row(
            task,
            era=era.name,
            started=started,
            reason="not judged: " + "; ".join([*reasons, blocked]),
        )
    from harness.releases.loading import load_release

    loaded = load_release(
        era, files=lambda: _release_files(task, era.members), name=_impl_name(task)
    )
    if isinstance(loaded, str):
        return _row(task, era=era.name, started=started, reason=f"not judged: {loaded}")
    from harness.upstream.loaders.interpreter_libdevice import libdevice_bodies

    with libdevice_bodies():  # the release's libdevice calls get bodies while it is judged
        return _judged_row(
            task,
            laws_root=_release_files(task, era.members).extracted,
            era=era.name,
            implementation=loaded.implementation,
            other_paths=loaded.other_paths,
            verifier=loaded.verifier,
            not_covered=[*era.not_covered, *loaded.notes],
            started=started,
            layouts=era.layouts,
            release_era=era,
        )


def _kernels_not_run_here(task: ReleaseTask, era: ReleaseEra) -> str:
    """Why Triton's interpreter cannot run the era's sampling kernels as this release
    ships them ("" where it can, or where a CUDA device runs them): a libdevice call
    that ``interpreter_libdevice`` has no body for."""
    from harness.upstream.loaders.interpreter_libdevice import BODIES
    from harness.upstream.loaders.vllm_loader import interpreted

    if not era.kernel_files or not interpreted():
        return ""
    calls = libdevice_calls(era, files=_release_files(task, era.kernel_files).extracted)
    bodiless = [call for call in calls if call.rsplit(".", 1)[-1] not in BODIES]
    if not bodiless:
        return ""
    return (
        "its sampling kernel cannot run under Triton's interpreter (no CUDA here): "
        + "; ".join(bodiless)
        + " (libdevice, which the interpreter does not run and the harness has no body "
        "for; on CUDA it runs)"
    )


def _impl_name(task: ReleaseTask) -> str:
    return f"{task.package}-{task.version}".replace(".", "_")


def _judge_file(task: ReleaseTask, *, started: float) -> ReleaseRow:
    from harness.plugins.implementations import ImplementationError, parse_impl_spec

    try:
        implementation = parse_impl_spec(task.version)
    except ImplementationError as error:
        return _row(task, era="?", started=started, reason=f"not judged: {error}")
    era = implementation.era.value if implementation.era is not None else "-"
    return _judged_row(
        task,
        era=era,
        implementation=implementation,
        verifier=CHAIN,
        not_covered=["its server's verifier: the harness has none for this era (chain)"],
        started=started,
    )


def _judged_row(
    task: ReleaseTask,
    *,
    era: str,
    implementation: Implementation,
    verifier: str,
    not_covered: list[str],
    started: float,
    layouts: tuple[str, ...] = ("anchor", "no-anchor"),
    other_paths: tuple[Implementation, ...] = (),
    release_era: ReleaseEra | None = None,
    laws_root: Path | None = None,
) -> ReleaseRow:
    """The row of ``implementation`` and the release's ``other_paths`` (each judged in
    the same run; the row is lossless and drop-in where every path is, and what it
    says of a further path names it)."""
    from harness.defaults import REFERENCE, VerifierNoise
    from harness.judge import judge
    from harness.judgement import PartVerdict, ScanVerdict
    from harness.options import Roles, RunOptions
    from harness.pipeline.check_result import Tier
    from harness.pipeline.matrix import standard_matrix
    from harness.plugins.implementations import builtin_implementations

    life, life_found, life_gaps = _life_of(
        task, era=release_era, implementation=implementation, verifier=verifier
    )
    if task.life_only:  # --life-only: its life across the junction alone
        return _row(
            task,
            era=era,
            started=started,
            judged=True,
            lossless=life["lossless"],
            findings=life_found,
            not_covered=[
                "the matrix, the statistical oracle, the support scan and its verify target "
                "against its sampler (--life-only)",
                *life_gaps,
            ],
            life=life,
        )
    laws = server_laws(release_era, root=laws_root)
    matrix = standard_matrix(seed=task.seed)
    cases = [c for c in matrix if _layout(c.sample_from_anchor) in layouts]
    paths = (implementation, *other_paths)

    def of_path(path: Implementation, line: str) -> str:
        return line if path is implementation else f"{path.name}: {line}"

    not_covered = [
        *(
            of_path(path, line)
            for path in paths
            for line in outside_contract(path, cases, total=len(matrix))
        ),
        *not_covered,
    ]
    if len(cases) < len(matrix):
        left_out = sorted({_layout(c.sample_from_anchor) for c in matrix} - set(layouts))
        not_covered = [
            f"the {', '.join(left_out)} layout: outside its era's contract "
            f"({len(matrix) - len(cases)} of {len(matrix)} cases not run)",
            *not_covered,
        ]
    verifiers = oracle_verifiers(verifier)
    # The support scan in a process forked beside this one, while the matrix runs here
    # and the oracle beside it: its answer does not depend on where it runs.
    scan_process = ForkedExecutor()
    scan = scan_process.submit(
        support_scan, implementation, seed=task.seed, triples=task.scan_triples
    )
    try:
        judgement = judge(
            cases,
            [*builtin_implementations((REFERENCE,)), *paths],
            oracle_on=[path.name for path in paths],  # the row reads the release's verdicts
            options=RunOptions(
                seed=task.seed,
                roles=Roles(require=Tier.LOSSLESS),
                verifiers=verifiers,
                verifier_noise=VerifierNoise.SHARED,
                time_limit_s=None,
            ),
        )
        scan_hits, scan_gaps = scan.result()
    finally:
        scan_process.shutdown(cancel_futures=True)
    # its server's parts, judged beside the checks: its life, its verify target's law
    life_said = "; ".join(f["evidence"] for f in life_found) or "its life is not lossless"
    parts = [PartVerdict(implementation.name, LIFE, "" if life["lossless"] else life_said)]
    parts += [] if laws is None else [PartVerdict(implementation.name, LAW_CLASS, laws.evidence)]
    scanned = judgement.with_scans([ScanVerdict(implementation.name, scan_hits)])
    parted = scanned.with_parts(parts)
    held = [parted.held_verdict(path.name) for path in paths]
    for path, path_held in zip(paths, held, strict=True):
        statistical = path_held.verdict.statistical
        shown = path_held.verdict.lossless_failures() or not path_held.lossless_beside
        if statistical.gave_no_verdict and not shown:  # nothing shown: the row not journalled
            raise OracleGaveNoVerdict(of_path(path, statistical.describe()))
    results = (
        [] if judgement.oracle is None else judgement.oracle.run.results_of(implementation.name)
    )
    randomness = {result.verifier: randomness_of(result) for result in results}
    grid = {r.verifier: list(dict.fromkeys(s.group for s in r.statistics)) for r in results}
    findings: list[Finding] = []
    if laws is not None:
        grid.update({LAWS_GRID: laws.judged} if laws.judged else {})
        not_covered += laws.not_covered
        if laws.evidence:
            findings.append(
                {"class": LAW_CLASS, "evidence": laws.evidence, "repro": repro_command(task)}
            )
    seen: set[str] = set()
    for path, path_held in zip(paths, held, strict=True):
        verdict = path_held.verdict
        for failure in verdict.failures:  # defects only: a drop-in difference is drop_in's
            if failure.lossless and failure.check not in seen:
                seen.add(failure.check)
                evidence = of_path(path, failure.line())
                findings.append(
                    {"class": failure.check, "evidence": evidence, "repro": repro_command(task)}
                )
        if verdict.statistical.failed and ORACLE_CLASS not in seen:
            seen.add(ORACLE_CLASS)
            evidence = f"{' and '.join(verifiers)}: {verdict.statistical.describe()}"
            findings.append(
                {
                    "class": ORACLE_CLASS,
                    "evidence": of_path(path, evidence),
                    "repro": repro_command(task),
                }
            )
        if judgement.oracle is not None:
            results = judgement.oracle.run.results_of(path.name)
            not_covered += [of_path(path, line) for line in oracle_not_covered(results)]
    if scan_hits:
        findings.append({"class": SCAN_CLASS, "evidence": scan_hits, "repro": repro_command(task)})
    not_covered = [*not_covered, *scan_gaps]
    not_covered += [
        of_path(path, "the support scan: not run on this path (it scans the dense one)")
        for path in other_paths
    ]
    if not task.scan_triples:
        not_covered = [*not_covered, "the support scan (--scan-triples 0)"]
    findings += [f for f in life_found if f["class"] not in seen]
    not_covered += life_gaps
    if other_paths:
        not_covered.append(
            f"its life across the junction: on {implementation.name} only, not on "
            + ", ".join(path.name for path in other_paths)
        )
    return _row(
        task,
        era=era,
        started=started,
        judged=True,
        lossless=all(h.lossless for h in held),
        drop_in=all(h.drop_in for h in held),
        verifier=list(verifiers),
        randomness=randomness,
        grid=grid,
        findings=findings,
        not_covered=not_covered,
        life=life,
    )


class OracleGaveNoVerdict(RuntimeError):
    """A path's statistical oracle ended without a verdict (its process died, or its
    decode raised) and nothing else showed a defect: the task gives no row, so the sweep
    says it gave no answer, counts no defect and judges it again on ``--resume``. Where a
    check or a part beside them failed (a sampler that raises fails ``ran``), the row is
    judged not lossless, as ``judge()`` says, and the oracle's part is not claimed."""


def _life_of(
    task: ReleaseTask, *, era: ReleaseEra | None, implementation: Implementation, verifier: str
) -> tuple[LifeRecord, list[Finding], list[str]]:
    """Its life across the junction (``harness.releases.life``), its findings, each
    replayed by the life alone (``--life-only``), and what of the life it did not cover:
    the law of every state, where the life ended before one was judged (it raised)."""
    from harness.releases.life import release_life

    life, found = release_life(
        implementation.sampler_class,
        era=era,
        verifier=verifier,
        seed=task.seed,
        rows=task.life_rows,
    )
    repro = repro_command(replace(task, life_only=True))
    findings: list[Finding] = [
        {"class": f.check, "evidence": f.evidence, "repro": repro} for f in found
    ]
    said = "; ".join(f.evidence for f in found)
    gaps = [] if life["states"] else [f"its life's law per request state: no state judged ({said})"]
    return life, findings, gaps


def outside_contract(
    implementation: Implementation, cases: Sequence[Case], *, total: int
) -> list[str]:
    """The cases its convention cannot express, by reason, in words (the checks skip
    them, saying so; the row lists them as not covered)."""
    from harness.upstream.dispatch import convention_of

    convention = convention_of(implementation.sampler_class)
    reasons: dict[str, int] = {}
    for case in cases:
        why = convention.outside_contract(case, sampler_class=implementation.sampler_class)
        if why is not None:
            reasons[why] = reasons.get(why, 0) + 1
    return [f"{n} of {total} cases not run: {why}" for why, n in reasons.items()]


def oracle_verifiers(own: str) -> tuple[str, ...]:
    """The verifiers a release's oracle runs under: its server's own (``own``), then
    chain, the control; chain alone where it stands in for a server the harness has no
    verifier of."""
    return (own,) if own == CHAIN else (own, CHAIN)


def randomness_of(result: StatsResult) -> str:
    """The randomness one verifier's decodes ran on, in words: the release's server's
    plumbing (the drafter's noise and the verifier's draws from its one source, as the
    server derives them) or independent streams (the convention models no plumbing); and
    the law its rows were judged against where that is its server's own."""
    law = f"; {result.law_judged()}" if result.law_judged() else ""
    if result.shared_noise is None:
        return "nothing decoded"
    if not result.shared_noise:
        return "independent streams (its server's plumbing is not modelled)" + law
    if result.server is not None:
        return f"shared: {result.server}'s plumbing{law}"
    return "shared: torch's one generator, drafter and verifier in turn" + law  # ours, PR era


def oracle_not_covered(results: Sequence[StatsResult]) -> list[str]:
    """What the release's oracle ran short of the config, per verifier, in words: heads
    outside its contract and a cut its convention or verifier declares (rows, rounds,
    targets), with the detection bound it states at the rows that ran (a pass)."""
    lines = []
    for result in results:
        statistical = result.statistical()
        if not statistical.scope:
            continue
        bound = f" ({statistical.not_ruled_out})" if statistical.not_ruled_out else ""
        lines.append(f"the statistical oracle under {result.verifier}: {statistical.scope}{bound}")
    return lines


def _layout(sample_from_anchor: bool) -> str:
    return "anchor" if sample_from_anchor else "no-anchor"
