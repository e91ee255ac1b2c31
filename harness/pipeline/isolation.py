"""Implementations in worker processes (``--isolate``): a crash is a result, and no
plug-in code runs in the judging process.

Each trust domain gets its own persistent worker, started with ``spawn`` (so it
shares no threads, CUDA context or locks with the judge): one for the built-ins and
one per plug-in, so a plug-in never shares a process with the code it is compared
against. A plug-in is loaded only in its worker, by its ``--impl`` spec; the judge
digests its file for the fingerprint without importing it (``worker_only``) and
learns its kind and calling convention from the worker (``describe``).

A worker serves one request at a time: a case (``run_guarded`` on inputs it builds
from the case's seed), the statistical oracle's decode and fit, or the cost of one
call. Answers cross as plain data only: numbers, strings, lists, dicts, the harness's
own result dataclasses by name, and tensors as dtype, shape and bytes, rebuilt as
plain ``torch.Tensor`` here; the judge unpickles nothing else, so nothing the worker
sends can run code in the judge. A tensor subclass in a result is the
implementation's failure. A worker that dies (segfault, abort, ``os._exit``, CUDA
error, OOM kill) or does not answer within the time limit is that implementation's
recorded failure with its signal or exit status; the next request starts a fresh
worker. The worker is told neither ``--out-dir`` nor where the journal key lives.
"""

from __future__ import annotations

import atexit
import dataclasses
import enum
import importlib.machinery
import io
import multiprocessing
import os
import pickle
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from harness.case import Case, CaseInputs, build_inputs
from harness.defaults import DEFAULT_TIME_LIMIT_S
from harness.interrupts import stop_on_signals
from harness.options import RunOptions
from harness.pipeline.life import GreedyMix, Life, LifeReplay, LifeStep
from harness.pipeline.observe import RandomDraw
from harness.pipeline.runner import (
    ImplResult,
    RaisedError,
    WorkCounts,
    run_guarded,
)
from harness.plugins.eras import Era
from harness.plugins.errors import ImplementationError
from harness.plugins.implementations import (
    BUILTIN_IMPLEMENTATIONS,
    Implementation,
    ImplementationKind,
    WorkerOnlySampler,
    check_impl_name,
    parse_impl_spec,
    split_impl_spec,
)
from harness.progress import no_progress
from harness.upstream.dispatch import provenance

ANSWER_GRACE_S = 10.0  # beyond the in-worker limit: clean-up, the answer, a busy machine
START_LIMIT_S = 600.0  # a worker's start and the inputs of one case
BUILTINS = "builtin"  # the built-ins' trust domain


# -- the wire: plain data only -------------------------------------------------------------
class WireError(ValueError):
    """A value that cannot cross the process line as plain data."""


_TENSOR, _DATACLASS, _DTYPE, _ENUM = "\0tensor", "\0dataclass", "\0dtype", "\0enum"


def _wire_types() -> dict[str, type[Any]]:
    """The result dataclasses that may cross, by name (imported late: the oracle and
    the work counters import this module's users)."""
    from harness.measure.counters import CallCost
    from harness.measure.timing import PairedTimes
    from harness.oracles.cut import OracleCut
    from harness.oracles.fits import Marginal, Statistic
    from harness.oracles.power import DetectionBound
    from harness.oracles.stats import StatsResult
    from harness.plugins.conventions import NoiseCounter, StagedParams
    from reference.verifier import DecodeResult

    allowed = (
        ImplResult,
        RaisedError,
        WorkCounts,
        RandomDraw,
        CallCost,
        StatsResult,
        Statistic,
        Marginal,
        DetectionBound,
        OracleCut,  # a plug-in's convention's cut, read in its worker (``isolated_scope``)
        DecodeResult,
        PluginDescription,
        PairedTimes,
        Life,
        LifeReplay,
        LifeStep,
        GreedyMix,
        StagedParams,  # a convention's staging, as read (sglang 0.5.23)
        NoiseCounter,
    )
    return {cls.__name__: cls for cls in allowed}


