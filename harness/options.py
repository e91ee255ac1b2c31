"""What a run is asked to do, gathered once: ``RunOptions`` (the seed and device, the
per-call time limit, the intra-op threads, isolation, the roles, the ledger's strictness,
noise recording, the memory limit, the oracle, its verifiers and rows, the matrix,
resuming and the progress sink), ``Roles`` (what each implementation is held to), and
named options (``PROFILES``: ``default``, ``ci``, ``thorough``; ``register_profile``,
``get_profile``) that the Python API and the pytest plugin take by name.

The command line builds one ``RunOptions`` from its arguments (``harness.cli.options``),
the Python API and the pytest plugin from theirs, and every stage takes the one value;
each option has its one default here. Importable without torch, so the command line
offers its defaults before any work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.defaults import (
    DEFAULT_JOBS,
    DEFAULT_PAIR,
    DEFAULT_ROWS,
    DEFAULT_THREADS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_VERIFIER_NOISE,
    FIXED,
    REFERENCE,
    VerifierNoise,
)
from harness.pipeline.check_result import Tier
from harness.progress import Progress, no_progress

ALWAYS_DROP_IN = (FIXED, REFERENCE)  # built-ins held to drop-in whatever is required


class RolesError(ValueError):
    """Roles that name implementations not in the comparison, or leave nothing to judge."""


@dataclass(frozen=True)
class Roles:
    """What each implementation of a comparison is held to: the buggy side of the
    ``pair`` is held to the legacy ledger, an ``expect_fail`` one must fail a lossless
    check, the built-ins ``fixed`` and ``reference`` must be drop-in, and every other
    implementation must meet ``require``."""

    pair: tuple[str, str] = DEFAULT_PAIR
    expect_fail: tuple[str, ...] = ()
    require: Tier = Tier.DROP_IN

    def __post_init__(self) -> None:
        if not isinstance(self.require, Tier):
            raise RolesError(f"require must be a Tier, got {self.require!r}")
        if len(self.pair) != 2 or self.pair[0] == self.pair[1]:
            raise RolesError(f"the pair needs two different names BUGGY,FIXED, got {self.pair}")

    @property
    def buggy(self) -> str:
        return self.pair[0]

    @property
    def fixed(self) -> str:
        return self.pair[1]

    def requirement(self, name: str) -> Tier:
        """What ``name`` must meet when it is judged by its checks."""
        return Tier.DROP_IN if name in ALWAYS_DROP_IN else self.require

    def describe(self, name: str) -> tuple[str, str]:
        """``(role, what it is held to)`` of ``name``, in words."""
        if name in self.expect_fail:
            return "expected to fail", "fails a lossless check"
        if name == self.buggy:
            return f"buggy side of the pair with {self.fixed}", "the divergence ledger"
        if name == self.fixed:
            return f"fixed side of the pair with {self.buggy}", self.requirement(name).label
        return "judged", self.requirement(name).label

    def judged_by_checks(self, name: str) -> bool:
        """The pair's buggy side is judged by the ledger (and by ``expect_fail``) only."""
        return name != self.buggy or name in self.expect_fail

    def validate(self, names: Sequence[str]) -> None:
        """Refuse roles naming absent implementations, and a comparison with nothing to
        judge (no implementation judged by its checks, and no complete pair)."""
        present = set(names)
        unknown = [n for n in self.expect_fail if n not in present]
        if unknown:
            raise RolesError(
                f"--expect-fail names implementations not in the comparison: {unknown}"
            )
        if self.pair != DEFAULT_PAIR:
            missing = [n for n in self.pair if n not in present]
            if missing:
                raise RolesError(f"--pair names implementations not in the comparison: {missing}")
        has_pair = self.buggy in present and self.fixed in present
        if not has_pair and not any(self.judged_by_checks(n) for n in names):
            raise RolesError(
                f"nothing to judge: implementations {list(names)} "
                f"(the buggy side {self.buggy!r} needs its pair {self.fixed!r})"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "pair": list(self.pair),
            "expect_fail": list(self.expect_fail),
            "require": self.require.label,
        }


@dataclass(frozen=True)
class RunOptions:
    """The options of one run, each with its one default.

    ``require_observable``: the cases are the standard matrix, so the ledger must show
    every class it predicts on each case and every class over the matrix (a chosen case
    may show fewer). ``max_memory_bytes``: the memory limit (``None``: half the memory
    free now, ``harness.pipeline.memory``). ``stats``: whether the statistical oracle
    runs (without it every lossless verdict says it rests on the checks alone).
    ``verifiers``: the names of the verifiers the oracle of a lossless verdict runs
    under (``harness.oracles.verifiers``; ``None``: every one that runs here at the
    report's rows). ``verifier_noise``: where the oracle's verifier draws from (each
    server's own plumbing, or independent streams as a control). ``oracle_rows``: the
    oracle's rows per head kind (``--rows``). ``thorough``: the matrix adds production
    shapes (``--thorough``, ``harness.pipeline.matrix.matrix_for``). ``device`` is the
    run's one device: its cases, its oracle and its work all run there."""

    seed: int = 0
    device: str = "cpu"
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S  # None: no limit
    isolate: bool = False  # each implementation in its trust domain's worker process
    roles: Roles = Roles()
    require_observable: bool = False
    record_noise: bool = True  # keep every noise tensor drawn (the checks replay them)
    max_memory_bytes: int | None = None
    stats: bool = True
    verifiers: tuple[str, ...] | None = None
    verifier_noise: VerifierNoise = DEFAULT_VERIFIER_NOISE
    oracle_rows: int = DEFAULT_ROWS
    thorough: bool = False
    resume: bool = False  # reuse the records an interrupted run left in its journal
    threads: int | None = DEFAULT_THREADS  # torch intra-op threads (None: torch's own count)
    jobs: int = DEFAULT_JOBS  # 2: the oracle in a forked process beside the matrix and work
    progress: Progress = field(default=no_progress, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.verifier_noise, VerifierNoise):  # its word, from the API
            try:
                noise = verifier_noise_of(self.verifier_noise)
            except ValueError as error:
                raise ValueError(f"verifier_noise: {error}") from None
            object.__setattr__(self, "verifier_noise", noise)


def verifier_noise_of(word: str) -> VerifierNoise:
    """``word`` as a ``VerifierNoise``, refused with the words it takes."""
    try:
        return VerifierNoise(word)
    except ValueError:
        expected = ", ".join(noise.value for noise in VerifierNoise)
        raise ValueError(f"expected one of {expected}, got {word!r}") from None


DEFAULT_OPTIONS = RunOptions()

# Named options, in the manner of Hypothesis's settings profiles: ``default``; ``ci``, the
# same verdict on a shared runner (one process, no per-call time limit: a loaded machine
# is no defect); ``thorough``, production shapes and four times the oracle's rows, without
# a time limit (minutes on a CPU).
PROFILES: dict[str, RunOptions] = {
    "default": DEFAULT_OPTIONS,
    "ci": RunOptions(time_limit_s=None, jobs=1),
    "thorough": RunOptions(time_limit_s=None, thorough=True, oracle_rows=4 * DEFAULT_ROWS),
}


def register_profile(name: str, options: RunOptions) -> None:
    """Name ``options`` as a profile (a name given again is replaced)."""
    if not isinstance(options, RunOptions):
        raise TypeError(f"profile {name!r}: expected a RunOptions, got {options!r}")
    PROFILES[name] = options


def get_profile(name: str) -> RunOptions:
    """The options a profile names; an unknown name is refused with the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown profile {name!r}: expected one of {', '.join(PROFILES)}"
        ) from None
