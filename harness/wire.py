"""The wire: how a task's answer crosses a process line as plain data.

An answer is written with ``torch.save`` and read with ``torch.load(...,
weights_only=True)``: plain tensors, numbers, strings, bytes, tuples, lists, sets, dicts,
dtypes and devices, and the harness's own result types that the modules owning tasks
declare with ``answer_types`` (dataclasses and enums, rebuilt from their fields without
running any of their code). Anything else a worker sends, a tensor subclass or any other
class or function, is refused by the reader: nothing a worker sends runs code in the
reader. The writer refuses a tensor subclass too, so the worker can say so.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch

_ANSWER_TYPES: dict[str, type] = {}


class WireError(ValueError):
    """A value that cannot cross as plain data."""


def answer_types(*classes: type) -> None:
    """Declare result types (dataclasses, enums) that may cross in an answer."""
    for cls in classes:
        _ANSWER_TYPES[f"{cls.__module__}.{cls.__qualname__}"] = cls


class _PlainTensorPickler(pickle.Pickler):
    """Refuses a tensor whose type is not exactly ``torch.Tensor``: a subclass decides what
    its own comparisons say."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and type(obj) is not torch.Tensor:
            raise WireError(
                f"a result tensor is a {type(obj).__module__}.{type(obj).__qualname__}, "
                "not a plain torch.Tensor"
            )
        return NotImplemented


class _PlainPickle:
    """What ``torch.save`` takes as its ``pickle_module``: the pickler above."""

    Pickler = _PlainTensorPickler


def write_answer(value: Any) -> bytes:
    """``value`` as bytes ``read_answer`` takes; ``WireError`` for a tensor subclass."""
    buffer = io.BytesIO()
    torch.save(value, buffer, pickle_module=_PlainPickle)
    return buffer.getvalue()


def read_answer(data: bytes) -> Any:
    """The value ``write_answer`` wrote, tensors as plain ``torch.Tensor`` on the device
    they were written from; ``WireError`` for anything that may not cross."""
    try:
        with torch.serialization.safe_globals(list(_ANSWER_TYPES.values())):
            return torch.load(io.BytesIO(data), weights_only=True)
    except pickle.UnpicklingError as error:
        raise WireError(f"the answer holds what may not cross: {_reason(error)}") from None
    except (RuntimeError, ValueError, TypeError, KeyError, EOFError, AttributeError) as error:
        raise WireError(f"the answer cannot be read: {type(error).__name__}: {error}") from None


def _reason(error: pickle.UnpicklingError) -> str:
    """The restricted loader's own reason, without its advice on loading it anyway."""
    for line in str(error).splitlines():
        if "WeightsUnpickler error:" in line:
            return line.split("WeightsUnpickler error:", 1)[1].split(". ")[0].strip()
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
