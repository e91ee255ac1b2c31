"""Which calling convention a sampler class speaks, among ours (``harness.plugins``) and
the released packages' (``sglang_convention``, ``vllm_convention``), a sampler built in
it, and an implementation's provenance as reports show it. It sits above both: the
conventions of ``harness.plugins`` know no released package."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.construct import bind_constructor
from harness.plugins.conventions import (
    BuiltSampler,
    ConstructorConvention,
    Convention,
    ConventionName,
)
from harness.plugins.implementations import Implementation
from harness.plugins.protocol import DraftSampler
from harness.upstream.releases.sglang_0_5_16 import SGLANG_0_5_16, speaks_sglang_0_5_16
from harness.upstream.sglang_convention import SGLANG_0_5_23
from harness.upstream.sglang_loader import speaks_sglang_0_5_23
from harness.upstream.vllm_eras import vllm_convention_of
from harness.upstream.vllm_loader import speaks_vllm_0_33

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs


def convention_of(sampler_class: type[DraftSampler]) -> Convention:
    """The convention a sampler class speaks: sglang 0.5.23's for the package's own
    ``DsparkDraftSampler`` and its subclasses, sglang 0.5.16's for that wheel's (loaded
    by the release sweep), the vLLM convention of its release for its
    ``DSparkSpeculator`` and its subclasses (``vllm_eras``), else what its constructor
    says."""
    if speaks_sglang_0_5_23(sampler_class):
        return SGLANG_0_5_23
    if speaks_sglang_0_5_16(sampler_class):
        return SGLANG_0_5_16
    if speaks_vllm_0_33(sampler_class):
        return vllm_convention_of(sampler_class)
    return ConstructorConvention(ConventionName(bind_constructor(sampler_class).convention))


def build_for_case(
    sampler_class: type[DraftSampler],
    *,
    case: Case,
    inputs: CaseInputs,
    model: torch.nn.Module | None = None,
    out: torch.Tensor | None = None,
) -> BuiltSampler:
    """A sampler for the case in the class's own convention (``out``: the server's token
    buffer, where the constructor takes one); nothing staged yet."""
    return convention_of(sampler_class).build(
        sampler_class, case=case, inputs=inputs, model=model, out=out
    )


def provenance(implementation: Implementation) -> dict[str, Any]:
    """Where the sampler came from and how it is called, as plain JSON for reports: the
    convention and adaptations its worker found, else those of its class."""
    if implementation.convention is None or implementation.adaptations is None:
        convention = convention_of(implementation.sampler_class)
        name, adaptations = convention.name.value, convention.adaptations()
    else:
        name, adaptations = implementation.convention, implementation.adaptations
    return {
        "name": implementation.name,
        "spec": implementation.spec,
        "kind": implementation.kind,
        "era": None if implementation.era is None else implementation.era.value,
        "convention": name,
        "adaptations": list(adaptations),
    }
