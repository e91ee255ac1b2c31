"""Constructing a sampler with only the keywords its constructor accepts.

This binds the constructors of the ``harness`` and ``server`` calling conventions
(``harness.plugins.conventions`` owns the conventions as objects; sglang 0.5.23's is
built by ``harness.upstream.sglang_convention``). Those two differ here: ours takes
``fused_greedy=`` as an argument; the server's reads the fused switch from the environment variable
``SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV`` once in its constructor and (in later
versions) requires a tensor-parallel sync ``tp_sync``. ``bind_constructor`` reads a
class's signature once, before the first case, and either returns a
``ConstructorBinding`` that knows what to pass or raises one ``ImplementationError``
that lists every mismatch. ``construct_sampler`` then builds samplers from it.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from harness.plugins.errors import ImplementationError
from harness.plugins.protocol import DraftSampler

FUSED_GREEDY_ENV = "SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV"
REQUIRED_KEYWORDS = ("model", "gamma", "max_bs", "device")
OPTIONAL_KEYWORDS = ("confidence_fn", "out", "folded_sampling", "fused_greedy", "tp_sync")
SUPPLIED_KEYWORDS = REQUIRED_KEYWORDS + OPTIONAL_KEYWORDS
EXPECTED_FORM = (
    "DsparkDraftSampler(*, model, gamma, max_bs, device, confidence_fn=None, out=None, "
    "folded_sampling=True, fused_greedy=False) or the server's form with tp_sync and the "
    f"{FUSED_GREEDY_ENV} switch; .stage_sampling_params(*, bs, sampling_info); "
    "__call__(hidden_states, input_ids)"
)

T = TypeVar("T")


class IdentityTpSync:
    """A tensor-parallel sync for a single rank: every rank already agrees."""

    def sync(self, site: Any, values: T) -> T:
        del site  # one rank: nothing to agree on
        return values


@dataclass(frozen=True)
class ConstructorBinding:
    """Which of the harness's keywords a sampler class takes, decided once."""

    sampler_class: type[DraftSampler]
    keywords: tuple[str, ...]  # the keywords passed by name
    fused_greedy_from_env: bool  # the class reads the fused switch from the environment

    @property
    def takes_out(self) -> bool:
        """Whether the constructor takes a server-owned token buffer (``out=``)."""
        return "out" in self.keywords

    @property
    def convention(self) -> str:
        """``"harness"`` (``fused_greedy=``) or ``"server"`` (the environment switch)."""
        return "server" if self.fused_greedy_from_env else "harness"


def _parameters(callable_: Any) -> dict[str, inspect.Parameter] | str:
    try:
        return dict(inspect.signature(callable_).parameters)
    except (TypeError, ValueError) as error:
        return f"cannot read its signature ({error})"


def _takes_keywords(parameters: dict[str, inspect.Parameter], names: tuple[str, ...]) -> bool:
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return True
    keyword_kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return all(n in parameters and parameters[n].kind in keyword_kinds for n in names)


def _method_mismatches(sampler_class: type[DraftSampler]) -> list[str]:
    """What is wrong with ``stage_sampling_params`` and ``__call__``, if anything."""
    mismatches = []
    stage = getattr(sampler_class, "stage_sampling_params", None)
    if not callable(stage):
        mismatches.append("class has no stage_sampling_params(*, bs, sampling_info)")
    else:
        parameters = _parameters(stage)
        if isinstance(parameters, str):
            mismatches.append(f"stage_sampling_params: {parameters}")
        elif not _takes_keywords(parameters, ("bs", "sampling_info")):
            mismatches.append(
                "stage_sampling_params does not take the keywords bs= and sampling_info="
            )
    if not any("__call__" in vars(cls) for cls in sampler_class.__mro__[:-1]):
        mismatches.append("class has no __call__(hidden_states, input_ids)")
    return mismatches


