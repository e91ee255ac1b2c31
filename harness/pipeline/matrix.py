"""The standard case matrix: at least one case for every row of the ledger
(``docs/design.md``, "The ledger").

Shapes are small so the whole matrix runs in seconds on a CPU; tile boundaries
of the Triton kernel (``V = k*1024 +- 1``) and reduced precision are included.
Every folded case with sampled rows is built to expose the bug (several sampled
rows, moderate temperatures), so the ledger holds it to ``require_observable``.
Most cases have ``max_bs > bs``: the rows past the live batch belong to other graph
buckets and must not be written. Cases with ``replays`` also live a server's life
(``harness.pipeline.life``). Each case's seed is derived from its name and the run's
seed (``case_seed``), so adding, removing or reordering a case reseeds no other.
"""

from __future__ import annotations

import hashlib

from harness.case import Case
from harness.options import RunOptions
from harness.pipeline.life import MIN_REPLAYS

MIXED = (False, True, False, False)  # rows 0, 2, 3 sampled; row 1 greedy
TEMPS = (1.0, 0.0, 0.7, 1.5)
LIFE = {"replays": MIN_REPLAYS}
Spec = tuple[str, dict[str, object]]


def mixed_rows(bs: int) -> dict[str, object]:
    """``MIXED`` and ``TEMPS`` repeated over ``bs`` rows."""
    return {
        "temperatures": tuple(TEMPS[i % 4] for i in range(bs)),
        "greedy_rows": tuple(MIXED[i % 4] for i in range(bs)),
    }


# The oracle's default grid as one batch's requests (docs/sampling-params.md): temperature,
# greedy, top-k (0: none), top-p, min-p.
REQUEST_ROWS = (
    (1.0, False, 0, 1.0, 0.0),  # the temperature alone
    (0.0, True, 0, 1.0, 0.0),  # greedy
    (1.0, False, 3, 1.0, 0.0),  # top-k
    (0.7, False, 0, 0.8, 0.0),  # top-p
    (1.5, False, 0, 1.0, 0.2),  # min-p
    (0.8, False, 6, 0.9, 0.1),  # all three
)


def request_rows(bs: int) -> dict[str, object]:
    """``REQUEST_ROWS`` repeated over ``bs`` rows: one batch mixing greedy rows, the
    temperature alone, each truncation alone and all three."""
    rows = [REQUEST_ROWS[i % len(REQUEST_ROWS)] for i in range(bs)]
    fields = ("temperatures", "greedy_rows", "top_ks", "top_ps", "min_ps")
    return {name: tuple(row[i] for row in rows) for i, name in enumerate(fields)}


def _cases(specs: list[Spec], *, seed: int, device: str) -> list[Case]:
    return [
        Case(**params, seed=case_seed(name, seed=seed), device=device, name=name)  # type: ignore[arg-type]
        for name, params in specs
    ]