def to_wire(value: Any) -> Any:
    """``value`` as plain data; a tensor must be exactly ``torch.Tensor``."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor:
            raise WireError(
                f"a result tensor is a {type(value).__module__}.{type(value).__qualname__}, "
                "not a plain torch.Tensor"
            )
        data = value.detach().cpu().contiguous().reshape(-1)
        raw = data.to(torch.uint8) if data.dtype == torch.bool else data.view(torch.uint8)
        return {_TENSOR: (str(value.dtype), list(value.shape), raw.numpy().tobytes())}
    if isinstance(value, torch.dtype):
        return {_DTYPE: str(value)}
    if isinstance(value, enum.Enum):
        return {_ENUM: (type(value).__name__, value.value)}
    if is_dataclass(value) and not isinstance(value, type):
        body = {f.name: to_wire(getattr(value, f.name)) for f in fields(value)}
        return {_DATACLASS: type(value).__name__, **body}
    if isinstance(value, list | tuple):
        items = [to_wire(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: to_wire(v) for k, v in value.items()}
    raise WireError(f"a result holds a {type(value).__qualname__}, which cannot cross")


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"unknown dtype {name!r}")
    return dtype


def _plain_tensor(dtype_name: str, shape: list[int], raw: bytes) -> torch.Tensor:
    dtype = _dtype(dtype_name)
    if not raw:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
    values = flat.to(torch.bool) if dtype == torch.bool else flat.view(dtype)
    return values.reshape(shape).clone()


def from_wire(value: Any, *, types: dict[str, type[Any]] | None = None) -> Any:
    """The value ``to_wire`` made: plain tensors, the allowed dataclasses, plain data."""
    types = types if types is not None else _wire_types()
    if isinstance(value, list):
        return [from_wire(v, types=types) for v in value]
    if isinstance(value, tuple):
        return tuple(from_wire(v, types=types) for v in value)
    if not isinstance(value, dict):
        return value
    if _TENSOR in value:
        dtype_name, shape, raw = value[_TENSOR]
        return _plain_tensor(str(dtype_name), [int(n) for n in shape], bytes(raw))
    if _DTYPE in value:
        return _dtype(str(value[_DTYPE]))
    if _ENUM in value:
        name, member = value[_ENUM]
        enum_class = types.get(str(name))
        if enum_class is None or not issubclass(enum_class, enum.Enum):
            raise WireError(f"a result of type {name!r} may not cross")
        return enum_class(member)
    if _DATACLASS in value:
        cls = types.get(str(value[_DATACLASS]))
        if cls is None:
            raise WireError(f"a result of type {value[_DATACLASS]!r} may not cross")
        body = {k: from_wire(v, types=types) for k, v in value.items() if k != _DATACLASS}
        return cls(**body)
    return {k: from_wire(v, types=types) for k, v in value.items()}


class _DataOnly(pickle.Unpickler):
    """Unpickles built-in data types only: any class or function reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the worker's answer names {module}.{name}: refused")


def _send_answer(connection: Connection, value: Any) -> None:
    connection.send_bytes(pickle.dumps(value))


def _receive_answer(connection: Connection) -> Any:
    return _DataOnly(io.BytesIO(connection.recv_bytes())).load()


# -- plug-ins the judge does not import --------------------------------------------------
@dataclass(frozen=True)
class PluginDescription:
    """What the worker found when it loaded a plug-in (or why it could not)."""

    kind: ImplementationKind = "class"
    era: str | None = None  # the Era's value: only plain data crosses the wire
    convention: str = "harness"
    adaptations: tuple[str, ...] = ()
    error: str | None = None  # the ImplementationError's message


def _module_file(module_name: str) -> Path | None:
    """The source file of a dotted module name, found without importing anything."""
    search: list[str] | None = None
    origin: str | None = None
    for part in module_name.split("."):
        found = importlib.machinery.PathFinder.find_spec(part, search)
        if found is None:
            return None
        origin = found.origin
        search = list(found.submodule_search_locations or [])
    return Path(origin) if origin and origin.endswith(".py") else None