def _constructor_mismatches(
    parameters: dict[str, inspect.Parameter],
) -> tuple[list[str], tuple[str, ...]]:
    """The constructor's mismatches and the keywords to pass it."""
    kinds = inspect.Parameter
    takes_any = any(p.kind is kinds.VAR_KEYWORD for p in parameters.values())
    mismatches = []
    for name, parameter in parameters.items():
        required = parameter.default is kinds.empty
        if parameter.kind in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD) or not required:
            continue
        if parameter.kind is kinds.POSITIONAL_ONLY:
            mismatches.append(f"parameter {name!r} is positional-only (keywords are passed)")
        elif name not in SUPPLIED_KEYWORDS:
            mismatches.append(
                f"parameter {name!r} is required but the harness supplies only "
                f"{', '.join(SUPPLIED_KEYWORDS)}"
            )
    by_keyword = {
        name
        for name, p in parameters.items()
        if p.kind in (kinds.KEYWORD_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    }
    if not takes_any:
        mismatches.extend(
            f"does not accept the keyword {name}="
            for name in REQUIRED_KEYWORDS
            if name not in by_keyword
        )
    # Only by name: **kwargs gets our own convention, never a surprise tp_sync.
    optional = [n for n in OPTIONAL_KEYWORDS if n in by_keyword or (takes_any and n != "tp_sync")]
    keywords = tuple(n for n in REQUIRED_KEYWORDS if n in by_keyword or takes_any) + tuple(optional)
    return mismatches, keywords


_BINDINGS: dict[type[Any], ConstructorBinding] = {}  # one reading of each class's signature


def bind_constructor(sampler_class: type[DraftSampler], *, spec: str = "") -> ConstructorBinding:
    """Read the class's constructor once; raise one ``ImplementationError`` listing every
    mismatch, or return what to pass it."""
    if sampler_class in _BINDINGS:
        return _BINDINGS[sampler_class]
    label = spec or getattr(sampler_class, "__qualname__", repr(sampler_class))
    if not inspect.isclass(sampler_class):
        raise ImplementationError(f"{label}: {sampler_class!r} is not a class")
    mismatches = _method_mismatches(sampler_class)
    parameters = _parameters(sampler_class)
    keywords: tuple[str, ...] = ()
    if isinstance(parameters, str):
        mismatches.append(f"constructor: {parameters}")
    else:
        constructor_mismatches, keywords = _constructor_mismatches(parameters)
        mismatches.extend(constructor_mismatches)
    if mismatches:  # every mismatch at once, on one line, so one fix round suffices
        raise ImplementationError(f"{label}: {'; '.join(mismatches)}\n  expected {EXPECTED_FORM}")
    binding = ConstructorBinding(
        sampler_class=sampler_class,
        keywords=keywords,
        fused_greedy_from_env="fused_greedy" not in keywords,
    )
    _BINDINGS[sampler_class] = binding
    return binding


@contextmanager
def environment_variable(name: str, value: str) -> Iterator[None]:
    """Set one environment variable around a block (a constructor that reads it); restore."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            del os.environ[name]
        else:
            os.environ[name] = previous


def fused_greedy_environment(enabled: bool) -> AbstractContextManager[None]:
    """Set the server's fused-greedy switch for a constructor that reads it; restore."""
    return environment_variable(FUSED_GREEDY_ENV, "1" if enabled else "0")  # the server's values


def construct_sampler(
    binding: ConstructorBinding,
    *,
    model: Any,
    gamma: int,
    max_bs: int,
    device: torch.device,
    confidence_fn: Any = None,
    folded_sampling: bool = True,
    fused_greedy: bool = False,
    out: torch.Tensor | None = None,
) -> DraftSampler:
    """A sampler built from the harness's arguments, in the class's own convention."""
    offered: dict[str, Any] = {
        "model": model,
        "gamma": gamma,
        "max_bs": max_bs,
        "device": device,
        "confidence_fn": confidence_fn,
        "out": out,
        "folded_sampling": folded_sampling,
        "fused_greedy": fused_greedy,
        "tp_sync": IdentityTpSync(),
    }
    kwargs = {name: offered[name] for name in binding.keywords}
    if not binding.fused_greedy_from_env:
        return binding.sampler_class(**kwargs)
    with fused_greedy_environment(fused_greedy):
        return binding.sampler_class(**kwargs)
