"""Calling conventions: how a sampler of each kind is built, staged, called and read.

A convention is an object with one job: build a sampler over a case and read its
outputs. The runner, the timings and the checks speak to the ``BuiltSampler`` it
returns, never to a convention's attribute names:

- ``harness`` (ours) and ``server`` (the PR-era server's): ``out``, the flat
  ``corrected_out[max_bs*gamma, V]`` and ``confidence_out``, built by
  ``harness.plugins.construct`` (``fused_greedy=`` or the environment switch);
- ``sglang-0.5.23`` (today's released server, ``harness.upstream.sglang_convention``):
  a ``DraftNoise`` counter the harness owns, ``step_logits[max_bs, gamma, V]``,
  ``params`` as staged and ``verify_ids``;
- ``vllm-0.33`` (vLLM's released speculator, ``harness.upstream.vllm_convention``):
  ``draft_tokens[max_bs, gamma]``, the ``draft_logits`` cache by request slot, per-slot
  temperatures and seeds, and the sequence positions the harness owns as its counter.

What a call produced is one ``CallOutputs`` value whatever the convention; see
docs/plugins.md ("Calling conventions").
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from harness.plugins.construct import bind_constructor, construct_sampler
from harness.plugins.protocol import DraftSampler
from harness.plugins.walks import HeadCounts, observe_head
from reference.sampling_params import SamplingInfo
from reference.streams import DecodeStreams, shared_torch_streams
from reference.verifier import DraftBlock, read_draft_block

if TYPE_CHECKING:
    from harness.case import Case, CaseInputs
    from harness.oracle_cut import OracleCut

TOKEN_SENTINEL = -1  # never a token id: shows an unwritten ``out`` entry
# How many counters from a call's start a counter replay tries (docs/upstream.md).
COUNTER_SEARCH = 8


class ConventionName(enum.StrEnum):
    """Our calling conventions, told apart by a class's constructor. A released server's
    convention names itself in its own contract module (its era's words, "vllm-0.33"),
    bound to its eras by the registry (``harness.upstream.releases.eras``)."""

    HARNESS = "harness"
    SERVER = "server"  # the PR-era server (the before/after-fix modules)


class OutputError(ValueError):
    """An implementation's output buffers are missing or of the wrong shape or dtype."""


@dataclass(frozen=True)
class StagedParams:
    """The per-row sampling parameters as the sampler staged them (``[bs]`` each)."""

    temperatures: torch.Tensor  # float32, clamped
    greedy_mask: torch.Tensor  # bool
    step_temperatures: torch.Tensor | None = None  # 0 on greedy rows (sglang 0.5.23)


@dataclass(frozen=True)
class NoiseCounter:
    """A counter-based noise stream the harness owns: its key and the counter around a call."""

    key: int
    start: int  # the counter when the call began
    end: int  # the counter when it returned

    @property
    def advances(self) -> int:
        return self.end - self.start

    @property
    def fresh(self) -> range:
        """The counters the stream had not handed out before the call, up to where the
        call left it (at least the one it began at: a call that does not advance still
        draws there, and ``fresh_noise`` judges that)."""
        return range(self.start, max(self.end, self.start + 1))


@dataclass(frozen=True)
class CounterReads:
    """The counters a call's draws read from its declared counter stream, as observed
    where the stream's words are computed in torch (``None`` where they are not)."""

    own: tuple[int, ...]  # read by the convention's own transform (sglang's Gumbel race)
    other: tuple[int, ...]  # read by any other use of the stream's words

    @property
    def counters(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.own) | set(self.other)))


WORD = 1 << 32  # a hashed position is its low 32 bits


@dataclass(frozen=True)
class DraftKey:
    """The key one draft draw read from a per-request hash stream (vLLM 0.33's): the
    request's seed after the step is mixed in and the position word after any salt, in
    each hash domain the draw reads (each token's word is the hash of key and token)."""

    row: int  # the live batch row
    step: int
    position: int  # the position the draw is keyed by before any salt (the anchor's + step)
    seed: int  # the seed the hash reads
    word: int  # the position word the hash reads, in [0, 2^32)
    domains: tuple[int, ...]


@dataclass(frozen=True)
class RequestKeys:
    """The keys a request's verifier draws read over the decode so far: its seed at
    every position ``first .. last`` (inclusive), in each hash domain, for its residual
    and bonus draws (its acceptance coins are another generator's, ``coins``)."""

    row: int
    seed: int
    first: int
    last: int
    domains: tuple[int, ...]

    def meets(self, key: DraftKey) -> int | None:
        """The position at which this request's verifier reads ``key``, or ``None``."""
        if key.seed != self.seed or not set(key.domains) & set(self.domains):
            return None
        at = self.first + (key.word - self.first) % WORD  # the first position with that word
        return at if at <= self.last else None


