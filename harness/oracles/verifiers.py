"""The verifiers the statistical oracle runs under, by the names the command line uses.

A verifier is a plain value (``reference.verifier.Verifier``); this table only maps
``--verifiers`` names onto those values: ``chain`` (ours, ``reference.verifier``) and
``sglang-blockwise`` (the released server's block-wise rejection, loaded from the
installed package by ``harness.upstream``) and ``vllm-rejection`` (vLLM 0.33's
``rejection_sample``, interpreted on a machine without CUDA: the oracle cuts its rows
per head, ``harness.oracles.stats.scope_under``).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.oracle_cut import DeclaresCut
from harness.oracles.problem import StatsError
from harness.upstream.loaders import sglang_loader, vllm_loader
from harness.upstream.rejection import BLOCKWISE_REJECTION
from harness.upstream.vllm_rejection import VLLM_REJECTION
from reference.verifier import CHAIN_VERIFIER, Verifier


def _always() -> str | None:
    return None


# name -> (the verifier, why it cannot run here or None)
VERIFIERS: dict[str, tuple[Verifier, Callable[[], str | None]]] = {
    CHAIN_VERIFIER.name: (CHAIN_VERIFIER, _always),
    BLOCKWISE_REJECTION.name: (BLOCKWISE_REJECTION, sglang_loader.unavailable_reason),
    VLLM_REJECTION.name: (VLLM_REJECTION, vllm_loader.unavailable_reason),
}


def verifiers_named(names: tuple[str, ...]) -> tuple[Verifier, ...]:
    """The verifiers ``names`` name, in order; ``StatsError`` names an unknown one or
    says why a known one cannot run here."""
    chosen = []
    for name in names:
        if name not in VERIFIERS:
            raise StatsError(f"--verifiers: unknown verifier {name!r}; expected {list(VERIFIERS)}")
        verifier, reason = VERIFIERS[name]
        missing = reason()
        if missing is not None:
            raise StatsError(f"--verifiers: {name} cannot run here: {missing}")
        chosen.append(verifier)
    if len(set(names)) != len(names) or not names:
        raise StatsError(f"--verifiers must name distinct verifiers, got {list(names)}")
    return tuple(chosen)


def available_verifiers() -> tuple[Verifier, ...]:
    """Every verifier that can run here at the config's rows (ours always; sglang's with
    its package): what the report runs. One that cuts the oracle (``DeclaresCut``:
    vLLM's, interpreted, hours at the report's row counts) runs only where
    ``--verifiers`` names it."""
    return tuple(
        verifier
        for verifier, reason in VERIFIERS.values()
        if reason() is None and not (isinstance(verifier, DeclaresCut) and verifier.oracle_cut)
    )
