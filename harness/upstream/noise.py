"""The released sampler's draft noise, drawn outside its step kernel, so our exponential
race can run on the very draws the package's ``MarkovSampleStep`` uses.

Token ``t`` of row ``r`` at step ``s`` with the counter at ``c`` gets the Philox4x32-10
word ``4 * q + k`` (``q = t // 4``, ``k = t % 4``) of the counter ``(q, r, s, c mod 2^32)``
under the draft key; the package turns a word ``w`` into ``u = (float32(w) + 0.5) * 2^-32``
and the exponential ``E = -log1p(-u)`` (docs/upstream.md, "The math"). The words come
from the package's own Philox function; only that documented map is written here.
"""

from __future__ import annotations

import torch

from harness.upstream.sglang_loader import load_sglang

MARKOV_SAMPLE = "sglang.kernels.ops.speculative.dspark.markov_sample"
UNIFORM_SCALE = 2.0**-32


def draft_exponentials(
    *, key: int, counter: int, step: int, rows: int, vocab_size: int
) -> torch.Tensor:
    """``[rows, V]`` float32: the ``Exp(1)`` draws of one step (``inf`` where ``u`` is 1)."""
    philox = load_sglang().modules[MARKOV_SAMPLE]._philox
    tokens = torch.arange(vocab_size, dtype=torch.int64)  # [V]
    quad_words = philox(
        key,
        (tokens // 4)[None, :],  # [1, V]: the quad of each token
        torch.arange(rows, dtype=torch.int64)[:, None],  # [rows, 1]
        torch.full((1, 1), step, dtype=torch.int64),
        torch.full((1, 1), counter & 0xFFFFFFFF, dtype=torch.int64),
    )  # four [rows, V] words per token's quad
    lane = (tokens % 4).expand(rows, vocab_size)  # [rows, V]: which of the four is the token's
    word = torch.zeros(rows, vocab_size, dtype=torch.int64)
    for k, words in enumerate(quad_words):
        word = torch.where(lane == k, words.expand(rows, vocab_size), word)
    uniform = (word.float() + 0.5) * UNIFORM_SCALE  # [rows, V]: in (0, 1], may round to 1
    return -torch.log1p(-uniform)