@dataclass(frozen=True)
class KeyedDraws:
    """A call's draft draws and the verifier's draws of the decode so far, as keys of
    one hash (``hash``); ``coins``: what the verifier's acceptance coins are drawn with,
    said in the evidence (another function: they meet no key of ``hash``)."""

    hash: str
    draft: tuple[DraftKey, ...]
    verifier: tuple[RequestKeys, ...]
    coins: str


@dataclass(frozen=True)
class CallOutputs:
    """What one call wrote for the live batch, read through its convention."""

    tokens: torch.Tensor  # [bs, gamma] int64
    step_logits: torch.Tensor | None  # [bs, gamma, V], kept pre-temperature, its own dtype
    confidence: torch.Tensor | None  # [bs, gamma]
    staged: StagedParams | None  # None: the convention does not expose its staging
    noise_counter: NoiseCounter | None  # None: noise from torch's RNG (observed as draws)
    counter_replay: torch.Tensor | None  # [bs, gamma]: tokens the declared stream gives
    verify_ids: torch.Tensor | None = None  # [bs, gamma + 1]: anchor, then the drafts
    # The requests as the server stages them; None: the reference's rule (top_k == 1).
    requested: StagedParams | None = None
    # Counter -> [bs, gamma]: the tokens the declared stream's own transform gives with
    # the kept step logits at that counter (the fresh counters and the observed reads).
    stream_replays: dict[int, torch.Tensor] | None = None
    counter_reads: CounterReads | None = None  # None: the reads were not observed
    # [bs, gamma, V] bool: the entries the convention's draft law may weigh (vLLM's top-K
    # variant: the K largest base logits of each position), computed by the harness from
    # the call's inputs; None: every entry.
    candidates: torch.Tensor | None = None
    # The counter-based stream the server's verifier reads over the decode so far (its
    # key; counters 0 .. one per drafted block): None where the convention does not
    # declare one.
    verifier_counter: NoiseCounter | None = None
    # A server keying both streams per request (vLLM 0.33): the keys the call's draft
    # draws read and those its verifier reads; None: not declared or not observed.
    keyed_draws: KeyedDraws | None = None
    # False: the convention's contract keeps no step logits on this call (sglang 0.5.16's
    # graph-folded sampler, greedy only), so none is missing.
    keeps_step_logits: bool = True
    # The drafter's own top-k (``BuiltSampler.draft_top_k``); None: no own truncation.
    draft_top_k: int | None = None


def plain_tensor(value: object, *, name: str) -> torch.Tensor | None:
    """``value`` if it is exactly a ``torch.Tensor``; ``None`` when absent. A subclass
    decides what its own comparisons say, so it is refused (``OutputError``)."""
    if value is None:
        return None
    if type(value) is not torch.Tensor:
        raise OutputError(
            f"{name} must be a plain torch.Tensor, got {type(value).__module__}."
            f"{type(value).__qualname__}"
        )
    return value


def read_tensor(owner: object, name: str) -> torch.Tensor | None:
    """The sampler's buffer ``name``: ``None`` when it has none, refused when it is a
    ``torch.Tensor`` subclass."""
    value = getattr(owner, name, None)
    if not isinstance(value, torch.Tensor):
        return None
    return plain_tensor(value, name=name)


def poison(buffer: torch.Tensor | None) -> None:
    """Fill a buffer with its sentinel (token ``-1``, NaN), so an unwritten entry shows."""
    if buffer is None:
        return
    if buffer.is_floating_point():
        buffer.fill_(math.nan)
    else:
        buffer.fill_(TOKEN_SENTINEL)


def rows_written(buffer: torch.Tensor | None, *, live: int) -> int:
    """Entries past the first ``live`` rows that lost their sentinel."""
    if buffer is None or buffer.shape[0] <= live:
        return 0
    tail = buffer[live:]
    intact = torch.isnan(tail) if tail.is_floating_point() else tail == TOKEN_SENTINEL
    return int((~intact).sum())


def _described(buffer: torch.Tensor | None) -> str:
    return "missing" if buffer is None else f"{buffer.dtype} {tuple(buffer.shape)}"


def read_tokens(out: torch.Tensor | None, case: Case) -> torch.Tensor:
    """``out[: bs*gamma]`` as ``[bs, gamma]``, checked to be an int64 vector."""
    rows = case.bs * case.gamma
    if out is None or out.dtype != torch.int64 or out.dim() != 1 or out.numel() < rows:
        raise OutputError(
            f"out must be an int64 vector of >= bs*gamma={rows}, got {_described(out)}"
        )
    return out[:rows].view(case.bs, case.gamma).clone()


