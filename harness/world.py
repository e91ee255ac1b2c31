"""A restored world around each implementation: the process it shares with every
implementation that runs after it.

- ``GlobalState``: the process-wide settings (torch's defaults, flags and thread
  count, the environment, the working directory, the umask, the handlers of SIGALRM,
  SIGTERM and SIGINT, the soft memory limits), compared and restored after a run;
- ``implementation_world``: the context manager entered wherever implementation
  code runs. It restores ``GlobalState``, sends the code's stdout to stderr (stdout
  carries the report alone), kills the child processes the code left running, and
  blames a change made by a background thread on the implementation that left the
  thread running, not on the one whose call it happened to interrupt;
- ``import_world``: the same around the import of a plug-in's module.

These guards undo a sampler's mistakes; they do not hold off code that means harm (it
shares the process, and can undo the guards themselves): that is ``--isolate``'s job.
It imports nothing of the harness, so the plug-in loader and the runner share it; the
digests of the shared input tensors are ``harness.pipeline.guard``'s. See
``docs/trust.md`` for what these guards do not cover.
"""

from __future__ import annotations

import contextlib
import enum
import glob
import os
import resource
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

GUARDED_SIGNALS = (signal.SIGALRM, signal.SIGTERM, signal.SIGINT)
GUARDED_LIMITS = {
    "address-space limit": resource.RLIMIT_AS,
    "data-segment limit": resource.RLIMIT_DATA,
}


def _handler_name(handler: object) -> str:
    if handler is signal.SIG_IGN:
        return "ignored"
    if handler is signal.SIG_DFL:
        return "default"
    if handler is None:
        return "set outside Python"
    return str(getattr(handler, "__qualname__", type(handler).__name__))


