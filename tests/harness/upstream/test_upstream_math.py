"""The released sglang's draft math against ours (docs/upstream.md, "The math").

- Heads: the package's ``VanillaMarkov``, ``GatedMarkovHead`` and ``RNNHead``, holding the
  reference heads' weights, give the reference's teacher-forced step logits bit for bit
  in float32 for every kind and both anchor layouts, and in bfloat16 when head and base
  logits share the dtype. With a float32 head over bfloat16 base logits the package keeps
  its step logits in ``promote(base, W1) = float32`` where ours rounds them to the base
  dtype: ours is theirs with the bias and then the sum rounded to bfloat16, which changes
  most entries.
- The step sampler: on the package's own draws (``package_draft_exponentials``) our
  exponential race picks the token ``MarkovSampleStep``'s torch path picks, on every row
  and step, at every temperature; the one place they part is a draw whose uniform rounds
  to 1 (the package's key becomes ``-inf``).
"""

from __future__ import annotations

import pytest
import torch

from harness.case import build_inputs, case_block, make_case
from reference import HEAD_KINDS, make_markov_head, previous_tokens
from reference.step_samplers import exponential_race_torch

pytestmark = pytest.mark.upstream
GAMMA, VOCAB, HIDDEN, RANK, BS = 5, 64, 16, 8, 32
KNOWN_UNIT_UNIFORM = {"seed": 0, "row": 13705, "step": 1, "counter": 3, "token": 2}
MARKOV_SAMPLE = "sglang.kernels.ops.speculative.dspark.markov_sample"
UNIFORM_SCALE = 2.0**-32


@pytest.fixture(scope="module")
def loaded():  # type: ignore[no-untyped-def]
    from harness.upstream.loaders.sglang_loader import load_sglang

    return load_sglang()


def package_draft_exponentials(  # type: ignore[no-untyped-def]
    loaded, *, key: int, counter: int, step: int, rows: int, vocab_size: int
) -> torch.Tensor:
    """``[rows, V]`` float32: the package's ``Exp(1)`` draws of one step, drawn outside its
    step kernel (``inf`` where ``u`` is 1).

    Token ``t`` of row ``r`` at step ``s`` with the counter at ``c`` gets the Philox4x32-10
    word ``4 * q + k`` (``q = t // 4``, ``k = t % 4``) of the counter ``(q, r, s, c mod 2^32)``
    under the draft key; the package turns a word ``w`` into ``u = (float32(w) + 0.5) * 2^-32``
    and the exponential ``E = -log1p(-u)``. The words come from the package's own Philox
    function; only that documented map is written here.
    """
    philox = loaded.modules[MARKOV_SAMPLE]._philox
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


