"""A vLLM release's two laws of a request, each run from its package, held against each other.

Speculative decoding is lossless when a request's committed tokens follow the law its
own server samples from without speculation (docs/sampling-params.md). vLLM's verifier
(``RejectionSampler._verify``, ``spec_decode/rejection_sampler.py``) hands
``rejection_sample`` the target logits its sampler's ``apply_sampling_params`` returns,
for every batch; its non-speculative sampler (``Sampler.sample``) draws from the logits
that the same sampler's ``apply_sampling_params(skip_top_k_top_p=True)`` and then
``apply_top_k_top_p`` return, which ``sample`` returns beside its tokens. ``compare_laws``
holds the two against each other on every row of each batch of the parameter grid,
both run by the release's own ``Sampler`` class, imported from the release's files
(``use_release`` put them first on ``sys.path``):

- a batch is staged as the server stages it: each request through the release's own
  ``SamplingParams`` and ``Sampler.add_request`` (its ``SamplingStates``: the top-k of
  none as the vocabulary size, a greedy request at temperature 0) and
  ``apply_staged_writes``; one logits row a request for its sampler, two for its verify
  (an anchor and a draft, ``expanded_idx_mapping`` as the verify lays them out);
- a row's law is ``softmax`` of the logits it samples from, or, on a greedy row, the
  argmax of them, which both its sampler and ``rejection_sample`` commit.

What stands in, and why (nothing of the law):

- the pinned allocation of the buffer that ``SamplingStates`` keeps each parameter in
  (``UvaBuffer``, under its ``UvaBackedTensor``): host memory whose device view is the
  memory itself, since a CPU has no pinned allocator
  (``harness.upstream.loaders.vllm_host``);
- the sampler's other states (logit bias, penalties, bad words, the thinking budget,
  logprob token ids; from 0.31 its logits processors) are states no request of the
  batch uses (``Unused``), which is what the grid's requests are;
- the choice of top-k/top-p implementation: the package's torch path
  (``apply_top_k_top_p_pytorch``) runs, the one its own code takes where Triton is
  absent; its Triton kernel (``topk_topp_triton.py``, what a CUDA server runs) does not
  run under Triton's interpreter. Both laws call the same ``apply_top_k_top_p``, and
  the row says what ran.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.upstream.law_comparison import (
    LawComparison,
    ParameterSet,
    SetComparison,
    compare_rows,
)
from harness.upstream.loaders.interpreter_libdevice import libdevice_bodies
from harness.upstream.loaders.vllm_host import host_memory, stood_in
from harness.upstream.loaders.vllm_loader import environment_kept
from harness.upstream.loaders.wheel_functions import UnresolvedName
from harness.upstream.releases.era_parts import ServerLaws

SAMPLER_MODULE = "vllm.v1.worker.gpu.sample.sampler"
STATES_MODULE = "vllm.v1.worker.gpu.sample.states"
TOP_K_TOP_P_MODULE = "vllm.v1.sample.ops.topk_topp_sampler"
TRITON_NOT_RUN = (
    "its Triton top-k/top-p kernel (vllm/v1/sample/ops/topk_topp_triton.py, what a CUDA "
    "server runs): not run (Triton's interpreter cannot run it); the package's torch path "
    "(apply_top_k_top_p_pytorch), which its sampler and its verify both call here, is"
)
STAGING = ("add_request", "apply_staged_writes")  # how its server stages a request
VERIFY_ROWS = 2  # logits rows a request in the verify's batch: its anchor and one draft


class Unused:
    """A state of the sampler that no request of the batch uses: each of its methods
    does nothing and answers False, each of its per-request arrays is zeros."""

    def __init__(self, rows: int) -> None:
        self._rows = rows

    def __getattr__(self, name: str) -> Unused:
        return Unused(self._rows)

    def __bool__(self) -> bool:
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> bool:
        return False

    def __getitem__(self, index: Any) -> Any:
        return np.zeros(self._rows, dtype=bool)[index]

    @property
    def np(self) -> np.ndarray:
        return np.zeros(self._rows, dtype=np.int64)


def compare_laws(
    laws: ServerLaws, *, root: Path, sets: Sequence[ParameterSet], logits: torch.Tensor
) -> LawComparison:
    """Each of ``sets`` alone, then all mixed, each on every row of ``logits`` ``[n, V]``
    (one context a row): the release's verify target against its sampler's law, both
    run by its own ``Sampler`` from the files under ``root``. ``UnresolvedName`` where the
    ``vllm`` this process imports is not the release's (one line)."""
    with environment_kept():  # importing vLLM writes defaults into os.environ
        return _compare_laws(laws, root=root, sets=sets, logits=logits)


