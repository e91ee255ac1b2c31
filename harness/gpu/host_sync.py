"""The host-synchronisation check: one warm ``__call__`` under
``torch.cuda.set_sync_debug_mode("error")`` per implementation and case (its report
section: ``harness.render.host_sync``). A sampler that runs inside a CUDA graph must
not wait on the host."""

from __future__ import annotations

import enum
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.case import Case, build_inputs
from harness.defaults import LEGACY
from harness.devices import synchronize
from harness.gpu.graphs import require_cuda
from harness.pipeline.runner import RaisedError, build_sampler, guarded_call, same_rng_start
from harness.plugins.conventions import BuiltSampler
from harness.plugins.implementations import Implementation

SYNC_ERROR_TEXT = "synchronizing CUDA operation"  # what set_sync_debug_mode("error") raises


class SyncStatus(enum.Enum):
    """How the checked call went."""

    SYNC_FREE = "sync-free"
    SYNCS = "syncs"  # it hit a synchronising operation
    RAISED = "raised"  # any other exception, before or during the checked call


@dataclass(frozen=True)
class SyncCheck:
    """Whether one warm ``__call__`` ran without a host synchronisation."""

    implementation: str
    case: Case
    status: SyncStatus
    error: RaisedError | None = None
    stack: tuple[str, ...] = field(default=())  # frames outside torch and triton, innermost last

    def to_json(self) -> dict[str, Any]:
        return {
            "implementation": self.implementation,
            "case": self.case.label(),
            "status": self.status.value,
            "error": None if self.error is None else self.error.summary(),
            "stack": list(self.stack),
        }


def _call_stack(error: BaseException) -> tuple[str, ...]:
    """``file:line in function`` of each traceback frame outside torch and triton."""
    frames = traceback.extract_tb(error.__traceback__)
    library = ("/torch/", "/triton/")
    return tuple(
        f"{frame.filename}:{frame.lineno} in {frame.name}"
        for frame in frames
        if not any(part in frame.filename for part in library)
    )


def no_host_sync(case: Case, implementation: Implementation) -> SyncCheck:
    """Run one warm call of ``__call__`` with ``torch.cuda.set_sync_debug_mode("error")``.

    Building the sampler, staging its parameters (which reads them on the host) and a
    first call (which compiles the Triton kernels, as the capture's warm-up does) run
    before the mode is set; the previous mode is restored after. ``status`` is
    ``syncs`` when the call hit a synchronising operation, ``raised`` for any other
    exception (before or during the checked call).
    """
    device = require_cuda(case.device, what="the host-sync check")
    inputs = build_inputs(case)
    with same_rng_start(device, case.seed), torch.inference_mode():

        def build_and_warm_up() -> BuiltSampler:
            sampler = build_sampler(implementation.sampler_class, case=case, inputs=inputs)
            sampler(inputs.hidden_states, inputs.input_ids)
            synchronize(device)
            return sampler

        built = guarded_call(build_and_warm_up)
        if built.error is not None:  # the implementation under test failed: record, go on
            return SyncCheck(implementation.name, case, SyncStatus.RAISED, built.error)
        sampler = built.returned()
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:  # a sync raises RuntimeError; anything else is recorded too
            checked = guarded_call(lambda: sampler(inputs.hidden_states, inputs.input_ids))
        finally:
            torch.cuda.set_sync_debug_mode(previous)
        synchronize(device)
    if checked.error is None or checked.exception is None:
        return SyncCheck(implementation.name, case, SyncStatus.SYNC_FREE)
    failure = checked.exception
    synced = SYNC_ERROR_TEXT in checked.error.message
    status = SyncStatus.SYNCS if synced else SyncStatus.RAISED
    return SyncCheck(implementation.name, case, status, checked.error, _call_stack(failure))


def must_be_sync_free(check: SyncCheck) -> bool:
    """Every implementation but legacy (whose double walk syncs) must run sync-free."""
    return check.implementation != LEGACY


def sync_failed(check: SyncCheck) -> bool:
    return must_be_sync_free(check) and check.status is not SyncStatus.SYNC_FREE


def syncs_hold(checks: Sequence[SyncCheck]) -> bool:
    """Every call that must be sync-free was (and at least one was checked)."""
    return bool(checks) and not any(sync_failed(check) for check in checks)