def package_block_logits(loaded, head, *, base, prev, hidden) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The package's teacher-forced step logits ``[bs, gamma, V]``: its head's
    ``init_state`` / ``step_bias`` and ``MarkovSampleStep`` keeping the logits."""
    bs, gamma, vocab = base.shape
    step_dtype = head.step_logits_dtype(base.dtype)
    kept = torch.empty(bs, gamma, vocab, dtype=step_dtype)
    state = head.init_state(hidden)
    for step in range(gamma):
        bias, state = head.step_bias(prev[:, step], hidden_states=hidden[:, step], state=state)
        loaded.MarkovSampleStep.torch(
            base_logits=base[:, step],
            bias=bias,
            temperatures=torch.zeros(bs),
            key=0,
            offset=torch.zeros(1, dtype=torch.int64),
            step=step,
            step_dtype=step_dtype,
            logits_out=kept[:, step],
            has_sampled_rows=False,
        )
    return kept


def block_of(kind: str, *, dtype: str, sample_from_anchor: bool):  # type: ignore[no-untyped-def]
    case = make_case(
        bs=BS, gamma=GAMMA, vocab_size=VOCAB, hidden_size=HIDDEN, markov_rank=RANK,
        head_kind=kind, dtype=dtype, sample_from_anchor=sample_from_anchor, seed=3,
    )  # fmt: skip
    inputs = build_inputs(case)
    block = case_block(case, inputs)
    tokens = torch.randint(0, VOCAB, (BS, GAMMA), generator=torch.Generator().manual_seed(4))
    prev = previous_tokens(block.anchor_tokens, tokens)  # [bs, gamma]
    return inputs.model.markov_head, block, prev


@pytest.mark.parametrize("sample_from_anchor", [True, False])
@pytest.mark.parametrize("kind", HEAD_KINDS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_package_heads_give_our_step_logits_bit_for_bit(
    loaded, kind: str, dtype: str, sample_from_anchor: bool
) -> None:  # type: ignore[no-untyped-def]
    from harness.upstream.sglang_convention import package_head

    head, block, prev = block_of(kind, dtype=dtype, sample_from_anchor=sample_from_anchor)
    ours = head.apply_block_logits(
        block.base_logits, token_ids=prev, hidden_states=block.sample_hidden
    )
    theirs = package_block_logits(
        loaded, package_head(head, loaded=loaded),
        base=block.base_logits, prev=prev, hidden=block.sample_hidden,
    )  # fmt: skip
    assert theirs.dtype == ours.dtype == block.base_logits.dtype
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize("kind", HEAD_KINDS)
def test_a_float32_head_over_bfloat16_logits_keeps_float32_step_logits(loaded, kind: str) -> None:  # type: ignore[no-untyped-def]
    """The rounding policies part: ours rounds to the base dtype, 0.5.23 to the promotion."""
    from harness.upstream.sglang_convention import package_head

    _, block, prev = block_of(kind, dtype="bfloat16", sample_from_anchor=True)
    head = make_markov_head(kind, vocab_size=VOCAB, rank=RANK, hidden_size=HIDDEN, seed=5)
    hidden = block.sample_hidden.float()
    ours = head.apply_block_logits(block.base_logits, token_ids=prev, hidden_states=hidden)
    theirs = package_block_logits(
        loaded, package_head(head, loaded=loaded),
        base=block.base_logits, prev=prev, hidden=hidden,
    )  # fmt: skip
    assert ours.dtype == torch.bfloat16 and theirs.dtype == torch.float32
    # theirs keeps the float32 sum base + bias; ours rounds the bias, then the sum
    base = block.base_logits.float()
    bias = (theirs - base).to(torch.bfloat16).float()
    assert torch.equal(ours, (base + bias).to(torch.bfloat16))
    assert (theirs != ours.float()).double().mean().item() > 0.5  # most sums are not bf16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_our_race_on_the_packages_draws_picks_its_tokens(loaded, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    rows = 2048
    logits = (torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(6)) * 3).to(dtype)
    temperatures = torch.tensor([0.6, 1.0, 1.4, 1e-5]).repeat(rows // 4)
    key = loaded.draft_noise_key(7)
    for counter in (0, 1, 2**32 + 1):  # only the low 32 bits of the counter reach Philox
        for step in range(3):
            noise = package_draft_exponentials(
                loaded, key=key, counter=counter, step=step, rows=rows, vocab_size=VOCAB
            )
            ours = exponential_race_torch(
                logits,
                temperatures=temperatures,
                greedy_mask=torch.zeros(rows, dtype=torch.bool),
                noise=noise,
            )
            theirs = loaded.MarkovSampleStep.torch(
                base_logits=logits,
                bias=torch.zeros_like(logits),
                temperatures=temperatures,
                key=key,
                offset=torch.tensor([counter]),
                step=step,
                step_dtype=dtype,
            )
            assert torch.equal(ours, theirs), (counter, step)


def test_a_uniform_of_one_sends_the_packages_key_to_minus_inf(loaded) -> None:  # type: ignore[no-untyped-def]
    """The known draw: its exponential is inf, the package drafts masked token 0; our race
    on the same draw keeps to the lone finite token."""
    known = KNOWN_UNIT_UNIFORM
    rows, key = known["row"] + 1, loaded.draft_noise_key(known["seed"])
    noise = package_draft_exponentials(
        loaded, key=key, counter=known["counter"], step=known["step"], rows=rows, vocab_size=4
    )
    assert noise[known["row"], known["token"]] == float("inf")
    assert int(torch.isinf(noise).sum()) == 1
    logits = torch.full((rows, 4), float("-inf"))
    logits[:, known["token"]] = 0.0
    ones = torch.ones(rows)
    theirs = loaded.MarkovSampleStep.torch(
        base_logits=logits, bias=torch.zeros_like(logits), temperatures=ones, key=key,
        offset=torch.tensor([known["counter"]]), step=known["step"], step_dtype=torch.float32,
    )  # fmt: skip
    ours = exponential_race_torch(
        logits, temperatures=ones, greedy_mask=torch.zeros(rows, dtype=torch.bool), noise=noise
    )
    assert int(theirs[known["row"]]) == 0  # a -inf token
    assert bool((ours == known["token"]).all())
    others = torch.arange(rows) != known["row"]
    assert bool((theirs[others] == known["token"]).all())


def test_a_uniform_of_one_breaks_the_first_pos_inf_rule(loaded) -> None:  # type: ignore[no-untyped-def]
    """+inf at tokens 0 and 2, the known draw on token 2: its key is inf - inf = NaN, and
    the package's NaN-first reduction drafts token 2 where the rule says the first +inf."""
    known = KNOWN_UNIT_UNIFORM
    rows = known["row"] + 1
    logits = torch.zeros(rows, 4)
    logits[:, [0, known["token"]]] = float("inf")
    tokens = loaded.MarkovSampleStep.torch(
        base_logits=logits, bias=torch.zeros_like(logits), temperatures=torch.ones(rows),
        key=loaded.draft_noise_key(known["seed"]), offset=torch.tensor([known["counter"]]),
        step=known["step"], step_dtype=torch.float32,
    )  # fmt: skip
    assert int(tokens[known["row"]]) == known["token"]
    assert int((tokens != 0).sum()) == 1  # every other row yields its first +inf