def _compare_laws(
    laws: ServerLaws, *, root: Path, sets: Sequence[ParameterSet], logits: torch.Tensor
) -> LawComparison:
    sampler_class = _release_class(laws.sampler, root=root)
    if sampler_class is not _release_class(laws.verify_target, root=root):
        raise UnresolvedName(f"{laws.sampler} and {laws.verify_target}: not one class")
    logits = logits.to(torch.float32)
    contexts, vocab = logits.shape
    compared: list[SetComparison] = []
    for batch, members in [*(("alone", (s,)) for s in sets), ("mixed", tuple(sets))]:
        rows = [s for s in members for _ in range(contexts)]
        with cpu_answers():
            sampler = _staged(*release_sampler(len(rows), vocab, of=sampler_class), rows)
            batch_logits = logits.repeat(len(members), 1)
            greedy = torch.tensor([s.greedy for s in rows])
            _, sampled_from = _call(
                sampler.sample, logits=batch_logits, per_request=1, return_logprobs=False
            )
            verified = _call(
                sampler.apply_sampling_params,
                logits=batch_logits.repeat_interleave(VERIFY_ROWS, dim=0),
                per_request=VERIFY_ROWS,
            )
        # each verify row beside its request's law
        server = _law(sampled_from, greedy=greedy).repeat_interleave(VERIFY_ROWS, dim=0)
        target = _law(verified, greedy=greedy.repeat_interleave(VERIFY_ROWS))
        span = contexts * VERIFY_ROWS
        for index, member in enumerate(members):
            at = slice(index * span, (index + 1) * span)
            compared.append(compare_rows(batch, member, target=target[at], server=server[at]))
    return LawComparison(laws=laws, sets=tuple(compared), notes=(TRITON_NOT_RUN,))


@dataclass(frozen=True)
class Request:
    """One request's parameters as the grid names them (``ParameterSet``'s fields)."""

    temperature: float
    top_k: int = 0  # 0: none
    top_p: float = 1.0
    min_p: float = 0.0
    greedy: bool = False

    @property
    def label(self) -> str:
        return repr(self)

    @classmethod
    def of(cls, group: ParameterSet) -> Request:
        """A grid group's request."""
        return cls(group.temperature, group.top_k, group.top_p, group.min_p, group.greedy)


def processed_logits(logits: torch.Tensor, *, requests: Sequence[Request]) -> torch.Tensor:
    """``[len(requests), n, V]`` float32: what the release's ``apply_sampling_params``
    (``Sampler``, from the ``vllm`` this process imports) returns for each row of
    ``logits`` ``[n, V]`` under each request, each request staged as its server stages it
    (``compare_laws``): the target logits its verify hands ``rejection_sample``. A row's
    result depends on its logits and its request alone, so a verifier reads a Markov
    target's rows from this table."""
    return _each_request(logits, requests=requests, method="apply_sampling_params")


def sampler_law(logits: torch.Tensor, *, requests: Sequence[Request]) -> torch.Tensor:
    """``[len(requests), n, V]`` float32: the law the release's non-speculative sampler
    (``Sampler.sample``) draws each row of ``logits`` ``[n, V]`` from under each request,
    a distribution a row (the argmax on a greedy request's rows): vLLM's own law of a
    request, which the statistical oracle judges its verifier's rows against."""
    sampled_from = _each_request(logits, requests=requests, method="sample")
    greedy = torch.tensor([r.greedy for r in requests]).view(-1, 1)
    law = _law(sampled_from.flatten(0, 1), greedy=greedy.expand(sampled_from.shape[:2]).flatten())
    return law.view_as(sampled_from)


def _each_request(
    logits: torch.Tensor, *, requests: Sequence[Request], method: str
) -> torch.Tensor:
    """The logits the release's ``Sampler.<method>`` gives for every row of ``logits``
    under each request: ``[len(requests), n, V]``."""
    rows, vocab = logits.shape
    extra = {"return_logprobs": False} if method == "sample" else {}
    with cpu_answers():
        sampler = _staged(*release_sampler(len(requests), vocab), requests)
        given = _call(
            getattr(sampler, method),
            logits=logits.to(torch.float32).repeat(len(requests), 1),
            per_request=rows,
            **extra,
        )
    processed = given[1] if method == "sample" else given  # sample: (tokens, its logits)
    return processed.reshape(len(requests), rows, vocab)


def _release_class(qualified: str, *, root: Path) -> Any:
    """The class of ``module.Class.method``, imported; it must come from ``root`` and
    have the method and the staging methods (``STAGING``)."""
    module_name, class_name, method = qualified.rsplit(".", 2)
    try:
        module = importlib.import_module(module_name)
    except (ImportError, SyntaxError) as error:  # absent, or a damaged or truncated file
        raise UnresolvedName(f"{module_name}: cannot be imported here ({error})") from error
    where = Path(module.__file__ or "")
    if not where.is_relative_to(root):
        raise UnresolvedName(f"{module_name} is imported from {where}, not from {root}")
    found = getattr(module, class_name, None)
    missing = [m for m in (method, *STAGING) if not hasattr(found, m)]
    if missing:
        raise UnresolvedName(f"{module_name}.{class_name} has no {', '.join(missing)} ({where})")
    return found