def worker_only(spec: str) -> Implementation:
    """An ``--impl`` spec as the judge holds it under ``--isolate``: named, its file
    located and digested, loaded and checked in its own worker only; a plug-in the
    worker refuses is an ``ImplementationError`` here, as it would be in process."""
    name, where, _, is_file = split_impl_spec(spec)
    check_impl_name(name)
    source = Path(where) if is_file else _module_file(where)
    if is_file and not (source is not None and source.is_file()):
        raise ImplementationError(f"--impl {spec}: no such file {where!r} (from {Path.cwd()})")
    stand_in = type(
        f"WorkerOnly_{name.replace('-', '_')}",
        (WorkerOnlySampler,),
        {"spec": spec, "source": None if source is None else source.resolve()},
    )
    description = worker_pool_for(spec).describe(spec)
    if description.error is not None:
        raise ImplementationError(description.error)
    return Implementation(
        name,
        stand_in,
        spec,
        None if description.era is None else Era(description.era),
        kind=description.kind,
        convention=description.convention,
        adaptations=description.adaptations,
    )


def _describe(spec: str) -> PluginDescription:
    try:
        loaded = parse_impl_spec(spec)
    except ImplementationError as error:
        return PluginDescription(error=str(error))
    described = provenance(loaded)
    return PluginDescription(
        kind=loaded.kind,
        era=described["era"],
        convention=described["convention"],
        adaptations=tuple(described["adaptations"]),
    )


def _domain(implementation: Implementation) -> str:
    """Which worker runs it: the built-ins share one, each plug-in has its own."""
    builtin = implementation.spec == f"builtin:{implementation.name}"
    return BUILTINS if builtin else implementation.spec


def _reference(implementation: Implementation) -> Any:
    """How the worker finds the implementation: a built-in's name, a plug-in's spec, or
    (a class built in memory, as tests do) the class itself by reference."""
    if implementation.name in BUILTIN_IMPLEMENTATIONS and _domain(implementation) == BUILTINS:
        return ("builtin", implementation.name)
    by_spec = (
        issubclass(implementation.sampler_class, WorkerOnlySampler)
        or ".py" in implementation.spec
        or implementation.era is Era.SGLANG_0_5_23  # its modules live in no importable package
    )
    if by_spec:
        return ("spec", implementation.spec)
    return ("class", implementation)


# -- the worker ----------------------------------------------------------------------------
def _worker_main(connection: Connection) -> None:
    """Serve requests until the judge closes the connection; the worker's stdout is its
    stderr, so nothing it prints lands in the judge's report (``--json``)."""
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    with stop_on_signals():  # so a KeyboardInterrupt the implementation raises is its own
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the judge decides what Ctrl-C stops
        _serve(connection)


class _Worker:
    """The worker's own state: loaded implementations, the last case's inputs, the
    oracle's problems."""

    def __init__(self) -> None:
        self.implementations: dict[str, Implementation] = {}
        self.cached: tuple[Case, CaseInputs] | None = None  # while pristine
        self.problems: dict[Any, Any] = {}

    def implementation(self, reference: Any) -> Implementation:
        kind, value = reference
        if kind == "builtin":
            return Implementation(value, BUILTIN_IMPLEMENTATIONS[value], f"builtin:{value}")
        if kind == "class":
            implementation: Implementation = value
            return implementation
        if value not in self.implementations:
            self.implementations[value] = parse_impl_spec(value)
        return self.implementations[value]

    def inputs(self, case: Case) -> CaseInputs:
        if self.cached is None or self.cached[0] != case:
            self.cached = (case, build_inputs(case))
        return self.cached[1]

    def run_case(self, reference: Any, case: Case, options: RunOptions) -> Any:
        result = run_guarded(
            self.implementation(reference), case=case, inputs=self.inputs(case), options=options
        )
        if result.mutated_inputs:  # the next implementation gets rebuilt inputs
            self.cached = None
        return result

    def stats(self, reference: Any, config: Any, limit: float | None, verifier: Any) -> Any:
        from harness.oracles.problem import build_problems
        from harness.oracles.stats import decode_and_fit

        if config not in self.problems:
            self.problems[config] = build_problems(config)
        problems = self.problems[config]
        return decode_and_fit(
            self.implementation(reference), problems=problems, time_limit_s=limit, verifier=verifier
        )

    def scope(self, reference: Any, config: Any, verifier: Any) -> Any:
        """The cuts and the heads outside the contract of the implementation's decode at
        ``config`` (``harness.oracles.stats.scope_under``), as plain data."""
        from harness.oracles.stats import scope_under

        scope = scope_under(
            config, verifier=verifier, implementation=self.implementation(reference)
        )
        return scope.cuts, scope.heads_not_run

    def timing(self, case: Case, repeats: int, references: tuple[Any, Any]) -> Any:
        from harness.measure.timing import TimingError, ab_timing

        first, second = (self.implementation(r) for r in references)
        try:
            timing = ab_timing(case, repeats=repeats, pair=(first, second))
        except TimingError as error:  # a plug-in that raises: a result, not a crash
            return RaisedError(type="TimingError", message=str(error), where="worker")
        return timing.threads, timing.times

    def cost(self, reference: Any, case: Case) -> Any:
        from harness.measure.counters import cost_of_call

        sampler_class = self.implementation(reference).sampler_class
        return cost_of_call(sampler_class, case=case, inputs=build_inputs(case))