def read_confidence(confidence: torch.Tensor | None, case: Case) -> torch.Tensor | None:
    """``confidence_out[:bs]`` when the case has confidence, checked to be ``[>= bs, gamma]``."""
    if not case.confidence:
        return None
    if (
        confidence is None
        or confidence.dim() != 2
        or confidence.shape[0] < case.bs
        or confidence.shape[1] != case.gamma
    ):
        raise OutputError(
            f"confidence_out must be [>= bs={case.bs}, gamma={case.gamma}], "
            f"got {_described(confidence)}"
        )
    return confidence[: case.bs].clone()


class BuiltSampler(ABC):
    """One sampler built in its convention, with the state the harness owns for it."""

    convention: str  # the name of the convention that built it
    sampler: Any  # the implementation's own object
    model: Any  # the drafter the sampler was built over
    server_out: torch.Tensor | None = None  # the server's token buffer, passed as out=

    def token_buffer(self) -> torch.Tensor | None:
        """The token buffer the server reads: its own ``out=`` where it passed one (a
        sampler that writes elsewhere leaves it unwritten), else the sampler's ``out``."""
        if self.server_out is not None:
            return self.server_out
        return read_tensor(self.sampler, "out")

    @property
    def gamma(self) -> int:
        return int(self.sampler.gamma)

    def stage_sampling_params(self, *, bs: int, sampling_info: SamplingInfo | None) -> None:
        """Stage the case's per-row parameters the way this convention's server sends them."""
        self.sampler.stage_sampling_params(bs=bs, sampling_info=sampling_info)

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        self.sampler(hidden_states, input_ids)

    def observe_walks(self) -> AbstractContextManager[HeadCounts]:
        """Count the walks, head steps and walk tokens of the next call."""
        return observe_head(self.model.markov_head)

    def contract_candidates(self, base_logits: torch.Tensor) -> torch.Tensor | None:
        """``[bs, gamma, V]`` bool: the entries this convention's draft law may weigh, from
        a call's base logits ``[bs, gamma, V]``; ``None`` (here): every entry."""
        del base_logits
        return None

    @property
    def draft_top_k(self) -> int | None:
        """The sampler's own top-k where it declares one (``draft_top_k``: it draws from and
        writes its ``q`` truncated to its k most likely tokens, ``reference.top_k_mask``);
        ``OutputError`` for a declaration that is not a positive int."""
        k = getattr(self.sampler, "draft_top_k", None)
        if k is None:
            return None
        if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
            raise OutputError(f"draft_top_k must be a positive int or None, got {k!r}")
        return k

    def seek_noise(self, counter: int) -> None:
        """Put the noise stream at ``counter`` before a call: here torch's RNG, seeded
        with it (a counter-based stream sets its counter)."""
        torch.manual_seed(counter)

    def decode_streams(self, *, seed: int, device: torch.device) -> DecodeStreams:
        """Every random stream of a decode as this convention's server derives them from
        its one seed: ours and the PR-era server's draw the drafter's noise and the
        verifier's draws from torch's one generator, seeded with it."""
        return shared_torch_streams(seed, device=device)

    @abstractmethod
    def draft_block(self, rows: int) -> DraftBlock:
        """What a verifier reads of the last call's first ``rows`` rows (the sampler's
        own tensors: tokens, kept step logits, staged temperatures and greedy mask)."""

    @abstractmethod
    def poison(self) -> None:
        """Fill every output buffer with its sentinel before a call."""

    @abstractmethod
    def read(self, case: Case) -> CallOutputs:
        """The live batch's outputs of the last call, checked for shape and dtype."""

    def read_tokens(self, case: Case) -> torch.Tensor:
        """The live batch's drafted tokens of the last call, ``[bs, gamma]`` (what the
        support scan reads): here ``read``'s; a convention whose ``read`` does more
        (a replay of the call's noise) reads the tokens alone."""
        return self.read(case).tokens

    @abstractmethod
    def outside_writes(self, case: Case) -> dict[str, int]:
        """Per buffer, entries past the live batch (other graph buckets' rows) written."""


