"""The value types an era of ``harness.upstream.releases.eras`` is built of: where its
convention lives, how deep the oracle decodes its row, and where its two laws of a
request live in its wheel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class ConventionRef(NamedTuple):
    """Where an era's convention lives, named as vLLM's model registry names a model's
    module and class and imported only when a sampler is built (``harness.upstream.dispatch``
    resolves it): the ``Convention`` object, and the predicate that says which sampler
    classes speak it."""

    convention: str  # "module.ATTRIBUTE": a ``harness.plugins.conventions.Convention``
    speaks: str  # "module.function": ``(sampler_class) -> bool``


@dataclass(frozen=True)
class OracleDepth:
    """How deep the statistical oracle decodes a release's row: ``rows`` per head at each
    of ``targets``, ``rounds`` per row, the head kinds ``heads`` (``None``: every head its
    contract carries; its convention declares it as its cut)."""

    rows: int
    targets: tuple[str, ...]
    rounds: int
    heads: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ServerLaws:
    """Where an era's two laws of a request live in its wheel, each "module.function"
    (``harness.upstream.sglang_laws`` holds them against each other): its server's
    non-speculative sampler (the CPU path), and the target its speculative verify builds
    for a batch that needs top-k or top-p sampling; ``branch`` names where the verify
    takes that branch, reading temperatures only for any other batch (every sglang
    release; ``temperatures_otherwise`` False: it takes it for every batch)."""

    sampler: str
    verify_target: str
    branch: str
    temperatures_otherwise: bool = True
