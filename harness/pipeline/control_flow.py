"""The control flow of one call, modelled once: which walks run, which raise, what each
draws and which walk's results are emitted, for ``legacy``, ``fixed`` and ``reference``.

Both the divergence ledger (``harness.pipeline.ledger``: which classes legacy must
show) and the work model (``harness.measure.model``: how much each call computes)
read this one description, so they cannot drift apart. See ``docs/design.md``
("The bug" and "The work model").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from harness.case import Case
from harness.defaults import BUILTIN_NAMES, FIXED, LEGACY


class Pass(enum.Enum):
    """The pass of a call that wrote an output."""

    FUSED = "fused"  # the fused greedy walk
    WALK_1 = "walk 1"  # the first sample_block walk
    WALK_2 = "walk 2"  # legacy's second walk
    OWN_LOOP = "own loop"  # the reference's own step loop


@dataclass(frozen=True)
class ControlFlow:
    """What one call of an implementation does on a case, by the case's kind alone."""

    implementation: str
    raises: str | None  # exception type name, when the call must raise
    gamma: int
    folded: bool  # folded sampling: the walk steps draw noise and write corrected_out
    fused_calls: int = 0  # fused greedy walks that produced tokens
    walks: int = 0  # sample_block calls
    own_steps: int = 0  # head steps of an implementation's own loop (the reference)
    pass1_views: int = 0  # legacy: the hidden_states.view(bs, gamma, -1) of pass 1
    tokens_from: Pass | None = None  # which pass wrote ``out`` (None: the call raises)
    corrected_from: Pass | None = None  # which pass wrote ``corrected_out`` (folded only)

    @property
    def sampler_calls(self) -> int:
        """Step-sampler calls: one per head step inside a ``sample_block`` walk."""
        return self.walks * self.gamma

    @property
    def head_steps(self) -> int:
        return self.sampler_calls + self.own_steps

    @property
    def noise_calls(self) -> int:
        """``exponential_`` calls: one ``[bs, V]`` draw per head step, folded only."""
        return self.head_steps if self.folded else 0


def legacy_pass1_error(case: Case) -> str | None:
    """The exception legacy's pass 1 raises on this case, or ``None``.

    Pass 1 runs unless the fused path produced tokens, and is given
    ``hidden_states.view(bs, gamma, -1)``. In the no-anchor layout the buffer has
    ``bs (gamma + 1) H`` elements: the view itself fails (``RuntimeError``) unless
    ``gamma`` divides ``H``; when it succeeds its rows are ``(gamma + 1) H / gamma``
    wide, which a hidden-state head rejects (``ValueError``) and a vanilla head ignores.
    """
    if case.sample_from_anchor or case.fused_path_available:
        return None
    if case.hidden_size % case.gamma:
        return "RuntimeError"
    return None if case.head_kind == "vanilla" else "ValueError"


def legacy_pass1_cause(case: Case) -> str | None:
    """Why legacy's pass 1 raises on this case (``legacy_pass1_error``), or ``None`` when
    it does not: the documented bug (``docs/design.md``, "The bug"), in the case's numbers."""
    error = legacy_pass1_error(case)
    if error is None:
        return None
    view = "the documented bug: legacy's first walk takes hidden_states.view(bs, gamma, -1)"
    layout = f"in the layout with the anchor row ({case.gamma + 1} rows per request)"
    if error == "RuntimeError":
        return (
            f"{view}, which fails {layout} when gamma does not divide H "
            f"(gamma={case.gamma}, H={case.hidden_size})"
        )
    width = (case.gamma + 1) * case.hidden_size // case.gamma
    return (
        f"{view}, whose rows {layout} are {width} wide, not H={case.hidden_size}: "
        f"the {case.head_kind} head reads hidden states and rejects them"
    )


def control_flow(case: Case, implementation: str) -> ControlFlow:
    """The modelled call of ``implementation`` (one of ``BUILTIN_NAMES``) on ``case``.

    - The fused greedy path produces tokens when sampling is not folded, the flag is on
      and the head has one (vanilla); other heads return ``None`` without work.
    - ``fixed`` walks once unless the fused path produced tokens and emits that walk.
    - ``legacy`` runs pass 1 (on the wrong view) unless fused tokens exist, then pass 2
      unconditionally: ``out`` comes from the last walk, ``corrected_out`` from pass 1.
    - ``reference`` runs its own step loop: no ``sample_block`` walk, ``gamma`` steps.
    """
    if implementation not in BUILTIN_NAMES:
        raise ValueError(f"no control-flow model for {implementation!r}; expected {BUILTIN_NAMES}")
    fused, folded = case.fused_path_available, case.folded_sampling
    gamma = case.gamma
    if implementation == LEGACY:
        error = legacy_pass1_error(case)
        if error is not None:
            return ControlFlow(implementation, raises=error, gamma=gamma, folded=folded)
        walks = 1 if fused else 2
        return ControlFlow(
            implementation,
            raises=None,
            fused_calls=int(fused),
            walks=walks,
            pass1_views=int(not fused),
            tokens_from=Pass.WALK_1 if walks == 1 else Pass.WALK_2,
            corrected_from=Pass.WALK_1 if folded else None,
            gamma=gamma,
            folded=folded,
        )
    if implementation == FIXED:
        return ControlFlow(
            implementation,
            raises=None,
            fused_calls=int(fused),
            walks=0 if fused else 1,
            tokens_from=Pass.FUSED if fused else Pass.WALK_1,
            corrected_from=Pass.WALK_1 if folded else None,
            gamma=gamma,
            folded=folded,
        )
    return ControlFlow(
        implementation,
        raises=None,
        fused_calls=int(fused),
        own_steps=0 if fused else gamma,
        tokens_from=Pass.FUSED if fused else Pass.OWN_LOOP,
        corrected_from=Pass.OWN_LOOP if folded else None,
        gamma=gamma,
        folded=folded,
    )