def _serve(connection: Connection) -> None:
    worker = _Worker()
    tasks: dict[str, Callable[..., Any]] = {
        "describe": _describe,
        "case": worker.run_case,
        "stats": worker.stats,
        "scope": worker.scope,
        "cost": worker.cost,
        "timing": worker.timing,
    }
    while True:
        try:
            task, arguments = connection.recv()
        except EOFError:  # the judge is gone
            return
        connection.send_bytes(b"ready")
        answer = tasks[task](*arguments)
        try:
            wired = to_wire(answer)
        except WireError as error:  # e.g. a tensor subclass: the implementation's failure
            wired = to_wire(_refused(answer, error))
        _send_answer(connection, wired)


def _refused(answer: Any, error: WireError) -> Any:
    """The answer with its outputs dropped and the refusal as the failure."""
    failure = RaisedError(type="OutputError", message=str(error), where="worker")
    if isinstance(answer, ImplResult):
        return ImplResult(name=answer.name, error=failure)
    return failure


def _death(process: multiprocessing.process.BaseProcess) -> str:
    process.join(timeout=5)
    code = process.exitcode
    if code is None:
        return "the worker process stopped answering"
    if code < 0:
        return f"the worker process died from signal {signal.Signals(-code).name} ({code})"
    return f"the worker process exited with status {code} before returning a result"


@dataclass(frozen=True)
class WorkerFailure:
    """Why a request got no answer: ``WorkerDied``, ``CallTimeout`` or ``BadAnswer``."""

    type: str
    message: str

    def raised(self) -> RaisedError:
        return RaisedError(type=self.type, message=self.message, where="worker")


