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
groups. One that applies them as its own server does, a law the oracle's
(``reference.request_law``) where a set truncates one way but not where top-k, top-p and
min-p combine (``CombinedLaw``), is cut to the sets that truncate one way. Torch-free:
the conventions read it without the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class OracleCut:
    """At most ``rows`` rows per head at every target kept; ``targets`` the targets it
    keeps (``None``: every target of the config); ``rounds`` the draft-verify rounds of
    each row (``None``: the config's); ``heads`` the head kinds it keeps (``None``: every
    head of the config); ``truncated`` off: the truncated parameter sets are not run
    (``combined_truncations`` off: those that truncate more than one way are not);
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
    combined_truncations: bool = True  # off: a set that truncates more than one way is not run

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
class CombinedLaw(Protocol):
    """A verifier that applies each request's truncation as its own server does, whose
    law is the oracle's where a set truncates one way: why it is not where they combine
    (``""``: it is there too)."""

    @property
    def combined_law(self) -> str: ...
