"""sglang 0.5.16's DSpark draft sampling, driven from the wheel's own file as its server
drives it (docs/releases.md, "sglang 0.5.16").

0.5.16 keeps its draft sampling in ``dspark_components/dspark_draft.py`` and splits it
in two, by batch, in the proposer (``DraftBlockProposer.propose``):

- a batch of greedy requests only (``sampling_info.is_all_greedy``), when the draft
  graph runs: the graph-folded ``DsparkDraftSampler(*, model, gamma, max_bs, device,
  confidence_fn=None, out=None)``, whose call walks the Markov head with an argmax
  step and writes ``out[: bs*gamma]`` and ``confidence_out``; it keeps no step logits;
- any other batch: the module function ``sample_draft_block`` (eager), on the drafter's
  base logits, which walks the same head with ``SampleStepTokens`` on fresh
  ``exponential_`` noise (``SGLANG_DSPARK_FAST_SAMPLING``, on by default) and returns
  the tokens, the kept step logits (``corrected_logits``), the greedy mask and the
  clamped temperatures; nothing is written into the sampler's buffers, and the
  request's confidence is the worker's planner's, from the tap.

``Sglang0516Convention`` builds the wheel's class as the worker does and
``Sglang0516Sampler`` makes each call the way ``propose`` does: the folded sampler for
an all-greedy batch, the wheel's ``sample_draft_block`` otherwise, both the wheel's code
unchanged. The class comes from the wheel through the sglang loader
(``harness.upstream.sglang_wheel``) with the wheel's own ``SampleStepTokens``,
environment flags and Markov heads (``WheelDrafter``); the file's worker-side imports
(``ScheduleBatch``, ``ForwardBatch``, the planner's ``VerifyWindow`` ...), used only by
the proposer's forward pass, which the harness replaces with its case's hidden states,
are the loader's stand-ins. A wheel that ships the file alone (the tests' own) loads it
with ``load_sampler_class``: the bug era's surface (``harness.plugins.sglang_surface``,
the reference's exponential race and heads) plus the worker's names as stand-ins that
raise if anything calls them (``WORKER_SURFACE``).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.conventions import (
    BuiltSampler,
    CallOutputs,
    Convention,
    poison,
    read_confidence,
    read_tensor,
    read_tokens,
    rows_written,
)
from harness.plugins.sglang_surface import SURFACE, harness_import_surface
from harness.plugins.walks import HeadCounts
from harness.upstream.sglang_wheel import (
    DRAFT,
    WheelDrafter,
    from_wheel,
    observe_wheel_head,
)
from reference.verifier import DraftBlock

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs
    from reference.sampling_params import SamplingInfo

MODULE_NAME = "dspark_release_sglang_0_5_16"  # the name the wheel's file is loaded under
SAMPLER_FILE = "sglang/srt/speculative/dspark_components/dspark_draft.py"
CLASS_NAME = "DsparkDraftSampler"


class WorkerOnly:
    """A name of 0.5.16's worker that the draft sampling never uses: any use raises."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"sglang 0.5.16's {self.name} is the worker's, outside its sampling")

    def __getattr__(self, attribute: str) -> Any:
        raise RuntimeError(
            f"sglang 0.5.16's {self.name}.{attribute} is the worker's, outside its sampling"
        )


def _worker(*names: str) -> dict[str, Any]:
    return {name: WorkerOnly(name) for name in names}


# The module-level imports of 0.5.16's dspark_draft.py beyond the bug era's surface.
WORKER_SURFACE: dict[str, dict[str, Any]] = {
    "sglang.srt.managers.schedule_batch": _worker("ScheduleBatch"),
    "sglang.srt.model_executor.forward_batch_info": _worker(
        "CaptureHiddenMode", "ForwardBatch", "ForwardMode"
    ),
    "sglang.srt.runtime_context": _worker("get_parallel"),
    "sglang.srt.speculative.dflash_info_v2": _worker("DFlashDraftInputV2"),
    "sglang.srt.speculative.draft_worker_common": _worker("make_draft_input_v2"),
    "sglang.srt.speculative.dspark_components.dspark_planner": _worker("VerifyWindow"),
    "sglang.srt.speculative.dspark_components.kernels.dspark_draft_model": {
        "SampleStepTokens": SURFACE["sglang.kernels.ops.speculative.dspark.dspark_draft_model"][
            "SampleStepTokens"
        ]
    },
    "sglang.srt.speculative.spec_info": _worker(
        "SpeculativeAlgorithm", "spec_scale_global_num_tokens"
    ),
    "sglang.srt.speculative.spec_utils": _worker("draft_tp_context"),
}