class WorkerPool:
    """One persistent worker, replaced after it dies or hangs."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._process: multiprocessing.process.BaseProcess | None = None
        self._connection: Connection | None = None

    def _ensure_worker(self) -> Connection:
        if self._process is None or not self._process.is_alive() or self._connection is None:
            self.shutdown()
            parent, child = self._context.Pipe()
            self._process = self._context.Process(
                target=_worker_main, args=(child,), daemon=True, name="harness-worker"
            )
            command_line = sys.argv
            sys.argv = command_line[:1]  # spawn hands argv on: the worker gets no --out-dir
            try:
                self._process.start()
            finally:
                sys.argv = command_line
            child.close()
            self._connection = parent
        return self._connection

    def shutdown(self) -> None:
        """Stop the worker, if any (killed: it may be hung)."""
        if self._connection is not None:
            self._connection.close()
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join(timeout=5)
        self._process, self._connection = None, None

    def _failure(self, failure: WorkerFailure) -> WorkerFailure:
        if failure.type == "WorkerDied" and self._process is not None:
            failure = WorkerFailure("WorkerDied", _death(self._process))
        self.shutdown()
        return failure

    def request(self, task: str, *arguments: Any, time_limit_s: float | None) -> Any:
        """The worker's answer to one request, or a ``WorkerFailure``."""
        connection = self._ensure_worker()
        try:
            connection.send((task, arguments))
            if not connection.poll(START_LIMIT_S):
                return self._failure(
                    WorkerFailure("CallTimeout", "the worker did not start in time")
                )
            connection.recv_bytes()  # "ready": the request starts
            limit = None if time_limit_s is None else time_limit_s + ANSWER_GRACE_S
            if not connection.poll(limit):
                assert time_limit_s is not None
                return self._failure(
                    WorkerFailure(
                        "CallTimeout",
                        f"no result within the time limit of {time_limit_s:g} s "
                        f"(+{ANSWER_GRACE_S:g} s); the worker process was killed",
                    )
                )
            wired = _receive_answer(connection)
        except (EOFError, ConnectionError):
            return self._failure(WorkerFailure("WorkerDied", ""))
        except (pickle.UnpicklingError, ValueError, TypeError) as error:
            return self._failure(WorkerFailure("BadAnswer", f"the worker's answer: {error}"))
        try:
            return from_wire(wired)
        except (WireError, ValueError, TypeError, KeyError, RuntimeError) as error:
            return self._failure(WorkerFailure("BadAnswer", f"the worker's answer: {error}"))

    def describe(self, spec: str) -> PluginDescription:
        answer = self.request("describe", spec, time_limit_s=START_LIMIT_S)
        if isinstance(answer, WorkerFailure):
            return PluginDescription(
                error=f"--impl {spec}: loading it in its worker failed: "
                f"{answer.type}: {answer.message}"
            )
        if not isinstance(answer, PluginDescription):
            return PluginDescription(error=f"--impl {spec}: its worker answered {answer!r}")
        return answer

    def run(
        self,
        implementation: Implementation,
        *,
        case: Case,
        options: RunOptions,
    ) -> ImplResult:
        """``run_guarded`` of one implementation in the worker under ``options`` (sent
        without the judge's progress sink); a crash or hang of the worker, or an answer
        that is not a result, is the implementation's failure."""
        answer = self.request(
            "case",
            _reference(implementation),
            case,
            dataclasses.replace(options, progress=no_progress),
            time_limit_s=options.time_limit_s,
        )
        if isinstance(answer, WorkerFailure):
            return ImplResult(name=implementation.name, error=answer.raised())
        if not isinstance(answer, ImplResult) or answer.name != implementation.name:
            failure = WorkerFailure("BadAnswer", "the worker's answer is not this result")
            return ImplResult(name=implementation.name, error=failure.raised())
        return _on_device(answer, torch.device(case.device))


def _on_device(result: ImplResult, device: torch.device) -> ImplResult:
    """Every tensor of ``result`` moved to ``device`` (they cross on the CPU)."""
    if device.type == "cpu":
        return result
    for item in fields(result):
        value = getattr(result, item.name)
        if isinstance(value, torch.Tensor):
            setattr(result, item.name, value.to(device))
        elif isinstance(value, ImplResult):  # the second call
            _on_device(value, device)
        elif isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            setattr(result, item.name, [t.to(device) for t in value])
        elif isinstance(value, list) and value and isinstance(value[0], RandomDraw):
            setattr(result, item.name, [_draw_on_device(d, device) for d in value])
    return result


def _draw_on_device(draw: RandomDraw, device: torch.device) -> RandomDraw:
    values = None if draw.values is None else draw.values.to(device)
    return dataclasses.replace(draw, values=values)


_pools: dict[str, WorkerPool] = {}


def worker_pool_for(domain_or_spec: str) -> WorkerPool:
    """The worker of one trust domain, started on first use and stopped at exit."""
    if not _pools:
        atexit.register(shutdown_workers)
    if domain_or_spec not in _pools:
        _pools[domain_or_spec] = WorkerPool()
    return _pools[domain_or_spec]


def worker_for(implementation: Implementation) -> WorkerPool:
    """The worker ``implementation`` runs in."""
    return worker_pool_for(_domain(implementation))


def shutdown_workers() -> None:
    """Stop every worker now (before the report is written; on an interrupted run)."""
    for pool in _pools.values():
        pool.shutdown()


