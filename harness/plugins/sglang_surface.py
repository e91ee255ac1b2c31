"""The ``sglang.*`` names the server's DSpark sampler module imports, mapped onto ``reference``.

A working copy of the PR-era server's sampler module (era ``pr36934``,
``harness.plugins.eras``) imports a handful of names from ``sglang``.
``harness_import_surface()`` supplies exactly that surface while one plug-in file of
that era loads, whatever sglang is installed, and takes it away afterwards (the
loaded module keeps the objects it imported):

- ``sglang.srt.environ``: ``envs`` (flags read from ``os.environ`` at ``.get()``)
  and ``DsparkFoldedSampling``;
- ``sglang.kernels.ops.speculative.dspark.dspark_draft_model`` (and the older home
  ``sglang.srt.speculative.dspark_components.kernels.sample_step_tokens``):
  ``SampleStepTokens``, the exponential race of ``reference``;
- ``sglang.srt.models.dspark``: ``VanillaMarkov``, which IS
  ``reference.VanillaMarkovHead``, so the server's ``isinstance`` gate of the fused
  greedy path holds for our vanilla heads and for no other kind;
- ``sglang.srt.speculative.dspark_components.dspark_draft``:
  ``select_draft_hidden_without_anchor``, ``reference.drop_anchor_row`` in the
  server's return shape;
- ``sglang.srt.speculative.spec_tp_sync``: ``SpecTpSync`` (the single-rank identity
  sync) and ``SpecTpSyncSite``;
- ``sglang.srt.utils``: ``is_npu`` (``False``) and ``get_available_gpu_memory``
  (free CUDA memory in GiB).
"""

from __future__ import annotations

import enum
import os
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from harness.plugins.construct import FUSED_GREEDY_ENV, IdentityTpSync
from harness.upstream.loaders.sglang_loader import sglang_modules_restored
from reference import VanillaMarkovHead, drop_anchor_row, exponential_race

_TRUE = ("1", "true", "yes", "y", "on")
_FALSE = ("0", "false", "no", "n", "off", "")


class EnvFlag:
    """One environment flag, read when ``.get()`` is called (as the server's flags are)."""

    def __init__(self, name: str, default: Any, parse: Callable[[str], Any]) -> None:
        self.name = name
        self.default = default
        self.parse = parse

    def get(self) -> Any:
        raw = os.environ.get(self.name)
        return self.default if raw is None else self.parse(raw)

    def is_set(self) -> bool:
        return self.name in os.environ

    @contextmanager
    def override(self, value: Any) -> Iterator[None]:
        previous = os.environ.get(self.name)
        os.environ[self.name] = str(int(value)) if isinstance(value, bool | int) else str(value)
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(self.name, None)
            else:
                os.environ[self.name] = previous

    def __bool__(self) -> bool:
        raise TypeError(f"read the flag with envs.{self.name}.get()")


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"not a boolean: {raw!r}")


class DsparkFoldedSampling(enum.IntEnum):
    """Whether the in-graph proposal also samples: off, when memory allows, always."""

    OFF = 0
    AUTO = 1
    FORCE = 2


class Envs:
    """The flags a DSpark sampler module reads; an unknown flag is an ``AttributeError``
    that names it (so a newer module says what the surface lacks)."""

    def __init__(self) -> None:
        self._flags = {
            flag.name: flag
            for flag in (
                EnvFlag(FUSED_GREEDY_ENV, False, _parse_bool),
                EnvFlag("SGLANG_DSPARK_FUSED_LOCAL_TOP1", False, _parse_bool),
                EnvFlag(
                    "SGLANG_DSPARK_FOLDED_SAMPLING",
                    DsparkFoldedSampling.AUTO,
                    lambda raw: DsparkFoldedSampling(int(raw)),
                ),
                EnvFlag("SGLANG_DSPARK_FAST_SAMPLING", True, _parse_bool),
            )
        }

    def __getattr__(self, name: str) -> EnvFlag:
        flags = self.__dict__.get("_flags", {})
        if name in flags:
            return flags[name]
        raise AttributeError(
            f"the harness's sglang surface has no flag {name!r}; it knows {sorted(flags)}"
        )