class CorrectedOutSampler(BuiltSampler):
    """Ours and the PR-era server's: ``out``, ``corrected_out[max_bs*gamma, V]``,
    ``confidence_out[max_bs, gamma]``; noise from torch's RNG."""

    sampler: DraftSampler

    def __init__(
        self,
        *,
        sampler: DraftSampler,
        model: Any,
        convention: str,
        server_out: torch.Tensor | None = None,
    ) -> None:
        self.sampler = sampler
        self.model = model
        self.convention = convention
        self.server_out = server_out

    def _buffers(self) -> dict[str, torch.Tensor | None]:
        buffers = {name: read_tensor(self.sampler, name) for name in BUFFER_ROWS}
        return {**buffers, "out": self.token_buffer()}

    def draft_block(self, rows: int) -> DraftBlock:
        return read_draft_block(self.sampler, rows)

    def poison(self) -> None:
        for buffer in self._buffers().values():
            poison(buffer)

    def read(self, case: Case) -> CallOutputs:
        rows = case.bs * case.gamma
        tokens = read_tokens(self.token_buffer(), case)
        step_logits = None
        if case.folded_sampling:
            corrected = read_tensor(self.sampler, "corrected_out")
            vocab = case.vocab_size
            if (
                corrected is None
                or corrected.dim() != 2
                or corrected.shape[0] < rows
                or corrected.shape[1] != vocab
            ):
                described = "missing" if corrected is None else str(tuple(corrected.shape))
                raise OutputError(
                    f"corrected_out must be [>= bs*gamma={rows}, V={vocab}] with folded "
                    f"sampling, got {described}"
                )
            step_logits = corrected[:rows].view(case.bs, case.gamma, vocab).clone()
        confidence = read_confidence(read_tensor(self.sampler, "confidence_out"), case)
        return CallOutputs(
            tokens=tokens,
            step_logits=step_logits,
            confidence=confidence,
            staged=None,  # checks stage the case with the reference's rule (the same contract)
            noise_counter=None,
            counter_replay=None,
            draft_top_k=self.draft_top_k,
        )

    def outside_writes(self, case: Case) -> dict[str, int]:
        written = {
            name: rows_written(buffer, live=BUFFER_ROWS[name](case))
            for name, buffer in self._buffers().items()
        }
        return {name: count for name, count in written.items() if count}


# Live rows of each buffer of the corrected-out conventions.
BUFFER_ROWS = {
    "out": lambda case: case.bs * case.gamma,
    "corrected_out": lambda case: case.bs * case.gamma,
    "confidence_out": lambda case: case.bs,
}


class Convention(ABC):
    """Builds samplers of one calling convention."""

    name: str  # as reports show it: ours (``ConventionName``), or a released server's

    def adaptations(self) -> tuple[str, ...]:
        """What the harness's adapter works around in the implementation on this machine
        (each a finding of that implementation, named in the report)."""
        return ()

    def outside_contract(self, case: Case, *, sampler_class: type[DraftSampler]) -> str | None:
        """Why the case cannot be expressed in this convention's contract for the class
        (it then skips the case, saying so), or ``None``."""
        del case, sampler_class
        return None

    @property
    def oracle_cut(self) -> OracleCut | None:
        """What the statistical oracle may decode with a sampler of this convention here
        (``harness.oracle_cut``: one that runs interpreted cannot afford the defaults),
        or ``None``: the config as asked."""
        return None

    @property
    def scan_batch(self) -> int | None:
        """The batch the support scan drives a sampler of this convention with here
        (``harness.pipeline.support_scan.full_plan``: one that runs interpreted pays a
        program per triple, so it scans the triples asked for, not a whole default
        batch of them), or ``None``: the scan's default batch."""
        return None

    @abstractmethod
    def takes_out(self, sampler_class: type[DraftSampler]) -> bool:
        """Whether the class's constructor takes a server-owned token buffer (``out=``)."""

    @abstractmethod
    def build(
        self,
        sampler_class: type[DraftSampler],
        *,
        case: Case,
        inputs: CaseInputs,
        model: torch.nn.Module | None = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        """A sampler for the case (``model`` replaces the case's drafter; ``out``, the
        server's own ``[max_bs*gamma]`` token buffer, is passed where the constructor
        takes it and read in place of the sampler's); nothing staged."""


class ConstructorConvention(Convention):
    """Ours or the PR-era server's, told apart by the class's constructor."""

    def __init__(self, name: ConventionName) -> None:
        self.name = name

    def takes_out(self, sampler_class: type[DraftSampler]) -> bool:
        return bind_constructor(sampler_class).takes_out

    def build(
        self,
        sampler_class: type[DraftSampler],
        *,
        case: Case,
        inputs: CaseInputs,
        model: torch.nn.Module | None = None,
        out: torch.Tensor | None = None,
    ) -> BuiltSampler:
        drafter = inputs.model if model is None else model
        sampler = construct_sampler(
            bind_constructor(sampler_class),
            model=drafter,
            gamma=case.gamma,
            max_bs=case.max_bs,
            device=torch.device(case.device),
            confidence_fn=inputs.confidence_fn,
            folded_sampling=case.folded_sampling,
            fused_greedy=case.fused_greedy,
            out=out,
        )
        return CorrectedOutSampler(
            sampler=sampler, model=drafter, convention=self.name, server_out=out
        )