@contextmanager
def _surface_0_5_16() -> Iterator[None]:
    """The bug era's surface plus the worker's names, while the file loads."""
    with harness_import_surface():
        for full_name, names in WORKER_SURFACE.items():
            parts = full_name.split(".")
            for depth in range(1, len(parts) + 1):
                name = ".".join(parts[:depth])
                if name not in sys.modules:
                    module = types.ModuleType(name, "supplied by the harness (releases)")
                    module.__path__ = []
                    sys.modules[name] = module
                    if depth > 1:
                        setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], module)
            vars(sys.modules[full_name]).update(names)
        yield


def load_sampler_class(path: Path) -> type[Any]:
    """The wheel's ``DsparkDraftSampler``, its file run unchanged under the surface."""
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    with _surface_0_5_16():
        spec.loader.exec_module(module)
    sampler_class: type[Any] = getattr(module, CLASS_NAME)
    return sampler_class


def speaks_sglang_0_5_16(sampler_class: type[Any]) -> bool:
    """Whether the class is 0.5.16's sampler loaded from its wheel (or a subclass), by
    the sglang loader or under the surface."""
    return from_wheel(sampler_class, DRAFT) or from_wheel(sampler_class, MODULE_NAME)


@dataclass(frozen=True)
class ServerSamplingInfo:
    """What 0.5.16 reads of the server's batch sampling state: a greedy request is sent
    as ``T = 1, top_k = 1``; ``is_all_greedy`` when every request's ``top_k <= 1``."""

    temperatures: torch.Tensor
    top_ks: torch.Tensor
    is_all_greedy: bool


def server_batch(sampling_info: SamplingInfo | None) -> ServerSamplingInfo | None:
    if sampling_info is None:
        return None
    greedy = sampling_info.top_ks <= 1
    return ServerSamplingInfo(
        temperatures=torch.where(
            greedy, torch.ones_like(sampling_info.temperatures), sampling_info.temperatures
        ),
        top_ks=sampling_info.top_ks,
        is_all_greedy=bool(greedy.all()),
    )


@dataclass(frozen=True)
class _Call:
    """The last call's block as the proposer holds it (``folded``: the sampler's)."""

    tokens: torch.Tensor  # [bs, gamma]
    step_logits: torch.Tensor | None  # eager: the kept step logits; folded: none
    temperatures: torch.Tensor
    greedy_mask: torch.Tensor
    folded: bool