class SampleStepTokens:
    """The server's step-sampling kernel wrapper: the exponential race on given noise."""

    @classmethod
    def execute(
        cls,
        *,
        step_logits: torch.Tensor,
        temperatures: torch.Tensor,
        greedy_mask: torch.Tensor,
        exp_noise: torch.Tensor,
    ) -> torch.Tensor:
        return exponential_race(
            step_logits, temperatures=temperatures, greedy_mask=greedy_mask, noise=exp_noise
        )


def select_draft_hidden_without_anchor(
    hidden_states: torch.Tensor, *, bs: int, gamma: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop each request's anchor row: ``([bs*gamma, H], [bs, gamma, H])``."""
    expected = bs * (gamma + 1)
    if hidden_states.shape[0] != expected:
        raise RuntimeError(f"{hidden_states.shape[0]} hidden rows, expected {expected}")
    selected = drop_anchor_row(hidden_states, bs=bs, gamma=gamma)  # [bs, gamma, H]
    return selected.view(bs * gamma, -1), selected


class SpecTpSyncSite(enum.IntEnum):
    """Where a speculative step agrees across ranks (labels only on one rank)."""

    DSPARK_MEM = 1
    DSPARK_DRAFT_GREEDY = 2
    DSPARK_DRAFT_SAMPLE = 3
    DSPARK_DRAFT_MULTINOMIAL = 4
    DSPARK_GRAPH_SAMPLE = 5
    DSPARK_GRAPH_GREEDY = 6


def is_npu() -> bool:
    return False


def get_available_gpu_memory(
    device: str = "cuda", gpu_id: int = 0, distributed: bool = False, empty_cache: bool = True
) -> float:
    """Free memory of the device in GiB (0 without CUDA)."""
    del distributed, empty_cache  # one process; nothing to reduce or release
    if device != "cuda" or not torch.cuda.is_available():
        return 0.0
    free, _ = torch.cuda.mem_get_info(gpu_id)
    return free / (1 << 30)


_STEP_TOKENS = {"SampleStepTokens": SampleStepTokens}
SURFACE: dict[str, dict[str, Any]] = {
    "sglang.srt.environ": {"envs": Envs(), "DsparkFoldedSampling": DsparkFoldedSampling},
    "sglang.kernels.ops.speculative.dspark.dspark_draft_model": _STEP_TOKENS,
    "sglang.srt.speculative.dspark_components.kernels.sample_step_tokens": _STEP_TOKENS,
    "sglang.srt.models.dspark": {"VanillaMarkov": VanillaMarkovHead},
    "sglang.srt.speculative.dspark_components.dspark_draft": {
        "select_draft_hidden_without_anchor": select_draft_hidden_without_anchor
    },
    "sglang.srt.speculative.spec_tp_sync": {
        "SpecTpSync": IdentityTpSync,
        "SpecTpSyncSite": SpecTpSyncSite,
    },
    "sglang.srt.utils": {"is_npu": is_npu, "get_available_gpu_memory": get_available_gpu_memory},
}


def surface_modules() -> dict[str, types.ModuleType]:
    """Every surface module plus its parent packages, freshly made."""
    modules: dict[str, types.ModuleType] = {}
    for full_name, names in SURFACE.items():
        parts = full_name.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            if name not in modules:
                module = types.ModuleType(name, "supplied by the harness (harness.plugins)")
                module.__path__ = []  # a package, so submodules resolve
                module.__harness_surface__ = True  # type: ignore[attr-defined]
                modules[name] = module
                if depth > 1:
                    setattr(modules[".".join(parts[: depth - 1])], parts[depth - 1], module)
        vars(modules[full_name]).update(names)
    return modules


@contextmanager
def harness_import_surface() -> Iterator[None]:
    """Put the harness's ``sglang`` modules in ``sys.modules``; restore it on exit."""
    with sglang_modules_restored():
        sys.modules.update(surface_modules())
        yield
