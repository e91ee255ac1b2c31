"""The analytic work model: from the case's shape and kind alone, what one call of
``legacy``, ``fixed`` or ``reference`` computes.

Walk counts, head steps and noise draws come from the modelled control flow
(``harness.pipeline.control_flow``, shared with the ledger); this module adds GEMM
FLOPs (exact: what ``torch.utils.flop_counter`` counts) and compulsory bytes (an
estimate) of one Markov walk, of the fused greedy walk and of the lm_head. See
``docs/design.md`` ("The work model").
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.case import Case, make_case
from harness.defaults import BUILTIN_NAMES
from harness.pipeline.control_flow import control_flow

INDEX_BYTES = 8  # int64 token ids
NOISE_BYTES = 4  # the noise buffer is float32 whatever the model dtype
MODEL_COUNTERS = (
    "walks",
    "fused_calls",
    "head_steps",
    "sampler_calls",
    "noise_calls",
    "noise_elements",
    "gemm_flops",
)


@dataclass(frozen=True)
class KernelCost:
    """GEMM FLOPs (exact: what ``torch.utils.flop_counter`` counts) and compulsory bytes
    (an estimate: every operand read once and every result written once, unfused)."""

    gemm_flops: int
    bytes: int

    def times(self, n: int) -> KernelCost:
        return KernelCost(self.gemm_flops * n, self.bytes * n)


def head_step_cost(
    *, bs: int, vocab_size: int, markov_rank: int, hidden_size: int, head_kind: str, itemsize: int
) -> KernelCost:
    """One ``step_bias`` for ``bs`` rows: ``W2 . W1[prev]`` plus the kind's gate/recurrence.

    vanilla: ``2 bs r V``; gated adds ``gate = Linear(H + r, r)``: ``2 bs (H + r) r``;
    rnn adds ``joint = Linear(2r + H, 3r)``: ``2 bs (2r + H) 3r``.
    """
    v, r, h = vocab_size, markov_rank, hidden_size
    flops = 2 * bs * r * v
    weights = r * v + bs * r  # W2 and the gathered W1 rows
    activations = bs * v  # the bias written
    if head_kind == "gated":
        flops += 2 * bs * (h + r) * r
        weights += (h + r) * r + r
        activations += bs * h
    elif head_kind == "rnn":
        flops += 2 * bs * (2 * r + h) * 3 * r
        weights += (2 * r + h) * 3 * r + 3 * r
        activations += bs * (h + 2 * r)
    return KernelCost(flops, (weights + activations) * itemsize)


def walk_cost(case: Case, *, folded: bool, collect_corrected: bool) -> KernelCost:
    """One Markov walk over the block (``gamma`` steps), sampler included.

    Per step: the head's bias, ``step = base[:, k] + bias`` (read base, write step),
    the corrected-logits copy when collected, and the step sampler: greedy reads
    the step logits; the race writes and reads ``[bs, V]`` float32 noise and reads the
    step logits. The race and argmax do no GEMM, so FLOPs are the head's alone.
    """
    bs, v, item = case.bs, case.vocab_size, case.torch_dtype.itemsize
    step = head_step_cost(
        bs=bs,
        vocab_size=v,
        markov_rank=case.markov_rank,
        hidden_size=case.hidden_size,
        head_kind=case.head_kind,
        itemsize=item,
    )
    logits_bytes = bs * v * item
    step_bytes = step.bytes + 2 * logits_bytes + bs * INDEX_BYTES
    step_bytes += logits_bytes if collect_corrected else 0
    step_bytes += logits_bytes + (2 * bs * v * NOISE_BYTES if folded else 0)
    return KernelCost(step.gemm_flops, step_bytes).times(case.gamma)


def fused_greedy_cost(case: Case) -> KernelCost:
    """The vanilla head's fused greedy walk: one fp32 ``addmm`` ``[bs, r] x [r, V]`` per step."""
    bs, v, r = case.bs, case.vocab_size, case.markov_rank
    step_bytes = (r * v + bs * r) * case.torch_dtype.itemsize + 2 * bs * v * 4 + bs * INDEX_BYTES
    return KernelCost(2 * bs * r * v, step_bytes).times(case.gamma)