class Sglang0516Sampler(BuiltSampler):
    """The wheel's folded sampler and its module's eager ``sample_draft_block``, called
    per batch as 0.5.16's proposer calls them."""

    convention = "sglang-0.5.16"

    def __init__(self, *, sampler: Any, model: Any, server_out: torch.Tensor | None) -> None:
        self.sampler = sampler
        self.model = model
        self.server_out = server_out
        # the wheel's module: where its eager path and its greedy mask rule live
        self.module: dict[str, Any] = type(sampler).__call__.__globals__
        self._batch: ServerSamplingInfo | None = None
        self._last: _Call | None = None

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        """0.5.16's sampler stages nothing: the server hands each call the batch's
        sampling state."""
        del bs
        self._batch = server_batch(sampling_info)

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        gamma, batch = self.gamma, self._batch
        bs = hidden_states.shape[0] // gamma
        device = hidden_states.device
        greedy_mask = self.module["resolve_greedy_mask"](bs=bs, sampling_info=batch, device=device)
        if batch is None or batch.is_all_greedy:  # the graph-folded greedy sampler
            self.sampler(hidden_states, input_ids)
            temperatures = (
                torch.ones(bs, dtype=torch.float32, device=device)
                if batch is None
                else batch.temperatures.view(-1).to(torch.float32).clamp_min(1e-5)
            )
            tokens = self.token_buffer()
            assert tokens is not None
            self._last = _Call(
                tokens[: bs * gamma].view(bs, gamma), None, temperatures, greedy_mask, True
            )
            return
        base_logits, _ = self.model.compute_base_logits(hidden_states)
        block = self.module["sample_draft_block"](
            base_logits=base_logits.view(bs, gamma, -1),
            anchor_tokens=input_ids.view(bs, gamma)[:, 0],
            draft_hidden=hidden_states.view(bs, gamma, -1),
            sampling_info=batch,
            markov_head=self.model.markov_head,
            device=device,
        )
        self._last = _Call(
            block.draft_tokens,
            block.corrected_logits,
            block.temperatures,
            block.greedy_mask,
            False,
        )

    def observe_walks(self) -> AbstractContextManager[HeadCounts]:
        return observe_wheel_head(self.model.markov_head)

    def _called(self) -> _Call:
        if self._last is None:
            raise RuntimeError("no call yet")
        return self._last

    def last_call_kept_logits(self) -> bool:
        """Whether the last call kept step logits: a folded greedy call keeps none
        (``harness.oracles.percall`` holds such a call to its token ids alone)."""
        return not self._called().folded

    def draft_block(self, rows: int) -> DraftBlock:
        """The block the verifier reads: an eager call's kept step logits; a folded
        call keeps none, its greedy draft's law is the point mass at each token."""
        call = self._called()
        tokens = call.tokens[:rows]
        if call.step_logits is not None:
            step_logits = call.step_logits[:rows]
        else:
            vocab = int(self.model.lm_head.weight.shape[0])
            step_logits = torch.full(
                (*tokens.shape, vocab), float("-inf"), dtype=torch.float32, device=tokens.device
            ).scatter_(-1, tokens.unsqueeze(-1), 0.0)
        return DraftBlock(
            tokens=tokens,
            step_logits=step_logits,
            temperatures=call.temperatures[:rows],
            greedy_mask=call.greedy_mask[:rows],
        )

    def _buffers(self) -> dict[str, torch.Tensor | None]:
        return {
            "out": self.token_buffer(),
            "confidence_out": read_tensor(self.sampler, "confidence_out"),
        }

    def poison(self) -> None:
        self._last = None
        for buffer in self._buffers().values():
            poison(buffer)

    def read(self, case: Case) -> CallOutputs:
        call = self._called()
        if call.folded:
            tokens = read_tokens(self.token_buffer(), case)
            confidence = read_confidence(read_tensor(self.sampler, "confidence_out"), case)
        else:
            tokens = call.tokens[: case.bs].clone()
            confidence = None  # the worker's planner computes it (outside_contract)
        step_logits = None if call.step_logits is None else call.step_logits[: case.bs].clone()
        return CallOutputs(
            tokens=tokens,
            step_logits=step_logits,
            confidence=confidence,
            staged=None,  # the reference's rule: greedy where top_k <= 1, clamped T
            noise_counter=None,
            counter_replay=None,
            keeps_step_logits=self.last_call_kept_logits(),  # the folded greedy sampler keeps none
        )

    def outside_writes(self, case: Case) -> dict[str, int]:
        live = {"out": case.bs * case.gamma, "confidence_out": case.bs}
        written = {
            name: rows_written(buffer, live=live[name]) for name, buffer in self._buffers().items()
        }
        return {name: count for name, count in written.items() if count}


class Sglang0516Convention(Convention):
    """Builds the wheel's sampler as 0.5.16's worker does (``maybe_build_draft_sampler``:
    the server's ``out=`` token buffer, the planner's confidence function)."""

    name = "sglang-0.5.16"

    def takes_out(self, sampler_class: type[Any]) -> bool:
        return True

    def outside_contract(self, case: Case, *, sampler_class: type[Any]) -> str | None:
        del sampler_class
        if not case.sample_from_anchor:
            return "sglang 0.5.16 knows the anchor layout only (gamma query rows a request)"
        if not case.folded_sampling:
            return (
                "sglang 0.5.16 has no folded-sampling switch: its proposer folds an "
                "all-greedy batch and samples any other batch eagerly, so a greedy-only "
                "fold of every batch (folded sampling off) is not its contract"
            )
        if case.confidence and not all(case.greedy_rows):
            return (
                "sglang 0.5.16 leaves a sampled batch's confidence to the worker's planner "
                "(outside its draft sampling)"
            )
        return None

    def build(
        self,
        sampler_class: type[Any],
        *,
        case: Case,
        inputs: CaseInputs,
        model: torch.nn.Module | None = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        drafter: Any = inputs.model if model is None else model
        if from_wheel(sampler_class, DRAFT):  # the wheel's own heads (else the surface's)
            drafter = WheelDrafter(drafter)
        sampler = sampler_class(
            model=drafter,
            gamma=case.gamma,
            max_bs=case.max_bs,
            device=torch.device(case.device),
            confidence_fn=inputs.confidence_fn,
            out=out,
        )
        return Sglang0516Sampler(sampler=sampler, model=drafter, server_out=out)


SGLANG_0_5_16 = Sglang0516Convention()
