"""The released sglang 0.5.23's calling convention, and the drafter it is built over.

``Sglang0523Convention.build`` constructs the package's ``DsparkDraftSampler`` as
today's server does: a ``DraftNoise`` whose Philox key is the package's
``draft_noise_key(case seed)`` and whose ``offset`` counter the harness owns, the
package's ``SpecTpSync`` over a one-rank group, ``greedy_draft`` from the case (a
greedy fold), the server's ``out=`` buffer, and ``verify_ids`` switched on
(``SGLANG_OPT_DSV41_DSPARK_MID_FOLD``, set around the construction only).

``Sglang0523Drafter`` gives it the 0.5.23 model API over the case's toy drafter:
``compute_base_logits`` (the toy lm_head, returning the hidden rows as confidence
features), ``compute_confidence`` through the package's ``DSparkConfidenceHead``,
``lm_head.org_vocab_size``, and ``markov_head``: the package's own head of the case's
kind, loaded with the reference head's weights through ``HEAD_WEIGHT_NAMES``. Every
line of math in the call is the package's; the drafter only holds the weights.

Found on CPU, worked around here only (docs/upstream.md, "Findings"):
``DsparkDraftSampler._step_logits`` calls ``torch.cuda.is_current_stream_capturing()``
on its first call, which raises ``RuntimeError: Tried to instantiate dummy base class
_cuda_isCurrentStreamCapturing`` on a CPU-only build of torch. On such a build (where
no stream can capture) the call runs with that query answering ``False``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from harness.case import TOP_K_ALL
from harness.plugins.construct import environment_variable
from harness.plugins.conventions import (
    COUNTER_SEARCH,
    BuiltSampler,
    CallOutputs,
    Convention,
    CounterReads,
    NoiseCounter,
    OutputError,
    StagedParams,
    poison,
    read_confidence,
    read_tensor,
    read_tokens,
    rows_written,
)
from harness.plugins.walks import HeadCounts
from harness.upstream.loaders.sglang_loader import LoadedSglang, load_sglang
from harness.upstream.sglang_counters import observe_counter_reads
from harness.upstream.sglang_walks import observe_package_walks
from reference import MarkovHead
from reference.sampling_params import NO_TOP_K, SamplingInfo
from reference.streams import DecodeStreams, VerifierNoise, derived_seeds, independent_streams
from reference.verifier import DraftBlock

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs

SAMPLER_MODULE = "sglang.srt.speculative.dspark_components.dspark_draft_sampler"
VERIFY_IDS_ENV = "SGLANG_OPT_DSV41_DSPARK_MID_FOLD"
# Reference head parameter -> the package's (docs/upstream.md, "The drafter").
HEAD_WEIGHT_NAMES = {
    "W1": "markov_w1",
    "W2": "markov_w2",
    "gate": "gate_proj",
    "joint": "joint_proj",
}
CPU_CAPTURE_FINDING = (
    "DsparkDraftSampler._step_logits calls torch.cuda.is_current_stream_capturing() on its "
    "first call, which raises on a CPU-only torch; the harness's adapter answers False there"
)


def package_head(head: MarkovHead, *, loaded: Any = None) -> Any:
    """The package's head of ``head``'s kind, holding copies of its weights (same dtype
    and device), renamed through ``HEAD_WEIGHT_NAMES`` (``loaded``: what holds the
    head classes, ``LoadedSglang`` or an earlier release's heads module)."""
    package = loaded or load_sglang()
    shape = {"vocab_size": head.vocab_size, "markov_rank": head.rank}
    with torch.random.fork_rng(devices=[]):  # nn layers' default init must not move the RNG
        if head.kind == "vanilla":
            built = package.VanillaMarkov(**shape)
        elif head.kind == "gated":
            built = package.GatedMarkovHead(**shape, hidden_size=head.hidden_size)
        else:
            built = package.RNNHead(**shape, hidden_size=head.hidden_size)
    weights = {}
    for name, value in head.state_dict().items():
        module, _, parameter = name.partition(".")
        weights[f"{HEAD_WEIGHT_NAMES[module]}.{parameter}"] = value.detach().clone()
    built.load_state_dict(weights, strict=True, assign=True)
    return built.requires_grad_(False)


def package_confidence_head(confidence_fn: Any, *, loaded: LoadedSglang) -> Any:
    """The package's ``DSparkConfidenceHead`` holding the linear probe's weights: its
    ``proj`` over ``[hidden | W1[prev]]`` is ``[w_hidden | w_embedding]`` plus the bias."""
    head = confidence_fn.markov_head
    with torch.random.fork_rng(devices=[]):
        built = loaded.DSparkConfidenceHead(
            hidden_size=head.hidden_size, markov_rank=head.rank, with_markov=True, bias=True
        )
    weight = torch.cat([confidence_fn.w_hidden, confidence_fn.w_embedding]).unsqueeze(0)
    built.proj.weight.data = weight.detach().clone()  # [1, H + r] float32
    built.proj.bias.data = confidence_fn.bias.detach().reshape(1).clone()
    return built.to(weight.device).requires_grad_(False)


class Sglang0523Drafter:
    """The 0.5.23 model API over the case's toy drafter, with the package's own heads."""

    def __init__(self, *, model: Any, confidence_fn: Any, loaded: LoadedSglang) -> None:
        self.toy = model
        self.lm_head = model.lm_head  # .org_vocab_size: the cropped vocab
        self.sample_from_anchor = model.sample_from_anchor
        self.markov_head = package_head(model.markov_head, loaded=loaded)
        self.confidence_head = (
            None if confidence_fn is None else package_confidence_head(confidence_fn, loaded=loaded)
        )

    def compute_base_logits(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``([N, V] base logits, [N, H] confidence features)``."""
        logits, _ = self.toy.compute_base_logits(hidden)
        return logits, hidden

    def compute_confidence(
        self,
        *,
        anchor_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        confidence_features: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.confidence_head is not None  # the sampler asks only when it has one
        return self.confidence_head.predict(
            confidence_features,
            anchor_tokens=anchor_tokens,
            draft_tokens=draft_tokens,
            markov_head=self.markov_head,
        )


class OneRankGroup:
    """The tensor-parallel group of a single rank: the package's sync never broadcasts."""

    world_size = 1
    rank_in_group = 0

    def broadcast(self, values: torch.Tensor, src: int = 0) -> None:
        raise AssertionError("a one-rank group never broadcasts")


@contextmanager
def _capture_query_on_cpu_only_torch() -> Iterator[None]:
    """On a CPU-only torch, answer the CUDA capture query ``False`` (see the module doc)."""
    if torch.backends.cuda.is_built():
        yield
        return
    query = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing = query


def server_sampling_info(sampling_info: SamplingInfo | None) -> SamplingInfo | None:
    """The batch as today's server sends it (``SamplingBatchInfo``): a greedy request is
    ``T = 1``, ``top_k = 1``; no top-k (our 0) is ``TOP_K_ALL``; top-p and min-p as
    requested (docs/sampling-params.md)."""
    if sampling_info is None:
        return None
    greedy = sampling_info.greedy_mask
    temperatures = torch.where(
        greedy, torch.ones_like(sampling_info.temperatures), sampling_info.temperatures
    )
    top_ks = torch.where(
        sampling_info.top_ks == NO_TOP_K,
        torch.full_like(sampling_info.top_ks, TOP_K_ALL),
        sampling_info.top_ks,
    )
    return SamplingInfo(
        temperatures=temperatures,
        top_ks=top_ks,
        top_ps=sampling_info.top_ps,
        min_ps=sampling_info.min_ps,
    )


class Sglang0523Sampler(BuiltSampler):
    """The package's sampler, its noise counter, its drafter and its buffers."""

    convention = "sglang-0.5.23"

    def __init__(
        self,
        *,
        sampler: Any,
        model: Sglang0523Drafter,
        noise: Any,
        tp_sync: Any,
        loaded: LoadedSglang,
        server_seed: int,
        server_out: torch.Tensor | None = None,
    ) -> None:
        self.sampler = sampler
        self.server_out = server_out
        self.model = model
        self.loaded = loaded
        self.noise = noise  # the DraftNoise the harness built and owns
        self.server_seed = server_seed  # what the draft key and the rejection noise derive from
        self.tp_sync = tp_sync
        self._counter_start = self.counter()
        self._step_logits_poisoned = False
        self._requested: StagedParams | None = None  # the server's staging of the requests
        self._reads: CounterReads | None = None  # the counters the last call read

    def counter(self) -> int:
        return int(self.noise.offset.item())

    def seek_noise(self, counter: int) -> None:
        self.noise.offset.fill_(counter)

    def decode_streams(self, *, seed: int, device: torch.device) -> DecodeStreams:
        """Today's server's plumbing from its random seed: the draft noise keyed by the
        package's ``draft_noise_key(seed)`` (built with this sampler, ``build``), its
        offset advanced by the sampler from 0; the verifier's rejection noise built from
        the same seed by the package's ``make_rejection_noise`` (``BlockwiseRejection``
        does that with ``VerifierNoise.seed``); our chain verifier draws from a torch
        generator seeded with the package's ``rejection_noise_key(seed)``."""
        if seed != self.server_seed:
            raise ValueError(
                f"the sampler was built for server seed {self.server_seed}, not {seed}"
            )
        if self.loaded.rejection_noise_key is None:  # 0.5.22: no block-wise rejection yet
            return independent_streams(seed, device=device)
        verifier_key = self.loaded.rejection_noise_key(seed)
        return DecodeStreams(
            anchor_seed=derived_seeds(seed, 3)[0],
            drafter_seed=seed,  # torch's RNG: the package's draft call never reads it
            verifier=VerifierNoise(
                seed=seed, generator=torch.Generator(device).manual_seed(verifier_key)
            ),
            shared=True,
            server=f"sglang {self.loaded.version}",
        )

    def draft_block(self, rows: int) -> DraftBlock:
        gamma = self.sampler.gamma
        params = self.sampler.params
        return DraftBlock(
            tokens=self.sampler.out[: rows * gamma].view(rows, gamma),
            step_logits=self.sampler.step_logits[:rows],
            temperatures=params.temperatures[:rows],
            greedy_mask=params.greedy_mask[:rows],
        )

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        sent = server_sampling_info(sampling_info)
        # What the server means by the batch, through the package's own rule (the
        # verifier's greedy rows are these), whatever the sampler stages for itself.
        params = self.loaded.resolve_draft_params(
            sampling_info=sent, bs=bs, device=self.noise.offset.device
        )
        self._requested = StagedParams(
            temperatures=params.temperatures.clone(),
            greedy_mask=params.greedy_mask.clone(),
            step_temperatures=params.step_temperatures.clone(),
        )
        self.sampler.stage_sampling_params(bs=bs, sampling_info=sent)

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        with _capture_query_on_cpu_only_torch(), observe_counter_reads(self.loaded) as reads:
            self.sampler(hidden_states, input_ids)
        self._reads = reads.reads()

    def _buffers(self) -> dict[str, torch.Tensor | None]:
        return {
            "out": self.token_buffer(),
            "step_logits": read_tensor(self.sampler, "step_logits"),
            "confidence_out": read_tensor(self.sampler, "confidence_out"),
            "verify_ids": read_tensor(self.sampler, "verify_ids"),
        }

    def poison(self) -> None:
        buffers = self._buffers()
        for buffer in buffers.values():
            poison(buffer)
        # step_logits is sized on the first call: only a later call's tail is judged.
        self._step_logits_poisoned = buffers["step_logits"] is not None
        self._counter_start = self.counter()
        self._reads = None  # a graph replay runs no Python: its reads are not seen

    def observe_walks(self) -> AbstractContextManager[HeadCounts]:
        return observe_package_walks(self.model.markov_head, self.tp_sync)

    def read(self, case: Case) -> CallOutputs:
        tokens = read_tokens(self.token_buffer(), case)
        params = self.sampler.params
        staged = StagedParams(
            temperatures=params.temperatures[: case.bs].clone(),
            greedy_mask=params.greedy_mask[: case.bs].clone(),
            step_temperatures=params.step_temperatures[: case.bs].clone(),
        )
        counter = NoiseCounter(key=self.noise.key, start=self._counter_start, end=self.counter())
        requested = self._requested_rows(case)
        step_logits = None
        replays: dict[int, torch.Tensor] | None = None
        if case.folded_sampling:
            kept = read_tensor(self.sampler, "step_logits")
            expected = (case.gamma, case.vocab_size)
            if (
                kept is None
                or kept.dim() != 3
                or kept.shape[0] < case.bs
                or kept.shape[1:] != expected
            ):
                raise OutputError(
                    f"step_logits must be [>= bs={case.bs}, gamma={case.gamma}, "
                    f"V={case.vocab_size}] when sampling, got "
                    f"{'missing' if kept is None else tuple(kept.shape)}"
                )
            step_logits = kept[: case.bs].clone()
            replays = {
                at: self.counter_stream_tokens(step_logits, staged=requested or staged, counter=at)
                for at in searched_counters(counter, self._reads)
            }
        return CallOutputs(
            tokens=tokens,
            step_logits=step_logits,
            confidence=read_confidence(read_tensor(self.sampler, "confidence_out"), case),
            staged=staged,
            noise_counter=counter,
            counter_replay=None if replays is None else replays[counter.start],
            verify_ids=self._verify_ids(case),
            requested=requested,
            stream_replays=replays,
            counter_reads=self._reads,
            verifier_counter=None
            if self.loaded.rejection_noise_key is None
            else NoiseCounter(
                key=self.loaded.rejection_noise_key(self.server_seed), start=0, end=counter.end
            ),
        )

    def _requested_rows(self, case: Case) -> StagedParams | None:
        """The live rows of the server's staging of the requests (``None``: not staged)."""
        requested = self._requested
        if requested is None or requested.temperatures.shape[0] < case.bs:
            return None
        assert requested.step_temperatures is not None
        return StagedParams(
            temperatures=requested.temperatures[: case.bs],
            greedy_mask=requested.greedy_mask[: case.bs],
            step_temperatures=requested.step_temperatures[: case.bs],
        )

    def _verify_ids(self, case: Case) -> torch.Tensor | None:
        verify_ids = read_tensor(self.sampler, "verify_ids")
        if verify_ids is None:
            return None
        if (
            verify_ids.dim() != 2
            or verify_ids.shape[0] < case.bs
            or verify_ids.shape[1] != case.gamma + 1
        ):
            raise OutputError(
                f"verify_ids must be [>= bs={case.bs}, gamma+1={case.gamma + 1}], "
                f"got {tuple(verify_ids.shape)}"
            )
        return verify_ids[: case.bs].clone()

    def counter_stream_tokens(
        self, step_logits: torch.Tensor, *, staged: StagedParams, counter: int
    ) -> torch.Tensor:
        """``[bs, gamma]``: the token each kept step row gives under the declared stream
        (key, ``counter``, step, row, token) at the server's step temperatures, through
        the package's own ``MarkovSampleStep`` torch path with a zero bias."""
        assert staged.step_temperatures is not None
        offset = torch.tensor([counter], dtype=torch.int64, device=step_logits.device)
        steps = []
        for step in range(step_logits.shape[1]):
            logits = step_logits[:, step].contiguous()  # [bs, V], already in the step dtype
            steps.append(
                self.loaded.MarkovSampleStep.torch(
                    base_logits=logits,
                    bias=torch.zeros_like(logits),
                    temperatures=staged.step_temperatures.contiguous(),
                    key=self.noise.key,
                    offset=offset,
                    step=step,
                    step_dtype=logits.dtype,
                )
            )
        return torch.stack(steps, dim=1)

    def outside_writes(self, case: Case) -> dict[str, int]:
        live = {
            "out": case.bs * case.gamma,
            "step_logits": case.bs,
            "confidence_out": case.bs,
            "verify_ids": case.bs,
        }
        written = {}
        for name, buffer in self._buffers().items():
            if name == "step_logits" and not self._step_logits_poisoned:
                continue
            count = rows_written(buffer, live=live[name])
            if count:
                written[name] = count
        return written


def searched_counters(counter: NoiseCounter, reads: CounterReads | None) -> list[int]:
    """The counters a replay tries: the call's fresh ones (at most ``COUNTER_SEARCH``)
    and those its draws were seen to read (at most as many), in order."""
    fresh = list(counter.fresh)[:COUNTER_SEARCH]
    read = [] if reads is None else [c for c in reads.counters if c >= 0][:COUNTER_SEARCH]
    return sorted(set(fresh) | set(read))


class Sglang0523Convention(Convention):
    """Builds the package's sampler the way today's server does (module docstring)."""

    name = "sglang-0.5.23"

    def adaptations(self) -> tuple[str, ...]:
        return () if torch.backends.cuda.is_built() else (CPU_CAPTURE_FINDING,)

    def takes_out(self, sampler_class: type[Any]) -> bool:
        return True  # the server always hands the 0.5.23 sampler its out=

    def build(
        self,
        sampler_class: type[Any],
        *,
        case: Case,
        inputs: CaseInputs,
        model: Any = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        loaded = load_sglang()
        device = torch.device(case.device)
        # The drafter is the harness's model (loaded weights), not the sampler's work: its
        # heads' default initialisation is kept out of the observed construction.
        with _disable_current_modes():
            drafter = Sglang0523Drafter(
                model=inputs.model if model is None else model,
                confidence_fn=inputs.confidence_fn,
                loaded=loaded,
            )
        noise = loaded.DraftNoise(
            key=loaded.draft_noise_key(case.seed),
            offset=torch.zeros(1, dtype=torch.int64, device=device),
        )
        tp_sync = loaded.SpecTpSync(OneRankGroup())
        with environment_variable(VERIFY_IDS_ENV, "1"):
            sampler = sampler_class(
                model=drafter,
                gamma=case.gamma,
                max_bs=case.max_bs,
                device=device,
                noise=noise,
                tp_sync=tp_sync,
                greedy_draft=not case.folded_sampling,
                out=(
                    torch.empty(case.max_bs * case.gamma, dtype=torch.int64, device=device)
                    if out is None
                    else out
                ),
            )
        return Sglang0523Sampler(
            sampler=sampler,
            model=drafter,
            noise=noise,
            tp_sync=tp_sync,
            loaded=loaded,
            server_seed=case.seed,
            server_out=out,
        )


SGLANG_0_5_23 = Sglang0523Convention()
