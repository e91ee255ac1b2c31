"""The standard case matrix: at least one case for every row of the ledger
(``docs/design.md``, "The ledger").

Shapes are small so the whole matrix runs in seconds on a CPU; tile boundaries
of the Triton kernel (``V = k*1024 +- 1``) and reduced precision are included.
Every folded case with sampled rows is built to expose the bug (several sampled
rows, moderate temperatures), so the ledger holds it to ``require_observable``.
Three cases of each anchor layout have ``max_bs > bs``: the rows past the live batch
belong to other graph buckets and must not be written. Each case's seed is derived from
its name and the run's seed (``case_seed``), so adding, removing or reordering a case
reseeds no other.
"""

from __future__ import annotations

import hashlib

from harness.pipeline.case import Case

MIXED = (False, True, False, False)  # rows 0, 2, 3 sampled; row 1 greedy
TEMPS = (1.0, 0.0, 0.7, 1.5)


def case_seed(name: str, *, seed: int) -> int:
    """The seed of the case ``name`` in a run seeded ``seed``: 31 bits of a SHA-256 of
    both, the same on every machine and Python."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def standard_matrix(*, seed: int = 0, device: str = "cpu") -> list[Case]:
    """The embedded default the main report runs; ``seed`` and each case's name give its
    seed (``case_seed``)."""
    small = dict(bs=4, gamma=5, vocab_size=257, hidden_size=64, markov_rank=16)
    rows = dict(temperatures=TEMPS, greedy_rows=MIXED)
    greedy = dict(temperatures=(1.0,) * 4, greedy_rows=(True,) * 4)
    # No-anchor layout: gamma=4 divides H=64, so only the head kind decides; H=62 does not.
    no_anchor = dict(small, gamma=4, sample_from_anchor=False)
    specs: list[tuple[str, dict[str, object]]] = [
        ("folded-sampled/vanilla", {**small, **rows}),
        (
            "folded-sampled/gated+confidence",
            {**small, **rows, "head_kind": "gated", "confidence": True, "max_bs": 6},
        ),
        ("folded-sampled/rnn/bf16", {**small, **rows, "head_kind": "rnn", "dtype": "bfloat16"}),
        (
            "folded-sampled/rnn/fp16/V=1025",
            {**small, **rows, "head_kind": "rnn", "dtype": "float16", "vocab_size": 1025},
        ),
        (
            "folded-sampled/vanilla/V=2047/padded",
            {**small, **rows, "vocab_size": 2047, "vocab_padding": 1, "max_bs": 8},
        ),
        ("folded-all-greedy/vanilla", {**small, **greedy}),
        ("greedy-fold/gated", {**small, **greedy, "head_kind": "gated", "folded_sampling": False}),
        ("greedy-fold/vanilla", {**small, **greedy, "folded_sampling": False, "max_bs": 6}),
        (
            "greedy-fold/fused/vanilla",
            {**small, **greedy, "folded_sampling": False, "fused_greedy": True},
        ),
        (
            "greedy-fold/fused/vanilla/bf16",
            {
                **small,
                **greedy,
                "folded_sampling": False,
                "fused_greedy": True,
                "dtype": "bfloat16",
            },
        ),
        (
            "no-anchor/gated/folded",
            {**no_anchor, **rows, "head_kind": "gated", "max_bs": 7},
        ),
        (
            "no-anchor/rnn/greedy-fold",
            {**no_anchor, **greedy, "head_kind": "rnn", "folded_sampling": False},
        ),
        (
            "no-anchor/vanilla/gamma-not-dividing-H",
            {**no_anchor, **rows, "hidden_size": 62},
        ),
        (
            "no-anchor/vanilla/gamma-not-dividing-H/fused",
            {
                **no_anchor,
                **greedy,
                "hidden_size": 62,
                "folded_sampling": False,
                "fused_greedy": True,
            },
        ),
        (
            "no-anchor/vanilla/greedy-fold",
            {**no_anchor, **greedy, "folded_sampling": False, "max_bs": 6},
        ),
        (
            "no-anchor/vanilla/folded-sampled",
            {**no_anchor, **rows, "confidence": True, "max_bs": 8},
        ),
    ]
    return [
        Case(**params, seed=case_seed(name, seed=seed), device=device, name=name)  # type: ignore[arg-type]
        for name, params in specs
    ]