def case_seed(name: str, *, seed: int) -> int:
    """The seed of the case ``name`` in a run seeded ``seed``: 31 bits of a SHA-256 of
    both, the same on every machine and Python."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def standard_matrix(*, seed: int = 0, device: str = "cpu") -> list[Case]:
    """The embedded default the main report runs; ``seed`` and each case's name give its
    seed (``case_seed``).

    ``gamma`` runs over 1-8 and ``bs`` up to 64, mostly with ``max_bs > bs``. Twelve
    cases live a server's life (``replays``): folded sampling and the fused greedy
    flag, each on every head kind in both anchor layouts. Two sampled cases carry the
    request grid (``request_rows``): top-k, top-p and min-p per row, mixed in the batch.
    """
    small = dict(bs=4, gamma=5, vocab_size=257, hidden_size=64, markov_rank=16)
    rows = mixed_rows(4)
    greedy = dict(temperatures=(1.0,) * 4, greedy_rows=(True,) * 4)
    greedy_fold = dict(greedy, folded_sampling=False)
    fused = dict(greedy_fold, fused_greedy=True, gamma=3, max_bs=6, **LIFE)
    # No-anchor layout: gamma=4 divides H=64, so only the head kind decides; H=62 does not.
    no_anchor = dict(small, gamma=4, sample_from_anchor=False)
    fused_no_anchor = {**fused, "gamma": 4}  # 4 divides H=64
    specs: list[Spec] = [
        ("folded-sampled/vanilla", {**small, **rows, "gamma": 4, "max_bs": 8, **LIFE}),
        (
            "folded-sampled/gated+confidence",
            {
                **small,
                **rows,
                "head_kind": "gated",
                "confidence": True,
                "gamma": 3,
                "max_bs": 6,
                **LIFE,
            },
        ),
        (
            "folded-sampled/rnn/bf16",
            {
                **small,
                **rows,
                "head_kind": "rnn",
                "dtype": "bfloat16",
                "gamma": 3,
                "max_bs": 5,
                **LIFE,
            },
        ),
        (
            "folded-sampled/rnn/fp16/V=1025",
            {**small, **rows, "head_kind": "rnn", "dtype": "float16", "vocab_size": 1025},
        ),
        (
            "folded-sampled/vanilla/V=2047/padded",
            {**small, **rows, "gamma": 3, "vocab_size": 2047, "vocab_padding": 1, "max_bs": 8},
        ),
        (
            "folded-sampled/gated/gamma=7/request-grid",
            {**small, **request_rows(6), "bs": 6, "gamma": 7, "head_kind": "gated"},
        ),
        (
            "reduced-vocab/vanilla/folded-sampled",
            {**small, **rows, "gamma": 4, "draft_vocab": 96, "max_bs": 6},
        ),
        (
            "folded-sampled/bs=64/gamma=8",
            {**small, **request_rows(64), "bs": 64, "gamma": 8, "max_bs": 72},
        ),
        ("folded-all-greedy/vanilla", {**small, **greedy, "gamma": 2}),
        ("greedy-fold/gated", {**small, **greedy_fold, "head_kind": "gated", "gamma": 6}),
        ("greedy-fold/vanilla", {**small, **greedy_fold, "gamma": 1, "max_bs": 6}),
        (
            "greedy-fold/rnn/bs=16",
            {
                **small,
                **greedy_fold,
                **mixed_rows(16),
                "greedy_rows": (True,) * 16,
                "head_kind": "rnn",
                "bs": 16,
                "max_bs": 24,
            },
        ),
        ("greedy-fold/fused/vanilla", {**small, **fused}),
        ("greedy-fold/fused/gated", {**small, **fused, "head_kind": "gated", "gamma": 3}),
        ("greedy-fold/fused/rnn", {**small, **fused, "head_kind": "rnn", "gamma": 3}),
        (
            "greedy-fold/fused/vanilla/bf16",
            {**small, **greedy_fold, "fused_greedy": True, "dtype": "bfloat16"},
        ),
        (
            "no-anchor/gated/folded",
            {**no_anchor, **rows, "head_kind": "gated", "max_bs": 7, **LIFE},
        ),
        ("no-anchor/rnn/folded", {**no_anchor, **rows, "head_kind": "rnn", "max_bs": 6, **LIFE}),
        (
            "no-anchor/gated/greedy-fold/fused",
            {**no_anchor, **fused_no_anchor, "head_kind": "gated"},
        ),
        ("no-anchor/rnn/greedy-fold/fused", {**no_anchor, **fused_no_anchor, "head_kind": "rnn"}),
        ("no-anchor/vanilla/gamma-not-dividing-H", {**no_anchor, **rows, "hidden_size": 62}),
        (
            "no-anchor/vanilla/gamma-not-dividing-H/fused",
            {**no_anchor, **fused_no_anchor, "hidden_size": 62},
        ),
        (
            "no-anchor/vanilla/greedy-fold",
            {**no_anchor, **greedy_fold, "max_bs": 6},
        ),
        (
            "no-anchor/vanilla/folded-sampled",
            {**no_anchor, **rows, "confidence": True, "max_bs": 8, **LIFE},
        ),
    ]
    return _cases(specs, seed=seed, device=device)


def thorough_matrix(*, seed: int = 0, device: str = "cpu") -> list[Case]:
    """The standard matrix plus production shapes (``--thorough``): the DeepSeek and
    Qwen3 vocabularies (129280, 151936) in bf16 and fp16, ``bs`` 1 and 256, and a
    longer life. Minutes on a CPU; the memory guard refuses what does not fit."""
    rows = mixed_rows(4)
    production = dict(bs=4, gamma=5, hidden_size=256, markov_rank=64, max_bs=8)
    specs: list[Spec] = [
        (
            "thorough/vanilla/V=129280/bf16",
            {**production, **rows, "vocab_size": 129280, "dtype": "bfloat16"},
        ),
        (
            "thorough/gated/V=151936/fp16",
            {**production, **rows, "vocab_size": 151936, "dtype": "float16", "gamma": 7},
        ),
        (
            "thorough/rnn/V=151936/bf16/bs=1",
            {
                **production,
                **mixed_rows(1),
                "vocab_size": 151936,
                "dtype": "bfloat16",
                "head_kind": "rnn",
                "bs": 1,
                "max_bs": 4,
                "replays": 2 * MIN_REPLAYS,
            },
        ),
        (
            "thorough/vanilla/bs=256",
            {**production, **mixed_rows(256), "vocab_size": 4099, "bs": 256, "max_bs": 256},
        ),
        (
            "thorough/no-anchor/gated/bs=256/fp16",
            {
                **production,
                **mixed_rows(256),
                "vocab_size": 1025,
                "dtype": "float16",
                "sample_from_anchor": False,
                "head_kind": "gated",
                "gamma": 8,
                "bs": 256,
                "max_bs": 256,
            },
        ),
    ]
    return [*standard_matrix(seed=seed, device=device), *_cases(specs, seed=seed, device=device)]


def matrix_for(options: RunOptions) -> list[Case]:
    """The matrix the options ask for (``thorough``: with production shapes), at their
    seed on their device."""
    matrix = thorough_matrix if options.thorough else standard_matrix
    return matrix(seed=options.seed, device=options.device)
