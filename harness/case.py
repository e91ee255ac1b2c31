"""Cases: the complete, serialisable description of one sampler run.

A case is a plain value. Every tensor of a run (weights, hidden states, anchors,
sampling parameters) is generated on the CPU from the case seed and only then
moved to the case's device, so a case means the same numbers on every machine.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from harness.defaults import DEVICE_FORM, DTYPE_NAMES, SEED_LIMIT
from reference import (
    HEAD_KINDS,
    BlockInputs,
    LinearProbeConfidence,
    SamplingInfo,
    ToyDraftModel,
    check_sampling_info,
    make_toy_draft_model,
    prepare_block,
    query_rows_per_request,
)

CASE_SCHEMA = "dspark-harness/case"
CASE_SCHEMA_VERSION = 1
DTYPES: dict[str, torch.dtype] = dict(
    zip(DTYPE_NAMES, (torch.float32, torch.bfloat16, torch.float16), strict=True)
)
TOP_K_ALL = 1 << 30  # what the server stages for "no top-k": a sampled row
SHAPE_FIELDS = ("bs", "gamma", "vocab_size", "hidden_size", "markov_rank")
FLAG_FIELDS = ("sample_from_anchor", "folded_sampling", "fused_greedy", "confidence")


STAGED_TEMPERATURE_DTYPE = torch.float32  # ``SamplingInfo`` stages temperatures in it
DIGITS_SHOWN = 12  # of a number too long to quote whole in a message


class CaseError(ValueError):
    """A case (or case file) that does not describe a valid run."""


def _temperature(value: float) -> float:
    """``value`` as a float; an integer too large for one is a ``CaseError``."""
    try:
        return float(value)
    except OverflowError:
        text = str(value)
        raise CaseError(
            f"temperatures must be finite numbers >= 0, got an integer of {len(text)} digits "
            f"({text[:DIGITS_SHOWN]}...), too large for a float"
        ) from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_device(device: object, *, what: str = "device") -> None:
    """``cpu`` or ``cuda[:N]``, and present on this machine."""
    if not isinstance(device, str) or DEVICE_FORM.fullmatch(device) is None:
        raise CaseError(f"{what} must be 'cpu' or 'cuda[:N]' (a string), got {device!r}")
    if device == "cpu":
        return
    if not torch.cuda.is_available():
        raise CaseError(f"{what} {device} asked for, but no CUDA device is available here")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        raise CaseError(
            f"{what} {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )


@functools.lru_cache(maxsize=256)  # a matrix stages the same few temperatures thousands of times
def fits_staged_dtype(temperature: float) -> bool:
    """Whether ``temperature`` stays finite in the dtype temperatures are staged in."""
    return math.isfinite(float(torch.tensor(temperature, dtype=STAGED_TEMPERATURE_DTYPE)))


@dataclass(frozen=True)
class Case:
    """Shapes, head, layout, dtype, device, sampling mode, per-row parameters, seed."""

    bs: int
    gamma: int
    vocab_size: int
    hidden_size: int
    markov_rank: int
    head_kind: str = "vanilla"
    sample_from_anchor: bool = True
    dtype: str = "float32"
    device: str = "cpu"
    folded_sampling: bool = True
    fused_greedy: bool = False
    temperatures: tuple[float, ...] = ()
    greedy_rows: tuple[bool, ...] = ()
    # each request's top-k (0: none), top-p and min-p (docs/sampling-params.md), one per
    # row where given; empty: no row truncates
    top_ks: tuple[int, ...] = ()
    top_ps: tuple[float, ...] = ()
    min_ps: tuple[float, ...] = ()
    confidence: bool = False
    seed: int = 0
    max_bs: int = 0  # 0: same as bs
    vocab_padding: int = 0
    draft_vocab: int = 0  # > 0: a reduced draft vocabulary of that many target ids
    replays: int = 0  # > 0: also a server's life of this many replays on one instance
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        self.check_types()
        # Normalise sequences so JSON lists and tuples give equal cases.
        object.__setattr__(self, "temperatures", tuple(_temperature(t) for t in self.temperatures))
        object.__setattr__(self, "greedy_rows", tuple(bool(g) for g in self.greedy_rows))
        object.__setattr__(self, "top_ks", tuple(self.top_ks))
        object.__setattr__(self, "top_ps", tuple(float(p) for p in self.top_ps))
        object.__setattr__(self, "min_ps", tuple(float(p) for p in self.min_ps))
        if self.max_bs == 0:
            object.__setattr__(self, "max_bs", self.bs)
        self.validate()

    # -- validation ---------------------------------------------------------------------------
    def check_types(self) -> None:
        """JSON types exactly: integers for shapes and seeds, booleans for flags, strings
        for names, lists of numbers and of booleans; nothing is coerced."""
        for name in (*SHAPE_FIELDS, "seed", "max_bs", "vocab_padding", "draft_vocab", "replays"):
            if not _is_int(getattr(self, name)):
                raise CaseError(f"{name} must be an integer, got {getattr(self, name)!r}")
        for name in FLAG_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise CaseError(
                    f"{name} must be a JSON boolean (true or false), got {getattr(self, name)!r}"
                )
        if not isinstance(self.device, str):
            raise CaseError(f"device must be 'cpu' or 'cuda[:N]' (a string), got {self.device!r}")
        for name in ("head_kind", "dtype", "name"):
            if not isinstance(getattr(self, name), str):
                raise CaseError(f"{name} must be a string, got {getattr(self, name)!r}")
        if not self.name.isprintable():  # a newline could forge a line of the report
            raise CaseError(
                f"name must be printable text (no newline, tab or other control character), "
                f"got {self.name!r}"
            )
        if not isinstance(self.temperatures, (list, tuple)) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) for t in self.temperatures
        ):
            raise CaseError(f"temperatures must be a list of numbers, got {self.temperatures!r}")
        if not isinstance(self.greedy_rows, (list, tuple)) or not all(
            isinstance(g, bool) for g in self.greedy_rows
        ):
            raise CaseError(
                f"greedy_rows must be a list of JSON booleans, got {self.greedy_rows!r}"
            )
        if not isinstance(self.top_ks, (list, tuple)) or not all(map(_is_int, self.top_ks)):
            raise CaseError(f"top_ks must be a list of integers, got {self.top_ks!r}")
        for name in ("top_ps", "min_ps"):
            values = getattr(self, name)
            if not isinstance(values, (list, tuple)) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
            ):
                raise CaseError(f"{name} must be a list of numbers, got {values!r}")

    def validate(self) -> None:
        for name in ("bs", "gamma", "vocab_size", "hidden_size", "markov_rank"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise CaseError(f"{name} must be a positive integer, got {value!r}")
        if self.max_bs < self.bs:
            raise CaseError(f"max_bs ({self.max_bs}) must be >= bs ({self.bs})")
        if self.head_kind not in HEAD_KINDS:
            raise CaseError(f"head_kind must be one of {HEAD_KINDS}, got {self.head_kind!r}")
        if self.dtype not in DTYPES:
            raise CaseError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if DEVICE_FORM.fullmatch(self.device) is None:
            raise CaseError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        if not 0 <= self.seed < SEED_LIMIT:
            raise CaseError(f"seed must be an integer in [0, 2^63), got {self.seed}")
        if self.max_bs < 0:
            raise CaseError(f"max_bs must be >= 0 (0: same as bs), got {self.max_bs}")
        if len(self.temperatures) != self.bs or len(self.greedy_rows) != self.bs:
            raise CaseError(
                f"temperatures and greedy_rows need one entry per row (bs={self.bs}), "
                f"got {len(self.temperatures)} and {len(self.greedy_rows)}"
            )
        for t in self.temperatures:
            if not math.isfinite(t) or t < 0:
                raise CaseError(f"temperatures must be finite and >= 0, got {t!r}")
            if not fits_staged_dtype(t):
                raise CaseError(
                    f"temperatures must fit {STAGED_TEMPERATURE_DTYPE} (the dtype they are "
                    f"staged in, at most {torch.finfo(STAGED_TEMPERATURE_DTYPE).max:.4g}), "
                    f"got {t!r}"
                )
        self.validate_requests()
        if self.vocab_padding < 0:
            raise CaseError(f"vocab_padding must be >= 0, got {self.vocab_padding}")
        if not (self.draft_vocab == 0 or 0 < self.draft_vocab < self.vocab_size):
            raise CaseError(
                f"draft_vocab must be 0 (the full vocabulary) or in 1..{self.vocab_size - 1} "
                f"(fewer than vocab_size), got {self.draft_vocab}"
            )
        if self.replays < 0:
            raise CaseError(f"replays must be >= 0 (0: no life), got {self.replays}")

    def validate_requests(self) -> None:
        """Each given truncation has one entry per row, a sampled row's top-k is not 1 (the
        greedy mark, ``greedy_rows``), and every value is in its range
        (``check_sampling_info``)."""
        for name in ("top_ks", "top_ps", "min_ps"):
            values = getattr(self, name)
            if values and len(values) != self.bs:
                raise CaseError(
                    f"{name} needs one entry per row (bs={self.bs}) or none, got {len(values)}"
                )
        for row, (greedy, top_k) in enumerate(zip(self.greedy_rows, self.top_ks, strict=False)):
            if top_k == 1 and not greedy:
                raise CaseError(
                    f"top_ks: a sampled row's top-k must be 0 (none) or >= 2, got 1 at row "
                    f"{row} (greedy_rows marks the greedy rows)"
                )
        try:
            check_sampling_info(self.requests())
        except ValueError as error:
            raise CaseError(str(error)) from None

    def requests(self, device: str | torch.device = "cpu") -> SamplingInfo:
        """The case's requests as a server stages them: each row's temperature, top-k (1 on
        a greedy row; no top-k staged as ``TOP_K_ALL``), top-p and min-p."""
        top_ks = self.top_ks or (0,) * self.bs
        return SamplingInfo.from_lists(
            temperatures=list(self.temperatures),
            top_ks=[
                1 if g else (k or TOP_K_ALL) for g, k in zip(self.greedy_rows, top_ks, strict=True)
            ],
            top_ps=list(self.top_ps) or None,
            min_ps=list(self.min_ps) or None,
            device=device,
        )

    # -- derived facts ------------------------------------------------------------------------
    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def query_rows(self) -> int:
        return query_rows_per_request(gamma=self.gamma, sample_from_anchor=self.sample_from_anchor)

    @property
    def sampled_rows(self) -> tuple[int, ...]:
        return tuple(i for i, greedy in enumerate(self.greedy_rows) if not greedy)

    @property
    def has_sampled_rows(self) -> bool:
        return self.folded_sampling and bool(self.sampled_rows)

    @property
    def fused_path_available(self) -> bool:
        """Whether a correct sampler takes the fused greedy fast path."""
        return not self.folded_sampling and self.fused_greedy and self.head_kind == "vanilla"

    def label(self) -> str:
        """A short, readable identifier of the case."""
        if self.name:
            return self.name
        mode = (
            "folded"
            if self.folded_sampling
            else ("greedy+fused" if self.fused_greedy else "greedy")
        )
        layout = "anchor" if self.sample_from_anchor else "no-anchor"
        return (
            f"{self.head_kind}/{layout}/{mode}/{self.dtype} bs={self.bs} g={self.gamma} "
            f"V={self.vocab_size} H={self.hidden_size} r={self.markov_rank} seed={self.seed}"
            + (f" Vd={self.draft_vocab}" if self.draft_vocab else "")
            + (f" replays={self.replays}" if self.replays else "")
        )

    # -- JSON ---------------------------------------------------------------------------------
    def to_json_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["temperatures"] = list(self.temperatures)
        body["greedy_rows"] = list(self.greedy_rows)
        for name in ("top_ks", "top_ps", "min_ps"):
            body[name] = list(getattr(self, name))
        return {"schema": CASE_SCHEMA, "schema_version": CASE_SCHEMA_VERSION, "case": body}

    @classmethod
    def from_json_dict(cls, data: object) -> Case:
        if not isinstance(data, dict) or data.get("schema") != CASE_SCHEMA:
            raise CaseError(f"not a case: expected an object with schema {CASE_SCHEMA!r}")
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise CaseError(f"case schema_version must be an integer, got {version!r}")
        if version > CASE_SCHEMA_VERSION:
            raise CaseError(
                f"case schema_version {version} is newer than this harness supports "
                f"({CASE_SCHEMA_VERSION}); upgrade the harness to read it"
            )
        body = data.get("case")
        if not isinstance(body, dict):
            raise CaseError("case file has no 'case' object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(body) - known)
        if unknown:
            raise CaseError(f"unknown case fields {unknown}")
        try:
            case = cls(**body)
        except TypeError as error:
            raise CaseError(f"malformed case: {error}") from None
        check_device(case.device)  # a stored case names a device this machine must have
        return case

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Case:
        """The case in a file; every problem is a ``CaseError`` naming the file."""
        try:
            data = json.loads(Path(path).read_bytes().decode("utf-8"))
        except UnicodeDecodeError as error:
            raise CaseError(
                f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
            ) from None
        except json.JSONDecodeError as error:
            raise CaseError(f"{path}: not valid JSON ({error})") from None
        except OSError as error:
            raise CaseError(f"{path}: cannot read ({error.strerror})") from None
        try:
            return cls.from_json_dict(data)
        except CaseError as error:
            raise CaseError(f"{path}: {error}") from None

    def with_changes(self, **changes: Any) -> Case:
        return replace(self, **changes)


def make_case(
    *,
    bs: int,
    gamma: int,
    vocab_size: int,
    hidden_size: int,
    markov_rank: int,
    temperature: float = 1.0,
    greedy_rows: tuple[bool, ...] | None = None,
    **options: Any,
) -> Case:
    """A case with one temperature for every row (all rows sampled unless told)."""
    return Case(
        bs=bs,
        gamma=gamma,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        markov_rank=markov_rank,
        temperatures=(temperature,) * bs,
        greedy_rows=greedy_rows if greedy_rows is not None else (False,) * bs,
        **options,
    )


@dataclass(frozen=True)
class CaseInputs:
    """Everything a run needs, on the case's device."""

    model: ToyDraftModel
    hidden_states: torch.Tensor  # [bs*Q, H]
    input_ids: torch.Tensor  # [bs*Q] int64
    sampling_info: SamplingInfo
    confidence_fn: LinearProbeConfidence | None


