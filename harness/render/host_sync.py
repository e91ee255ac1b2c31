"""The "Host synchronisation in __call__" section of ``python -m harness graphs``: every
implementation but legacy must run a warm call sync-free (``harness.gpu.host_sync``)."""

from __future__ import annotations

from harness.defaults import LEGACY
from harness.judgement import SyncVerdict
from harness.render.sections import Section, Table


def sync_section(syncs: SyncVerdict) -> Section:
    """Every implementation but legacy must be sync-free in ``__call__`` on every case
    (``ok``: the judgement's)."""
    checks, bad = syncs.checks, syncs.failed
    rows, stacks = [], []
    for check in checks:
        failed = check in bad
        rows.append(
            [
                check.case.label(),
                check.implementation,
                f"{'FAIL ' if failed else ''}{check.status.value}"
                + (f" ({check.error.summary()})" if check.error is not None else ""),
            ]
        )
        if check.stack:
            where = "\n".join(f"  at {frame}" for frame in check.stack)
            stacks.append(f"{check.implementation} on {check.case.label()}:\n{where}")
    names = sorted({c.implementation for c in checks if c.implementation != LEGACY})
    if bad:
        verdict = (
            f"host synchronisation in __call__: {len(bad)} call(s) of "
            f"{', '.join(sorted({c.implementation for c in bad}))} sync or raise"
        )
    else:
        verdict = (
            f"no host synchronisation in __call__ of {', '.join(names)} on "
            f"{len({c.case.label() for c in checks})} case(s) (set_sync_debug_mode('error'))"
        )
    return Section(
        title="Host synchronisation in __call__",
        ok=syncs.ok,
        verdict=verdict,
        blocks=(Table.of(["case", "implementation", "status"], rows), *stacks),
        data={"checks": [c.to_json() for c in checks]},
    )