def lm_head_cost(case: Case) -> KernelCost:
    """``base = hidden[bs*gamma, H] @ W[V_padded, H].T``: ``2 bs gamma H V_padded`` FLOPs.

    In both layouts the lm_head sees ``bs * gamma`` rows (the no-anchor layout drops
    the anchor row first).
    """
    rows, h = case.bs * case.gamma, case.hidden_size
    v_padded = case.vocab_size + case.vocab_padding
    item = case.torch_dtype.itemsize
    return KernelCost(2 * rows * h * v_padded, (v_padded * h + rows * h + rows * v_padded) * item)


@dataclass(frozen=True)
class PredictedWork:
    """What the model says one call of an implementation does on a case."""

    implementation: str
    raises: str | None  # exception type name, when the call must raise
    walks: int = 0
    fused_calls: int = 0
    head_steps: int = 0
    sampler_calls: int = 0
    noise_calls: int = 0
    noise_elements: int = 0
    pass1_views: int = 0  # legacy only: the hidden_states.view of pass 1
    gemm_flops: int = 0
    walk: KernelCost = KernelCost(0, 0)  # one sampling walk as this case runs it
    lm_head: KernelCost = KernelCost(0, 0)

    def counter(self, key: str) -> int:
        return int(getattr(self, key))


def predict_work(case: Case, implementation: str) -> PredictedWork:
    """The analytic work model of one call: the modelled control flow
    (``harness.pipeline.control_flow``) in numbers.

    Walks, fused calls, head steps, step-sampler calls and noise draws come from the
    control flow; each folded head step draws one ``[bs, V]`` noise tensor; GEMM FLOPs
    are the lm_head's plus each head step's plus each fused walk's.
    """
    if implementation not in BUILTIN_NAMES:
        raise ValueError(f"no work model for {implementation!r}; expected one of {BUILTIN_NAMES}")
    flow = control_flow(case, implementation)
    walk = walk_cost(case, folded=case.folded_sampling, collect_corrected=case.folded_sampling)
    lm_head = lm_head_cost(case)
    if flow.raises is not None:
        return PredictedWork(implementation, raises=flow.raises, walk=walk, lm_head=lm_head)
    step_flops = head_step_cost(
        bs=case.bs,
        vocab_size=case.vocab_size,
        markov_rank=case.markov_rank,
        hidden_size=case.hidden_size,
        head_kind=case.head_kind,
        itemsize=case.torch_dtype.itemsize,
    ).gemm_flops
    fused_flops = fused_greedy_cost(case).gemm_flops
    return PredictedWork(
        implementation,
        raises=None,
        walks=flow.walks,
        fused_calls=flow.fused_calls,
        head_steps=flow.head_steps,
        sampler_calls=flow.sampler_calls,
        noise_calls=flow.noise_calls,
        noise_elements=flow.noise_calls * case.bs * case.vocab_size,
        pass1_views=flow.pass1_views,
        gemm_flops=(
            lm_head.gemm_flops + flow.head_steps * step_flops + flow.fused_calls * fused_flops
        ),
        walk=walk,
        lm_head=lm_head,
    )


def production_shape(case: Case, *, hidden_size: int = 4096) -> Case:
    """The case's mode at a production shape (DeepSeek V3 vocabulary, gamma 7, r 256,
    bs 8, a production draft hidden size) for the model's projection only."""
    return make_case(
        bs=8,
        gamma=7,
        vocab_size=129280,
        hidden_size=hidden_size,
        markov_rank=256,
        head_kind=case.head_kind,
        folded_sampling=case.folded_sampling,
        dtype=case.dtype,
    )
