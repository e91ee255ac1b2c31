"""Functional plug-ins: a sampler that is a function, wrapped into a sampler object.

vLLM- and DeepSpec-style samplers are functions of one block, not a graph tail
hook with static buffers. ``functional_sampler_class`` checks such a function
against ``BlockSamplerFunction`` once and returns a ``DsparkDraftSampler``-shaped
class: the buffers, staging and anchor layout come from
``reference.sampler_base.DraftSamplerBase``; the function picks the tokens and says
which logits it drew them from.
"""

from __future__ import annotations

import inspect

import torch

from harness.plugins.errors import ImplementationError
from harness.plugins.protocol import BlockSamplerFunction, DraftSampler
from reference.sampler_base import DraftSamplerBase

FUNCTION_KEYWORDS = (
    "base_logits",
    "anchor_tokens",
    "hidden_states",
    "temperatures",
    "greedy_mask",
    "markov_head",
    "folded_sampling",
)
FUNCTION_FORM = (
    "def sample(*, base_logits, anchor_tokens, hidden_states, temperatures, greedy_mask, "
    "markov_head, folded_sampling) -> (tokens[bs, gamma] int64, corrected[bs, gamma, V])"
)


def check_block_sampler_function(function: object, *, spec: str) -> BlockSamplerFunction:
    """Raise one ``ImplementationError`` listing what does not fit ``BlockSamplerFunction``."""
    if not callable(function):
        raise ImplementationError(f"--impl {spec}: {function!r} is not callable")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError) as error:
        raise ImplementationError(f"--impl {spec}: cannot read its signature ({error})") from None
    kinds = inspect.Parameter
    takes_any = any(p.kind is kinds.VAR_KEYWORD for p in parameters.values())
    mismatches = [
        f"does not accept the keyword {name}="
        for name in FUNCTION_KEYWORDS
        if not takes_any
        and (name not in parameters or parameters[name].kind is kinds.POSITIONAL_ONLY)
    ]
    mismatches += [
        f"parameter {name!r} is required but is not one the harness passes"
        for name, p in parameters.items()
        if name not in FUNCTION_KEYWORDS
        and p.default is kinds.empty
        and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
    ]
    if mismatches:  # every mismatch at once, on one line
        raise ImplementationError(
            f"--impl {spec}: {getattr(function, '__name__', function)!r} is not a block "
            f"sampler function: {'; '.join(mismatches)}\n  expected {FUNCTION_FORM}"
        )
    return function


def _checked_output(
    output: object, *, bs: int, gamma: int, vocab: int, need_corrected: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The function's ``(tokens, corrected)``; a wrong shape is a clear ``ValueError``."""
    if not isinstance(output, tuple) or len(output) != 2:
        raise ValueError(f"a block sampler must return (tokens, corrected), got {output!r}")
    tokens, corrected = output
    if not isinstance(tokens, torch.Tensor) or tuple(tokens.shape) != (bs, gamma):
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"tokens must be [bs={bs}, gamma={gamma}], got {shape}")
    if tokens.dtype != torch.int64:
        raise ValueError(f"tokens must be int64, got {tokens.dtype}")
    if corrected is None:
        if need_corrected:
            raise ValueError("corrected logits are required when the case samples (folded)")
        return tokens, None
    if not isinstance(corrected, torch.Tensor) or tuple(corrected.shape) != (bs, gamma, vocab):
        described = (
            tuple(corrected.shape) if isinstance(corrected, torch.Tensor) else type(corrected)
        )
        raise ValueError(f"corrected must be [bs={bs}, gamma={gamma}, V={vocab}], got {described}")
    return tokens, corrected


def functional_sampler_class(function: object, *, spec: str) -> type[DraftSampler]:
    """A ``DsparkDraftSampler``-shaped class that calls ``function`` once per proposal."""
    block_sampler = check_block_sampler_function(function, spec=spec)

    class FunctionalDraftSampler(DraftSamplerBase):
        """Buffers and staging from the base; tokens and their logits from the function."""

        def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
            block = self.prepare_block(hidden_states, input_ids)
            bs = block.bs
            greedy_mask = self.greedy_mask[:bs]
            if not self.folded_sampling:  # greedy fold: every row takes the argmax
                greedy_mask = torch.ones_like(greedy_mask)
            tokens, corrected = _checked_output(
                block_sampler(
                    base_logits=block.base_logits,
                    anchor_tokens=block.anchor_tokens,
                    hidden_states=block.sample_hidden,
                    temperatures=self.temperatures[:bs],
                    greedy_mask=greedy_mask,
                    markov_head=self.model.markov_head,
                    folded_sampling=self.folded_sampling,
                ),
                bs=bs,
                gamma=self.gamma,
                vocab=self.model.vocab_size,
                need_corrected=self.folded_sampling,
            )
            if self.folded_sampling:
                self.store_corrected(bs, corrected)
            self.emit(block, tokens)

    name = getattr(function, "__name__", "function")
    FunctionalDraftSampler.__name__ = FunctionalDraftSampler.__qualname__ = f"Functional[{name}]"
    FunctionalDraftSampler.block_sampler = staticmethod(block_sampler)  # type: ignore[attr-defined]
    return FunctionalDraftSampler