def isolated_cost(implementation: Implementation, *, case: Case) -> Any:
    """``cost_of_call`` in the implementation's worker; a worker that fails is its failure."""
    from harness.measure.counters import CallCost

    answer = worker_for(implementation).request(
        "cost", _reference(implementation), case, time_limit_s=DEFAULT_TIME_LIMIT_S
    )
    if isinstance(answer, WorkerFailure | RaisedError):
        return CallCost(0, 0, None, error=answer.type)
    return answer if isinstance(answer, CallCost) else CallCost(0, 0, None, error="BadAnswer")


def isolated_ab_timing(
    case: Case, *, repeats: int, pair: tuple[Implementation, Implementation]
) -> Any:
    """``ab_timing`` of the pair in one worker: the plug-in's (both built-ins: theirs);
    two plug-ins never share a worker, so a pair of them is not timed. A failure of
    the worker or of the pair is a ``TimingError``."""
    from harness.measure.timing import ABTiming, TimingError

    domains = {_domain(i) for i in pair} - {BUILTINS}
    if len(domains) > 1:
        raise TimingError(
            f"under --isolate a timed pair holds at most one plug-in, got {pair[0].name} "
            f"and {pair[1].name}"
        )
    pool = worker_pool_for(domains.pop() if domains else BUILTINS)
    references = (_reference(pair[0]), _reference(pair[1]))
    answer = pool.request("timing", case, repeats, references, time_limit_s=None)
    if isinstance(answer, WorkerFailure | RaisedError):
        raise TimingError(f"{answer.type}: {answer.message}")
    threads, times = answer if isinstance(answer, tuple) and len(answer) == 2 else (None, None)
    if not isinstance(threads, int) or not isinstance(times, dict):
        raise TimingError("BadAnswer: the worker's answer is not a timing")
    names = (pair[0].name, pair[1].name)
    return ABTiming(case=case, repeats=repeats, warmup=1, threads=threads, times=times, pair=names)


def isolated_scope(implementation: Implementation, *, config: Any, verifier: Any) -> Any:
    """The scope of the implementation's decode at ``config`` under ``verifier``, its
    convention read in its worker (the judge holds a stand-in for a plug-in loaded there
    only). A worker that fails to answer leaves the verifier's cuts alone: the decode
    then meets the same failure and records it."""
    from harness.oracles.cut import OracleCut
    from harness.oracles.stats import scope_of, scope_under

    answer = worker_for(implementation).request(
        "scope", _reference(implementation), config, verifier, time_limit_s=START_LIMIT_S
    )
    if isinstance(answer, tuple) and len(answer) == 2:
        cuts, heads = answer
        if all(isinstance(c, OracleCut) for c in cuts) and all(
            isinstance(h, tuple) and len(h) == 2 and all(isinstance(x, str) for x in h)
            for h in heads
        ):
            return scope_of(config, cuts=tuple(cuts), heads_not_run=tuple(heads))
    return scope_under(config, verifier=verifier)


def isolated_decode_and_fit(
    implementation: Implementation, *, config: Any, time_limit_s: float | None, verifier: Any
) -> tuple[Any, Any]:
    """``decode_and_fit`` under ``verifier`` (a plain value, sent to the worker) in the
    implementation's worker (which builds the problem from ``config``); a worker that
    dies, hangs or answers nonsense is its failure."""
    from harness.oracles.stats import StatsResult, failed_result

    answer = worker_for(implementation).request(
        "stats",
        _reference(implementation),
        config,
        time_limit_s,
        verifier,
        time_limit_s=time_limit_s,
    )
    if isinstance(answer, WorkerFailure | RaisedError):
        error = answer.raised() if isinstance(answer, WorkerFailure) else answer
        failed = failed_result(
            implementation.name, config=config, error=error, verifier=verifier.name
        )
        return failed, None
    stats, decoded = answer if isinstance(answer, tuple) and len(answer) == 2 else (None, None)
    if (
        not isinstance(stats, StatsResult)
        or stats.name != implementation.name
        or stats.verifier != verifier.name
    ):
        failure = WorkerFailure("BadAnswer", "the worker's answer is not this result")
        failed = failed_result(
            implementation.name, config=config, error=failure.raised(), verifier=verifier.name
        )
        return failed, None
    return stats, decoded
