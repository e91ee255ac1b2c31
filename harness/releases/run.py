"""The releases sweep: every task through a pool of fresh processes (local, or a Ray
cluster), each finished row at once in the sweep's journal, the run's journal
(``harness.io.journal``): one line per row, keyed by the package and the version.

Its fingerprint covers everything that changes a row: the harness's and the built-ins'
code, the harness's version, the era table (each era's life depth with it), the seed,
``--scan-triples``, the life across the junction every row lives (its depth, and
``--life-only``) and the files of the ``--impl`` plug-ins. A resumed sweep reuses a row
only under the same fingerprint; a
row written under another (``--scan-triples 0``, another seed, other code) is judged
again, and the sweep says so in one line, as it says a torn last line was dropped. A row
that does not have the shape of a row is judged again too; a damaged line before the
last is refused (``JournalError``: exit 2, one line). So a resumed sweep's rows are the
rows a fresh one gives (``docs/releases.md``, "What a release's row holds").
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.metadata
import multiprocessing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from harness.executor import Executor
from harness.io.fingerprint import package_digest, run_fingerprint
from harness.io.journal import Journal
from harness.progress import Progress, no_progress
from harness.releases.sweep import ReleaseRow, ReleaseTask, judge_release, not_judged

JOURNAL = "releases-journal.jsonl"
ROW_SCHEMA = "dspark-release-row/1"
DISTRIBUTION = "dspark-sampler-harness"


def row_key(package: str, version: str) -> str:
    return f"{package} {version}"


def _harness_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _plugin_digest(spec: str) -> str:
    """The digest of an ``--impl`` plug-in's file, read, never imported."""
    from harness.plugins.implementations import split_impl_spec

    _, where, _, is_file = split_impl_spec(spec)
    if not is_file:
        try:  # a module spec: its package's files (a parent that is missing: none)
            return package_digest(where)
        except ImportError:
            return f"missing:{where}"
    path = Path(where)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:24] if path.is_file() else "missing"


def sweep_fingerprint(tasks: Sequence[ReleaseTask]) -> str:
    """Everything that changes a row of these tasks, as one digest."""
    from harness.defaults import JUNCTION_ROWS
    from harness.upstream.releases.eras import ERAS

    return run_fingerprint(
        implementations={},
        options={
            "harness_version": _harness_version(),
            "eras": [repr(era) for era in ERAS],
            "seed": sorted({task.seed for task in tasks}),
            "scan_triples": sorted({task.scan_triples for task in tasks}),
            # the life across the junction each row lives, and rows of it alone
            "life": {
                "rows": JUNCTION_ROWS,
                "asked": sorted({t.life_rows or 0 for t in tasks}),
                "only": sorted({t.life_only for t in tasks}),
            },
            "plugins": {t.version: _plugin_digest(t.version) for t in tasks if t.package == "impl"},
        },
    )


# What each field of a row holds (``ReleaseRow``'s fields, as JSON reads them back).
ROW_FIELDS: dict[str, type | tuple[type, ...]] = {
    "package": str,
    "version": str,
    "era": str,
    "judged": bool,
    "lossless": (bool, type(None)),
    "drop_in": (bool, type(None)),
    "verifier": list,
    "randomness": dict,
    "grid": dict,
    "findings": list,
    "not_covered": list,
    "seconds": (int, float),
    "life": (dict, type(None)),
}


def _is_row(row: Any, key: str) -> bool:
    """Whether ``row`` has the shape of a row (every field, each of its type) for ``key``."""
    if not isinstance(row, dict) or set(row) != set(ROW_FIELDS):
        return False
    if not all(isinstance(row[name], kind) for name, kind in ROW_FIELDS.items()):
        return False
    return row_key(row["package"], row["version"]) == key


class ReleaseJournal:
    """The sweep's journal in ``out_dir``, under the fingerprint of ``tasks``."""

    def __init__(self, out_dir: Path, tasks: Sequence[ReleaseTask]) -> None:
        self.journal = Journal(
            out_dir / JOURNAL,
            schema=ROW_SCHEMA,
            fingerprint=sweep_fingerprint(tasks),
            what="release row",
        )

    def finished(self, *, resume: bool, progress: Progress) -> dict[str, ReleaseRow]:
        """The rows this sweep may reuse, by key (none without ``resume``); what was not
        reused is said in one line each."""
        stored, notes = self.journal.finished(resume=resume)
        rows = {key: record.get("row") for key, record in stored.items()}
        good = {key: cast(ReleaseRow, row) for key, row in rows.items() if _is_row(row, key)}
        if len(good) < len(rows):
            notes.append(
                f"{self.journal.path}: {len(rows) - len(good)} row(s) not of a release "
                "row's shape will be judged again"
            )
        for note in notes:
            progress(f"releases: {note}")
        return good

    def append(self, row: ReleaseRow) -> None:
        key = row_key(row["package"], row["version"])
        self.journal.append({"schema": ROW_SCHEMA, "key": key, "row": row})


