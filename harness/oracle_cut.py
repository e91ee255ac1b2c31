"""What a slow part of a run lets the statistical oracle decode (docs/statistics.md,
"Cuts").

A verifier or a sampler's calling convention that runs under Triton's interpreter
(vLLM 0.33's, on a machine without CUDA) costs a Python program per row and step, so
the oracle's defaults do not fit a run's time there. Such a part declares an
``OracleCut`` (``DeclaresCut.oracle_cut``); ``harness.oracles.stats.scope_under``
applies every cut that the verifier and the implementation's convention declare, and
the result's rows, family and detection bounds are those of the config it ran. A verifier
that applies no request's top-k, top-p or min-p to its target (``ReadsTruncation``) is
cut to the temperature groups: its target is not its server's law for the truncated
groups. One that applies them as its own server does, by a law that is not ours, names
that law (``JudgedOnItsLaw``, one of ``ORACLE_LAWS``), and the oracle judges its rows
against it. Torch-free: the conventions read it without the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# The laws a request's committed tokens may be judged against (``StatsConfig.law``): ours,
# or a server's own non-speculative law where the oracle runs under its verifier
OUR_LAW = "ours"
VLLM_LAW = "vllm"
ORACLE_LAWS = {
    OUR_LAW: "our law (reference.request_law)",
    VLLM_LAW: "vLLM's own law (what its Sampler.sample draws from)",
}


@dataclass(frozen=True)
class OracleCut:
    """At most ``rows`` rows per head at every target kept; ``targets`` the targets it
    keeps (``None``: every target of the config); ``rounds`` the draft-verify rounds of
    each row (``None``: the config's); ``heads`` the head kinds it keeps (``None``: every
    head of the config); ``truncated`` off: the truncated parameter sets are not run;
    ``stage_rows`` the rows of each sequential stage (``None``: the config's; an
    interpreted part cannot afford the defaults' 20,000 and 50,000 rows); ``by`` who
    declares it and why, as a report states it."""

    rows: int
    by: str
    targets: tuple[str, ...] | None = None
    rounds: int | None = None
    heads: tuple[str, ...] | None = None
    truncated: bool = True
    stage_rows: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("rows", "rounds"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"OracleCut.{name} must be a positive integer, got {value!r}")
        if self.stage_rows is not None and not all(
            isinstance(r, int) and r > 0 for r in self.stage_rows
        ):
            raise ValueError(
                f"OracleCut.stage_rows must be positive integers, got {self.stage_rows}"
            )
        for name in ("targets", "heads"):
            if getattr(self, name) == ():
                raise ValueError(f"OracleCut.{name} must name one, or be None (every one)")


@runtime_checkable
class DeclaresCut(Protocol):
    """A verifier or a convention that may cut the oracle's config (``None``: it does
    not here)."""

    @property
    def oracle_cut(self) -> OracleCut | None: ...


@runtime_checkable
class ReadsTruncation(Protocol):
    """A verifier that says whether it applies each request's top-k, top-p and min-p to
    its target law (``reference.request_law``); one that does not say, does not."""

    @property
    def reads_truncation(self) -> bool: ...


@runtime_checkable
class JudgedOnItsLaw(Protocol):
    """A verifier whose target is its own server's law of a request, which is not ours:
    the name of that law (``ORACLE_LAWS``), which the oracle's
    exact laws follow under it."""

    @property
    def oracle_law(self) -> str: ...