def _limit_text(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else f"{value} bytes"


def current_umask() -> int:
    """The process's umask, read without changing it where ``/proc`` allows."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc: read it by setting it, at once put back
    os.umask(mask)
    return mask


@dataclass(frozen=True)
class GlobalState:
    """The process-wide settings an implementation could change for everyone after it."""

    default_dtype: torch.dtype
    default_device: torch.device
    environment: tuple[tuple[str, str], ...]
    threads: int
    deterministic: bool
    deterministic_warn_only: bool
    grad_enabled: bool
    matmul_precision: str
    working_directory: str
    umask: int
    signal_handlers: tuple[tuple[signal.Signals, Any], ...]  # handler objects, compared by ==
    soft_limits: tuple[tuple[str, int], ...]  # GUARDED_LIMITS name -> soft limit
    alarm_armed: bool  # ITIMER_REAL: a timer left armed would send SIGALRM later

    @classmethod
    def capture(cls) -> GlobalState:
        return cls(
            default_dtype=torch.get_default_dtype(),
            default_device=torch.get_default_device(),
            environment=tuple(sorted(os.environ.items())),
            threads=torch.get_num_threads(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            grad_enabled=torch.is_grad_enabled(),
            matmul_precision=torch.get_float32_matmul_precision(),
            working_directory=os.getcwd(),
            umask=current_umask(),
            signal_handlers=tuple((s, signal.getsignal(s)) for s in GUARDED_SIGNALS),
            soft_limits=tuple(
                (name, resource.getrlimit(which)[0]) for name, which in GUARDED_LIMITS.items()
            ),
            alarm_armed=signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0),
        )

    def changed_environment(self, now: GlobalState) -> list[str]:
        """Environment variables set, changed or removed from ``self`` to ``now``, sorted."""
        old, new = dict(self.environment), dict(now.environment)
        return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))

    def differences(self, now: GlobalState, *, environment: bool = True) -> list[str]:
        """What changed from ``self`` to ``now``, one readable line per setting
        (without the environment's line when ``environment`` is false)."""
        changes = []
        for label, before, after in (
            ("default dtype", self.default_dtype, now.default_dtype),
            ("default device", self.default_device, now.default_device),
            ("thread count", self.threads, now.threads),
            ("deterministic algorithms", self.deterministic, now.deterministic),
            ("deterministic warn_only", self.deterministic_warn_only, now.deterministic_warn_only),
            ("grad mode", self.grad_enabled, now.grad_enabled),
            ("float32 matmul precision", self.matmul_precision, now.matmul_precision),
            ("working directory", self.working_directory, now.working_directory),
            ("umask", oct(self.umask), oct(now.umask)),
            ("interval timer armed", self.alarm_armed, now.alarm_armed),
        ):
            if before != after:
                changes.append(f"{label} {before} -> {after}")
        for (signum, before), (_, after) in zip(
            self.signal_handlers, now.signal_handlers, strict=True
        ):
            if before != after:
                changes.append(
                    f"{signum.name} handler {_handler_name(before)} -> {_handler_name(after)}"
                )
        for (name, before), (_, after) in zip(self.soft_limits, now.soft_limits, strict=True):
            if before != after:
                changes.append(f"{name} {_limit_text(before)} -> {_limit_text(after)}")
        changed = self.changed_environment(now) if environment else []
        if changed:
            changes.append("environment " + ", ".join(changed))
        return changes

    def restore(self) -> list[str]:
        """Put back every setting that differs from the capture (and only those); what
        could not be put back, one line each."""
        now = GlobalState.capture()
        if now.default_dtype != self.default_dtype:
            torch.set_default_dtype(self.default_dtype)
        if now.default_device != self.default_device:
            # None for the CPU: a CPU default needs no device context (a function mode)
            cpu = self.default_device == torch.device("cpu")
            torch.set_default_device(None if cpu else self.default_device)
        if now.environment != self.environment:
            saved = dict(self.environment)
            for key in [k for k in os.environ if k not in saved]:
                del os.environ[key]
            for key, value in saved.items():
                if os.environ.get(key) != value:
                    os.environ[key] = value
        if now.threads != self.threads:
            torch.set_num_threads(self.threads)
        if (now.deterministic, now.deterministic_warn_only) != (
            self.deterministic,
            self.deterministic_warn_only,
        ):
            torch.use_deterministic_algorithms(
                self.deterministic, warn_only=self.deterministic_warn_only
            )
        if now.grad_enabled != self.grad_enabled:
            torch.set_grad_enabled(self.grad_enabled)
        if now.matmul_precision != self.matmul_precision:
            torch.set_float32_matmul_precision(self.matmul_precision)
        if now.working_directory != self.working_directory:
            os.chdir(self.working_directory)
        if now.umask != self.umask:
            os.umask(self.umask)
        if now.alarm_armed and not self.alarm_armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
        return [*self._restore_signal_handlers(now), *self._restore_limits(now)]

    def _restore_signal_handlers(self, now: GlobalState) -> list[str]:
        if now.signal_handlers == self.signal_handlers:
            return []
        if threading.current_thread() is not threading.main_thread():
            return ["signal handlers could not be restored off the main thread"]
        for signum, handler in self.signal_handlers:
            if signal.getsignal(signum) != handler and handler is not None:
                signal.signal(signum, handler)
        return []

    def _restore_limits(self, now: GlobalState) -> list[str]:
        unrestored = []
        for (name, soft), (_, current) in zip(self.soft_limits, now.soft_limits, strict=True):
            if soft == current:
                continue
            which = GUARDED_LIMITS[name]
            hard = resource.getrlimit(which)[1]
            try:
                resource.setrlimit(which, (soft, hard))
            except (ValueError, OSError):  # the hard limit was lowered below it: for good
                unrestored.append(f"{name} could not be restored (hard limit {_limit_text(hard)})")
        return unrestored


# -- background threads ---------------------------------------------------------------------
# A thread that implementation code leaves running can change the process while another
# implementation runs. Such threads are remembered with their owner, and an audit hook
# sees which thread sets the environment or changes the directory, so the change is
# blamed on the owner, not on the implementation whose call it interrupted.


class Touched(enum.Enum):
    """What an audited call of a background thread changed."""

    ENVIRONMENT = "environment"
    DIRECTORY = "working directory"


_AUDITED = {
    "os.putenv": Touched.ENVIRONMENT,
    "os.unsetenv": Touched.ENVIRONMENT,
    "os.chdir": Touched.DIRECTORY,
}
_thread_owners: dict[int, str] = {}  # ident of a thread left running -> its owner
_thread_changes: list[tuple[str, Touched, str]] = []  # (owner, what, environment key or "")
_late_blame: dict[str, list[str]] = {}  # owner -> changes its threads made in others' calls
_hook_installed = False
_depth = 0  # implementation_world blocks open now (one may nest in another)
_settled: GlobalState | None = None  # the state the last outermost block left


def _audit(event: str, args: tuple[Any, ...]) -> None:
    kind = _AUDITED.get(event)
    if kind is None:
        return
    owner = _thread_owners.get(threading.get_ident())
    if owner is None:
        return
    key = args[0] if kind is Touched.ENVIRONMENT else ""
    if isinstance(key, bytes):
        key = os.fsdecode(key)
    _thread_changes.append((owner, kind, str(key)))


def _install_audit_hook() -> None:
    global _hook_installed
    if not _hook_installed:  # an audit hook cannot be removed: installed once, cheap
        sys.addaudithook(_audit)
        _hook_installed = True


def take_thread_blame(owner: str) -> list[str]:
    """Changes the background threads of ``owner`` made during other implementations'
    code (each already undone), and forgets them."""
    return _late_blame.pop(owner, [])


def _split_by_thread(
    *,
    owner: str,
    audited: list[tuple[str, Touched, str]],
    changed_environment: list[str],
    directory_changed: bool,
) -> tuple[list[str], bool]:
    """Move the changes other owners' threads made (per ``audited``: the block's audit
    log, and the changes undone as it began, since a thread is audited before its change
    lands, so that change may land inside the block) to their late blame; what stays is
    this owner's: environment keys, and whether the directory change is its own."""
    foreign: dict[str, set[str]] = {}
    own_keys = set(changed_environment)
    own_directory = directory_changed
    for thread_owner, kind, key in audited:
        if thread_owner == owner:
            continue
        if kind is Touched.ENVIRONMENT and key in own_keys:
            own_keys.discard(key)
            foreign.setdefault(thread_owner, set()).add(f"environment {key}")
        elif kind is Touched.DIRECTORY and own_directory:
            own_directory = False
            foreign.setdefault(thread_owner, set()).add("working directory")
    _blame_threads(foreign, when=f"during {owner}")
    return sorted(own_keys), own_directory


def _blame_threads(foreign: dict[str, set[str]], *, when: str) -> None:
    for thread_owner, what in foreign.items():
        _late_blame.setdefault(thread_owner, []).append(
            f"{', '.join(sorted(what))} changed by a background thread it left running ({when})"
        )


def _undo_changes_between_calls() -> list[tuple[str, Touched, str]]:
    """Changes that still-running threads of other owners made while no implementation
    code ran: put back as the last block left them, and blamed on their owners (returned,
    since a change audited here may land only once the next block has begun). (A
    finished thread's owner may be a past run's: its changes are left alone.)"""
    alive = set(_thread_owners.values())
    foreign: dict[str, set[str]] = {}
    handled = list(_thread_changes)
    for thread_owner, kind, key in handled:
        if _settled is None or thread_owner not in alive:
            continue
        if kind is Touched.ENVIRONMENT:
            settled = dict(_settled.environment)
            if key in settled:
                os.environ[key] = settled[key]
            else:
                os.environ.pop(key, None)
            foreign.setdefault(thread_owner, set()).add(f"environment {key}")
        else:
            os.chdir(_settled.working_directory)
            foreign.setdefault(thread_owner, set()).add("working directory")
    del _thread_changes[: len(handled)]  # not clear(): a thread may have appended since
    _blame_threads(foreign, when="between calls")
    return handled


# -- child processes --------------------------------------------------------------------------


def child_processes() -> set[int]:
    """Process ids of this process's children (Linux ``/proc``; empty elsewhere)."""
    pid = os.getpid()
    listed = glob.glob(f"/proc/{pid}/task/*/children")
    children: set[int] = set()
    if listed:
        for path in listed:
            with contextlib.suppress(OSError), open(path) as handle:
                children.update(int(p) for p in handle.read().split())
        return children
    for path in glob.glob("/proc/[0-9]*/stat"):  # a kernel without the children files
        with contextlib.suppress(OSError, ValueError, IndexError), open(path) as handle:
            if int(handle.read().rpartition(")")[2].split()[1]) == pid:
                children.add(int(path.split("/")[2]))
    return children


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def kill_children(pids: set[int]) -> list[str]:
    """Kill and reap the child processes ``pids``; one line naming each."""
    lines = []
    for pid in sorted(pids):
        name = _command_name(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        lines.append(f"left child process {pid} ({name}) running; it was killed")
    return lines


# -- stdout ---------------------------------------------------------------------------------


def _flush(stream: object) -> None:
    with contextlib.suppress(Exception):
        stream.flush()  # type: ignore[attr-defined]


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Implementation code's stdout (``print``, ``sys.__stdout__``, fd 1) goes to stderr,
    so stdout carries the report alone; closing fd 1 closes only a copy of stderr."""
    for stream in (sys.stdout, sys.__stdout__):
        _flush(stream)
    try:
        saved_fd: int | None = os.dup(1)
    except OSError:  # stdout was closed before: it stays closed
        saved_fd = None
    saved_stream = sys.stdout
    redirected = open(  # noqa: SIM115  closed below, after the code's last write
        os.dup(2), "w", buffering=1, encoding="utf-8", errors="backslashreplace"
    )
    os.dup2(2, 1)
    sys.stdout = redirected
    try:
        yield
    finally:
        for stream in (sys.stdout, redirected, sys.__stdout__):
            _flush(stream)
        sys.stdout = saved_stream
        with contextlib.suppress(OSError):
            redirected.close()
        if saved_fd is None:
            with contextlib.suppress(OSError):
                os.close(1)
        else:
            os.dup2(saved_fd, 1)
            os.close(saved_fd)


# -- the guard ------------------------------------------------------------------------------


@dataclass
class WorldChanges:
    """What a block of implementation code left changed in the process (each undone),
    one readable line each; filled when the block ends."""

    lines: list[str] = field(default_factory=list)


@contextlib.contextmanager
def implementation_world(*, owner: str) -> Iterator[WorldChanges]:
    """Around implementation code of ``owner``: its stdout goes to stderr, and on exit
    the global state is restored, child processes it left are killed, and threads it
    left running are remembered. Changes its own code made land in the yielded
    ``WorldChanges``; changes another owner's thread made go to that owner
    (``take_thread_blame``). Never enter it around code that starts harness workers."""
    global _depth, _settled
    _install_audit_hook()
    for ident in [i for i in _thread_owners if not _alive(i)]:
        del _thread_owners[ident]  # a dead thread's ident may be reused
    undone = _undo_changes_between_calls() if _depth == 0 else []
    changes = WorldChanges()
    threads_before = {t.ident for t in threading.enumerate()}
    children_before = child_processes()
    # outermost: what is left in the audit log came after the undo, so it is this block's
    audit_mark = 0 if _depth == 0 else len(_thread_changes)
    before = GlobalState.capture()
    _depth += 1
    try:
        with stdout_to_stderr():
            yield changes
    finally:
        now = GlobalState.capture()
        unrestored = before.restore()
        _remember_threads(threads_before, owner=owner)
        audited = _thread_changes[audit_mark:]
        own_keys, own_directory = _split_by_thread(
            owner=owner,
            audited=[*undone, *audited],
            changed_environment=before.changed_environment(now),
            directory_changed=before.working_directory != now.working_directory,
        )
        lines = [
            line
            for line in before.differences(now, environment=False)
            if own_directory or not line.startswith("working directory ")
        ]
        if own_keys:
            lines.append("environment " + ", ".join(own_keys))
        lines += unrestored
        lines += kill_children(child_processes() - children_before)
        changes.lines = lines
        if _depth == 1:  # a block inside another leaves its entries to the outer one's split
            del _thread_changes[audit_mark : audit_mark + len(audited)]
        _depth -= 1
        if _depth == 0:
            _settled = before


def _remember_threads(before: set[int | None], *, owner: str) -> None:
    """Threads running now that were not in ``before`` are ``owner``'s."""
    for thread in threading.enumerate():
        if thread.ident not in before and thread.ident is not None:
            _thread_owners[thread.ident] = owner


def _alive(ident: int) -> bool:
    return any(t.ident == ident for t in threading.enumerate())


@contextlib.contextmanager
def import_world(*, owner: str) -> Iterator[None]:
    """Around the import of ``owner``'s plug-in module: its stdout goes to stderr, the
    signal handlers, umask and working directory are put back (the environment stays
    as the module set it: a module may configure itself there), and threads it left
    running are remembered as ``owner``'s."""
    _install_audit_hook()
    handlers = {s: signal.getsignal(s) for s in GUARDED_SIGNALS}
    umask, directory = current_umask(), os.getcwd()
    threads_before = {t.ident for t in threading.enumerate()}
    try:
        with stdout_to_stderr():
            yield
    finally:
        _remember_threads(threads_before, owner=owner)
        if threading.current_thread() is threading.main_thread():
            for signum, handler in handlers.items():
                if handler is not None and signal.getsignal(signum) != handler:
                    signal.signal(signum, handler)
        os.umask(umask)
        if os.getcwd() != directory:
            os.chdir(directory)
