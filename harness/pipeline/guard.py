"""Pristine inputs and global state around each implementation.

An implementation shares the case's inputs (hidden states, ids, model parameters,
sampling parameters) and the process's global state with every implementation that
runs after it. This module owns the two guards that keep one from changing
another's verdict: a digest of every shared input tensor taken before and after a
run (a difference is that implementation's failure, and the caller rebuilds the
inputs), and a snapshot of the global state that is compared and restored after the
run (default dtype and device, environment, thread count, deterministic flag, grad
mode, matmul precision).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from harness.pipeline.case import CaseInputs


def _tensor_bytes_digest(tensor: torch.Tensor) -> str:
    data = tensor.detach()
    if data.is_inference():  # inference tensors cannot be viewed as bytes in place
        data = data.clone()
    data = data.cpu().contiguous().reshape(-1)  # 1-d: a 0-d tensor has no byte view
    raw = data.to(torch.uint8) if data.dtype == torch.bool else data.view(torch.uint8)
    digest = hashlib.sha1(f"{tensor.dtype}:{tuple(tensor.shape)}:".encode(), usedforsecurity=False)
    digest.update(raw.numpy().data)  # the buffer itself, no copy; sha1: fastest stdlib hash
    return digest.hexdigest()


def named_input_tensors(inputs: CaseInputs) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor an implementation is handed or can reach, with a readable name."""
    yield "hidden_states", inputs.hidden_states
    yield "input_ids", inputs.input_ids
    for name, tensor in inputs.model.state_dict(keep_vars=True).items():
        yield f"model.{name}", tensor
    for name, value in sorted(vars(inputs.sampling_info).items()):
        if isinstance(value, torch.Tensor):
            yield f"sampling_info.{name}", value
    if inputs.confidence_fn is not None:
        for name, tensor in inputs.confidence_fn.state_dict(keep_vars=True).items():
            yield f"confidence_fn.{name}", tensor


def input_digests(inputs: CaseInputs) -> dict[str, str]:
    """A digest (dtype, shape and bytes) of every shared input tensor, by name."""
    return {name: _tensor_bytes_digest(tensor) for name, tensor in named_input_tensors(inputs)}


def changed_inputs(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Names of inputs whose digest changed, appeared or disappeared, sorted."""
    return sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))


@dataclass(frozen=True)
class GlobalState:
    """The process-wide settings an implementation could change for everyone after it."""

    default_dtype: torch.dtype
    default_device: torch.device
    environment: tuple[tuple[str, str], ...]
    threads: int
    deterministic: bool
    deterministic_warn_only: bool
    grad_enabled: bool
    matmul_precision: str
    working_directory: str

    @classmethod
    def capture(cls) -> GlobalState:
        return cls(
            default_dtype=torch.get_default_dtype(),
            default_device=torch.get_default_device(),
            environment=tuple(sorted(os.environ.items())),
            threads=torch.get_num_threads(),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
            grad_enabled=torch.is_grad_enabled(),
            matmul_precision=torch.get_float32_matmul_precision(),
            working_directory=os.getcwd(),
        )

    def differences(self, now: GlobalState) -> list[str]:
        """What changed from ``self`` to ``now``, one readable line per setting."""
        changes = []
        for label, before, after in (
            ("default dtype", self.default_dtype, now.default_dtype),
            ("default device", self.default_device, now.default_device),
            ("thread count", self.threads, now.threads),
            ("deterministic algorithms", self.deterministic, now.deterministic),
            ("deterministic warn_only", self.deterministic_warn_only, now.deterministic_warn_only),
            ("grad mode", self.grad_enabled, now.grad_enabled),
            ("float32 matmul precision", self.matmul_precision, now.matmul_precision),
            ("working directory", self.working_directory, now.working_directory),
        ):
            if before != after:
                changes.append(f"{label} {before} -> {after}")
        old, new = dict(self.environment), dict(now.environment)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if changed:
            changes.append("environment " + ", ".join(changed))
        return changes

    def restore(self) -> None:
        """Put back every setting that differs from the capture (and only those)."""
        now = GlobalState.capture()
        if now.default_dtype != self.default_dtype:
            torch.set_default_dtype(self.default_dtype)
        if now.default_device != self.default_device:
            # None for the CPU: a CPU default needs no device context (a function mode)
            cpu = self.default_device == torch.device("cpu")
            torch.set_default_device(None if cpu else self.default_device)
        if now.environment != self.environment:
            saved = dict(self.environment)
            for key in [k for k in os.environ if k not in saved]:
                del os.environ[key]
            for key, value in saved.items():
                if os.environ.get(key) != value:
                    os.environ[key] = value
        if now.threads != self.threads:
            torch.set_num_threads(self.threads)
        if (now.deterministic, now.deterministic_warn_only) != (
            self.deterministic,
            self.deterministic_warn_only,
        ):
            torch.use_deterministic_algorithms(
                self.deterministic, warn_only=self.deterministic_warn_only
            )
        if now.grad_enabled != self.grad_enabled:
            torch.set_grad_enabled(self.grad_enabled)
        if now.matmul_precision != self.matmul_precision:
            torch.set_float32_matmul_precision(self.matmul_precision)
        if now.working_directory != self.working_directory:
            os.chdir(self.working_directory)
