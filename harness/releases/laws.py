"""A release row's two laws of a request: its verify target against its own sampler.

``server_laws`` runs its server's ``compare_laws`` (``harness.upstream.sglang_laws``, or
``harness.upstream.vllm_laws`` in the process that judges the vLLM release) on the
release's extracted files where its era names the pair (``ReleaseEra.laws``) and gives
what the row
carries: the parameter sets judged (the row's ``grid``, under ``LAWS_GRID``), a finding of
class ``LAW_CLASS`` when any row of any set differs (held in the row's verdict as a part,
``harness.judgement.PartVerdict``), and a line for each part not run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.upstream.releases.eras import ReleaseEra, era_of

if TYPE_CHECKING:
    import torch

    from harness.oracles.defaults import ParameterSet

LAW_CLASS = "verify target law"  # the verify's target is not its server's own law
LAWS_GRID = "verify target against its sampler"  # the row's grid entry: the sets judged


@dataclass(frozen=True)
class LawsOfRow:
    """What a row says of its two laws."""

    judged: list[str] = field(default_factory=list)  # "<set> (<batch>)"
    evidence: str = ""  # the finding's evidence; "": none
    not_covered: list[str] = field(default_factory=list)


def server_laws(era: ReleaseEra | None, *, root: Path | None) -> LawsOfRow | None:
    """The row's laws (``None``: its era names no pair, or its files are not at hand)."""
    if era is None or era.laws is None or root is None:
        return None
    from harness.upstream.loaders.wheel_functions import UnresolvedName

    if era.package == "vllm":
        from harness.upstream.vllm_laws import compare_laws
    else:
        from harness.upstream.sglang_laws import compare_laws
    try:
        compared = compare_laws(era.laws, root=root, sets=grid(), logits=far_logits())
    except UnresolvedName as error:
        return LawsOfRow(not_covered=[f"its verify target against its sampler: not run: {error}"])
    evidence = compared.evidence() if compared.differing else ""
    return LawsOfRow(judged=compared.judged, evidence=evidence, not_covered=compared.not_run())


def installed_laws(package: str, version: str) -> LawsOfRow | None:
    """The row's laws of the installed ``package`` at ``version`` (the ``versions``
    table's row of it); ``None`` where it is not installed or its era names no pair."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    return server_laws(era_of(package, version), root=Path(spec.origin).parent.parent)


def grid() -> tuple[ParameterSet, ...]:
    """The oracle's default parameter groups at its far target: greedy, each temperature,
    the truncated sets (``StatsConfig.groups_at``)."""
    from harness.oracles.problem import DEFAULT_CONFIG, FAR

    return DEFAULT_CONFIG.groups_at(FAR)


def far_logits() -> torch.Tensor:
    """``[V, V]``: the transition logits of the oracle's far target at its default config,
    one context token a row (``harness.oracles.problem.far_target``)."""
    from harness.oracles.problem import DEFAULT_CONFIG, far_target

    return far_target(DEFAULT_CONFIG).transition_logits
