"""sglang 0.5.16-0.5.21 under their own kernels: the DSpark modules each release ships,
loaded unchanged from its wheel through the sglang loader (docs/releases.md, "Loading a
release"), the drafter that hands the wheel's sampler the wheel's own Markov head, and
the convention of 0.5.17-0.5.21's sampler built from its wheel.

Read from the wheels (``RELEASE_MODULES``, those a wheel ships are loaded):

- the environment flags: ``srt/environ.py`` (``envs``, read from ``os.environ`` at each
  ``.get()``); 0.5.16-0.5.18 import ``srt/debug_utils/cuda_coredump.py`` from it, a
  stand-in here (``COREDUMP``);
- the step kernel ``SampleStepTokens`` (and ``MarkovGreedyStep`` from 0.5.19):
  ``srt/speculative/dspark_components/kernels/dspark_draft_model.py`` in 0.5.16,
  ``kernels/ops/speculative/dspark/dspark_draft_model.py`` from 0.5.17, each beside its
  ``dispatch.py``;
- the Markov heads ``VanillaMarkov``, ``GatedMarkovHead``, ``RNNHead``:
  ``srt/models/dspark.py``;
- 0.5.16's sampler and eager block: ``dspark_components/dspark_draft.py``; from 0.5.17
  the sampler is ``dspark_components/dspark_draft_sampler.py``, and from 0.5.19 it
  imports ``SpecTpSync`` (``srt/speculative/spec_tp_sync.py``) and ``dspark_draft.py``
  (which imports ``srt/utils/invariants.py``).

Their boundary imports (the worker, tensor parallelism, model loading) are 0.5.23's
stand-ins (``sglang_loader.STAND_INS``) plus ``COREDUMP``: any use raises, naming it.

On a CPU each kernel's own ``execute`` takes its torch path (``step_logits.is_cuda`` is
false), and the vanilla head's fused greedy walk (``sample_block_greedy_fused``, over
``MarkovGreedyStep``'s Triton kernel) returns ``None`` off CUDA, so the sampler walks the
head: the Triton kernels run on CUDA only, which each row says.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from harness.plugins.construct import bind_constructor, fused_greedy_environment
from harness.plugins.conventions import (
    BuiltSampler,
    ConstructorConvention,
    ConventionName,
    CorrectedOutSampler,
)
from harness.plugins.walks import HeadCounts, observe_head
from harness.upstream.loaders import sglang_loader
from harness.upstream.sglang_convention import OneRankGroup, package_head

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs

_COMPONENTS = "sglang.srt.speculative.dspark_components"
ENVIRON = "sglang.srt.environ"
HEADS = "sglang.srt.models.dspark"
TP_SYNC = "sglang.srt.speculative.spec_tp_sync"
DRAFT = f"{_COMPONENTS}.dspark_draft"  # 0.5.16's sampler and eager block
SAMPLER = f"{_COMPONENTS}.dspark_draft_sampler"  # 0.5.17 on
STEP_KERNELS = (  # where SampleStepTokens lives: 0.5.16, then 0.5.17 on
    f"{_COMPONENTS}.kernels.dspark_draft_model",
    "sglang.kernels.ops.speculative.dspark.dspark_draft_model",
)

# Every module the loader runs from an early wheel, in import order; a wheel's own list
# is those of them it ships.
RELEASE_MODULES: tuple[str, ...] = (
    ENVIRON,
    "sglang.srt.utils.invariants",
    TP_SYNC,
    f"{_COMPONENTS}.kernels.dispatch",
    "sglang.kernels.ops.speculative.dspark.dispatch",
    *STEP_KERNELS,
    HEADS,
    DRAFT,
    SAMPLER,
)
# What a wheel without those files (the tests' own) is judged with in their place.
SURFACE_STANDS_IN = (
    "the harness's surface (reference) stands in for its step kernel (SampleStepTokens), "
    "Markov heads and environment flags; the sampler's own code is the wheel's"
)
COREDUMP = sglang_loader.StandInModule(
    name="sglang.srt.debug_utils.cuda_coredump",
    names=(),
    why="the CUDA coredump set-up environ.py imports (SGLANG_CUDA_COREDUMP; no CUDA runs here)",
)


def _file(extracted: Path, module: str) -> Path:
    return extracted.joinpath(*module.split(".")).with_suffix(".py")


def lacking(extracted: Path) -> list[str]:
    """The files of the flags, the step kernel and the heads the wheel does not ship
    (empty: a release's wheel; the tests' own wheels hold a sampler file alone)."""
    kernels = [m for m in STEP_KERNELS if _file(extracted, m).is_file()]
    wanted = [ENVIRON, HEADS, *(kernels[:1] or STEP_KERNELS[-1:])]
    return [str(_file(Path(), m)) for m in wanted if not _file(extracted, m).is_file()]


def load_wheel(extracted: Path, *, version: str) -> sglang_loader.LoadedModules:
    """The release's own modules from the extracted folder (which holds ``sglang/``),
    loaded in this process from now on (``sglang_loader.use_release``)."""
    modules = tuple(m for m in RELEASE_MODULES if _file(extracted, m).is_file())
    sglang_loader.use_release(
        sglang_loader.SglangRelease(
            root=extracted / "sglang",
            version=version,
            modules=modules,
            stand_ins=(*sglang_loader.STAND_INS, COREDUMP),
        )
    )
    return sglang_loader.load_modules()


def from_wheel(sampler_class: type[Any], module: str) -> bool:
    """Whether the class (or a base) is a ``DsparkDraftSampler`` defined in ``module``:
    the wheel's own module name, as the sglang loader loads it (or the name 0.5.16's
    file is loaded under beside the surface)."""
    return any(
        c.__module__ == module and c.__name__ == "DsparkDraftSampler"
        for c in getattr(sampler_class, "__mro__", ())
    )


class WheelDrafter:
    """The case's toy drafter with the wheel's own Markov head of its kind, holding the
    reference head's weights (``package_head``); the sampler reads ``lm_head`` (its
    ``org_vocab_size`` and weight dtype), ``markov_head`` and ``compute_base_logits``."""

    def __init__(self, toy: Any) -> None:
        self.toy = toy
        self.lm_head = toy.lm_head
        self.sample_from_anchor = toy.sample_from_anchor
        heads = sglang_loader.load_modules().modules[HEADS]
        # the drafter's weights are loaded, not the sampler's work: the heads' default
        # initialisation is kept out of the observed construction
        with _disable_current_modes():
            self.markov_head = package_head(toy.markov_head, loaded=heads)

    def compute_base_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, Any]:
        return self.toy.compute_base_logits(hidden)


def observe_wheel_head(head: Any) -> AbstractContextManager[HeadCounts]:
    """The walks of a call on the wheel's head: its ``sample_block`` walks, its fused
    greedy calls, and one step per ``project_bias`` (each head kind projects once a
    step); a reference head (a wheel without its heads) by its own ``step_bias``."""
    return observe_head(head, step="step_bias" if hasattr(head, "step_bias") else "project_bias")


class WheelSampler(CorrectedOutSampler):
    """0.5.17-0.5.21's sampler from its wheel: the PR-era server's buffers, its walks
    counted on the wheel's head."""

    def observe_walks(self) -> AbstractContextManager[HeadCounts]:
        return observe_wheel_head(self.model.markov_head)