def build_inputs(case: Case) -> CaseInputs:
    """Generate the case's tensors on the CPU from its seed, then move them."""
    device = torch.device(case.device)
    model = make_toy_draft_model(
        vocab_size=case.vocab_size,
        hidden_size=case.hidden_size,
        markov_rank=case.markov_rank,
        head_kind=case.head_kind,
        sample_from_anchor=case.sample_from_anchor,
        seed=case.seed,
        dtype=case.torch_dtype,
        vocab_padding=case.vocab_padding,
        draft_vocab=case.draft_vocab,
    )
    generator = torch.Generator().manual_seed(case.seed + 2)
    rows = case.bs * case.query_rows
    hidden_states = torch.randn(rows, case.hidden_size, generator=generator, dtype=torch.float32)
    input_ids = torch.randint(0, case.vocab_size, (rows,), generator=generator)
    confidence_fn = (
        LinearProbeConfidence(markov_head=model.markov_head, seed=case.seed + 3).to(device)
        if case.confidence
        else None
    )
    return CaseInputs(
        model=model.to(device),
        hidden_states=hidden_states.to(case.torch_dtype).to(device),
        input_ids=input_ids.to(device),
        sampling_info=case.requests(device),
        confidence_fn=confidence_fn,
    )


def case_block(case: Case, inputs: CaseInputs) -> BlockInputs:
    """The case's inputs after the anchor layout: base logits, anchors, head rows."""
    with torch.inference_mode():
        return prepare_block(
            model=inputs.model,
            gamma=case.gamma,
            max_bs=case.max_bs,
            hidden_states=inputs.hidden_states,
            input_ids=inputs.input_ids,
        )
