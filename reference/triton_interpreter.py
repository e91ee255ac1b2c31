"""Triton's interpreter on a machine without CUDA.

Triton reads ``TRITON_INTERPRET`` once, when it is first imported (``tl.max`` and the
other language functions are ``@jit``'d then), and a kernel launch reads it again; a
kernel defined under the interpreter runs on CPU tensors (slowly; keep shapes small).
Importing a module of ``reference`` changes nothing in the process environment: a caller
that is about to run a kernel without CUDA calls ``use_interpreter_without_cuda()``
before Triton is first imported. ``reference.step_samplers.exponential_race`` does so
before it imports the kernel module, and the test suite sets the variable in
``tests/conftest.py`` before anything imports Triton.
"""

from __future__ import annotations

import os

import torch

INTERPRET_VARIABLE = "TRITON_INTERPRET"


def use_interpreter_without_cuda() -> None:
    """Without CUDA, set ``TRITON_INTERPRET=1`` for the process, and keep it: the kernels
    defined after Triton's first import are interpreted, and their launches re-read it.
    With CUDA, nothing: the kernels compile."""
    if not torch.cuda.is_available():
        os.environ[INTERPRET_VARIABLE] = "1"