@contextmanager
def cpu_answers() -> Iterator[None]:
    """The release's buffers and top-k/top-p choice as a CPU answers them (the module
    docstring says why), put back as they were when the block ends."""
    top_k_top_p = importlib.import_module(TOP_K_TOP_P_MODULE)
    # its pinned buffers on host memory; its sampler's Gumbel kernel, interpreted
    with stood_in([(top_k_top_p, "HAS_TRITON", False)]), host_memory(), libdevice_bodies():
        yield


def release_sampler(slots: int, vocab: int, *, of: Any = None) -> tuple[Any, Callable[..., Any]]:
    """The release's ``Sampler`` (``of``, or the one the ``vllm`` this process imports
    has) with ``slots`` empty slots of a ``vocab``-token vocabulary, each to be staged by
    its own ``add_request`` and ``apply_staged_writes``, and the release's
    ``SamplingParams``; built under ``cpu_answers()``."""
    with environment_kept():  # importing vLLM writes defaults into os.environ
        sampler_class = of or importlib.import_module(SAMPLER_MODULE).Sampler
        params = importlib.import_module("vllm.sampling_params").SamplingParams
        states_class = importlib.import_module(STATES_MODULE).SamplingStates
    sampler = sampler_class.__new__(sampler_class)  # its __init__ builds a model runner's states
    unused = Unused(slots)
    for name in (
        "logit_bias_state",
        "penalties_state",
        "bad_words_state",
        "thinking_budget_state",
        "logprob_token_ids_state",
    ):
        setattr(sampler, name, unused)
    sampler.sampling_states = states_class(slots, vocab)
    sampler.needs_logits_processing = np.zeros(slots, dtype=bool)
    sampler.may_mask_logits = np.zeros(slots, dtype=bool)  # 0.34 on
    sampler.logits_processors = []
    sampler.trace_replay_state = None
    sampler.use_flashinfer = sampler.use_xpu_sampler = sampler.use_fp64_gumbel = False
    sampler.logprobs_mode = "raw_logprobs"
    return sampler, params


def _staged(sampler: Any, params: Callable[..., Any], rows: Sequence[ParameterSet]) -> Any:
    """``sampler`` with row ``i`` staged in slot ``i`` as its server stages a request
    (``params``: the release's ``SamplingParams``)."""
    for slot, row in enumerate(rows):
        call_with(
            sampler.add_request, req_idx=slot, prompt_len=1, sampling_params=_params(row, params)
        )
    sampler.apply_staged_writes()
    return sampler


def _params(row: ParameterSet, params: Callable[..., Any]) -> Any:
    """The release's ``SamplingParams`` of a grid row (its own defaults for what is off)."""
    if row.greedy:
        return params(temperature=0.0)
    top_k = {"top_k": row.top_k} if row.top_k else {}
    return params(temperature=row.temperature, top_p=row.top_p, min_p=row.min_p, **top_k)


def _call(
    method: Callable[..., Any], *, logits: torch.Tensor, per_request: int, **extra: Any
) -> Any:
    """``method`` on ``logits`` laid out ``per_request`` rows a request, request ``i`` in
    slot ``i``, each keyword the release's signature takes."""
    requests = logits.shape[0] // per_request
    slots = torch.arange(requests, dtype=torch.int32)
    return call_with(
        method,
        logits=logits.clone(),
        expanded_idx_mapping=slots.repeat_interleave(per_request),
        idx_mapping=slots,
        idx_mapping_np=slots.numpy().astype(np.int64),
        pos=torch.zeros(logits.shape[0], dtype=torch.int64),
        input_ids=torch.zeros(logits.shape[0], dtype=torch.int64),
        expanded_local_pos=torch.arange(per_request, dtype=torch.int32).repeat(requests),
        seq_lens_upper_bound_np=np.ones(requests, dtype=np.int32),
        **extra,
    )


def call_with(method: Callable[..., Any], **keywords: Any) -> Any:
    """``method`` with the keywords its signature names (the eras differ in which)."""
    names = inspect.signature(method).parameters
    missing = [n for n, p in names.items() if p.default is p.empty and n not in keywords]
    if missing:
        raise UnresolvedName(f"{method.__qualname__} asks for {', '.join(missing)}")
    return method(**{name: value for name, value in keywords.items() if name in names})


def _law(logits: torch.Tensor, *, greedy: torch.Tensor) -> torch.Tensor:
    """``[rows, V]``: what a row samples from its logits: ``softmax``, or on a greedy row
    its argmax."""
    logits = logits.float()
    argmax = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    return torch.where(greedy.unsqueeze(-1), argmax, torch.softmax(logits, dim=-1))


__all__ = [
    "Request",
    "Unused",
    "call_with",
    "compare_laws",
    "cpu_answers",
    "processed_logits",
    "release_sampler",
    "sampler_law",
]