# -- the sweep -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Sweep:
    """Every task's row, in the order asked; ``ok``: every task answered
    (``unanswered``: how many did not)."""

    rows: tuple[ReleaseRow, ...]
    ok: bool
    unanswered: int = 0


def release_executor(*, jobs: int, executor: str, ray_address: str | None) -> Executor:
    """``jobs`` local processes, a fresh one for every release (``max_tasks_per_child``),
    or a Ray cluster (``harness.releases.ray_executor``)."""
    if executor == "ray":
        from harness.releases.ray_executor import RayExecutor

        return RayExecutor(address=ray_address, num_cpus=jobs)
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        max_tasks_per_child=1,
    )


def _key(task: ReleaseTask) -> str:
    return row_key(task.package, task.version)


def run_sweep(
    tasks: Sequence[ReleaseTask],
    *,
    jobs: int,
    executor: str = "local",
    ray_address: str | None = None,
    out_dir: Path,
    resume: bool = False,
    progress: Progress = no_progress,
    judge: Callable[[ReleaseTask], ReleaseRow] = judge_release,
) -> Sweep:
    """Judge every task (``judge``: a module-level function, run in the task's process)
    through the executor, each release in a process of its own; each finished row goes
    to the journal in ``out_dir`` at once (``resume``: the rows already there under this
    sweep's fingerprint are reused, not judged again, as this module's docstring says).
    A task that gave no row (its process died, or it raised) has a row that says so,
    and ``ok`` is false; that row is not journalled, so a resumed sweep tries it again."""
    journal = ReleaseJournal(out_dir, tasks)
    done = journal.finished(resume=resume, progress=progress)
    rows = {key: row for key, row in done.items() if key in {_key(t) for t in tasks}}
    pending = [task for task in tasks if _key(task) not in rows]
    unanswered = 0
    if pending:
        others = set(multiprocessing.active_children())  # not the pool's: left alone on a stop
        with release_executor(jobs=jobs, executor=executor, ray_address=ray_address) as pool:
            futures = {pool.submit(judge, task): task for task in pending}
            try:
                for future in concurrent.futures.as_completed(futures):
                    task = futures[future]
                    try:
                        row = future.result()
                    except Exception as error:  # its process died or raised: the row says so
                        unanswered += 1
                        row = not_judged(
                            task, reason=f"the task failed: {type(error).__name__}: {error}"
                        )
                    else:
                        journal.append(row)
                    rows[_key(task)] = row
                    progress(f"releases: {task.package} {task.version}: {_said(row)}")
            except BaseException:  # a stop request: the releases still running end with it
                _stop_now(pool, others=others)
                raise
    return Sweep(
        rows=tuple(rows[_key(t)] for t in tasks), ok=unanswered == 0, unanswered=unanswered
    )


def _stop_now(pool: Executor, *, others: set[multiprocessing.process.BaseProcess]) -> None:
    """Cancel the tasks not started and end those running: a stopped sweep does not wait
    for a judgement (a vLLM release's takes minutes). The journal keeps every finished
    row for ``--resume``. The local pool's processes are the children started since
    ``others`` were."""
    if not isinstance(pool, concurrent.futures.ProcessPoolExecutor):
        pool.shutdown(wait=False, cancel_futures=True)
        return
    for process in set(multiprocessing.active_children()) - others:
        process.kill()
    # Its manager thread joined here, its workers dead: left to close its pipe as the
    # interpreter exits, it races concurrent.futures' exit hook (Python 3.11 prints an
    # EBADF traceback after the stop's one line).
    pool.shutdown(wait=True, cancel_futures=True)


def _said(row: ReleaseRow) -> str:
    if not row["judged"]:
        return row["not_covered"][0] if row["not_covered"] else "not judged"
    word = "lossless" if row["lossless"] else "NOT lossless"
    return f"{word} ({row['seconds']:.0f} s)"