class WheelServerConvention(ConstructorConvention):
    """Builds 0.5.17-0.5.21's ``DsparkDraftSampler`` from its wheel as the PR-era server
    does, over ``WheelDrafter``: the wheel's ``SpecTpSync`` on one rank where the
    constructor takes ``tp_sync`` (0.5.19 on), the fused-greedy switch through the
    wheel's own flags (read from the environment)."""

    def __init__(self) -> None:
        super().__init__(ConventionName.SERVER)

    def build(
        self,
        sampler_class: type[Any],
        *,
        case: Case,
        inputs: CaseInputs,
        model: torch.nn.Module | None = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        drafter = WheelDrafter(inputs.model if model is None else model)
        offered: dict[str, Any] = {
            "model": drafter,
            "gamma": case.gamma,
            "max_bs": case.max_bs,
            "device": torch.device(case.device),
            "confidence_fn": inputs.confidence_fn,
            "out": out,
            "folded_sampling": case.folded_sampling,
        }
        if "tp_sync" in bind_constructor(sampler_class).keywords:
            tp_sync = sglang_loader.load_modules().modules[TP_SYNC].SpecTpSync
            offered["tp_sync"] = tp_sync(OneRankGroup())
        with fused_greedy_environment(case.fused_greedy):
            sampler = sampler_class(**offered)
        return WheelSampler(sampler=sampler, model=drafter, convention=self.name, server_out=out)


SGLANG_WHEEL = WheelServerConvention()


def speaks_sglang_wheel(sampler_class: type[Any]) -> bool:
    """Whether the class is 0.5.17-0.5.21's sampler loaded from its wheel (0.5.23's,
    which shares the module's name, is told apart first: ``speaks_sglang_0_5_23``)."""
    return from_wheel(sampler_class, SAMPLER) and not sglang_loader.speaks_sglang_0_5_23(
        sampler_class
    )
