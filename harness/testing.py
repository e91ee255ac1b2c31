"""The harness's checks as a library, for engineers who want them in their own suite.

``check_sampler`` runs a sampler (a class, or a ``[NAME=]module:Class`` spec) next
to the reference on the options' matrix (or the cases given), and through the
statistical oracle, and returns its two verdicts with the evidence (the oracle's part in
``Verdict.statistical``); ``assert_lossless`` and ``assert_drop_in`` raise an
``AssertionError`` that lists every failing check and the oracle's verdict;
``case_strategy`` is a Hypothesis strategy of small valid cases. The command line calls
the same code.

Each takes the run's options as one value, ``options``: a ``RunOptions`` or the name of
a profile (``default``, ``ci``, ``thorough``, or one given to ``register_profile``), in
the manner of Hypothesis's settings; keyword arguments named after ``RunOptions``' fields
change the options given (``stats=False``: the verdict rests on the checks alone and its
summary says so; ``time_limit_s``, ``threads``, ``jobs``, ``verifier_noise``,
``oracle_rows``, ``thorough``...). Every case runs on ``options.device``. Every function
reads its verdict from ``harness.judge.judge``, as the command line and the pytest plugin
do.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from harness.case import Case
from harness.options import PROFILES, RunOptions, get_profile, register_profile
from harness.pipeline.check_result import Tier
from harness.pipeline.verdicts import Statistical, Verdict

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

    from harness.plugins.implementations import Implementation

__all__ = [
    "PROFILES",
    "Case",
    "RunOptions",
    "Verdict",
    "assert_drop_in",
    "assert_lossless",
    "case_strategy",
    "check_sampler",
    "get_profile",
    "implementation_of",
    "options_of",
    "oracle_verdict",
    "register_profile",
]

OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(RunOptions))


def options_of(
    options: RunOptions | str = "default", *, require: Tier | str | None = None, **changes: Any
) -> RunOptions:
    """The run's options: ``options`` (a ``RunOptions``, or a profile's name) with
    ``changes`` to its fields, and ``require`` (a ``Tier`` or its label) as what a
    judged implementation must meet."""
    chosen = get_profile(options) if isinstance(options, str) else options
    if not isinstance(chosen, RunOptions):
        raise TypeError(f"options: expected a RunOptions or a profile's name, got {options!r}")
    unknown = sorted(set(changes) - OPTION_NAMES)
    if unknown:
        raise TypeError(f"unknown options {unknown}: expected fields of RunOptions")
    chosen = dataclasses.replace(chosen, **changes)
    if require is None:
        return chosen
    required = Tier.from_label(require)  # ValueError naming the expected words
    return dataclasses.replace(chosen, roles=dataclasses.replace(chosen.roles, require=required))


def implementation_of(spec_or_class: str | type[Any]) -> Implementation:
    """A sampler class, ``module:Class`` or ``NAME=module:Class`` as an implementation."""
    from harness.plugins.implementations import (
        Implementation,
        check_sampler_class,
        parse_impl_spec,
    )

    if inspect.isclass(spec_or_class):
        spec = f"{spec_or_class.__module__}:{spec_or_class.__qualname__}"
        sampler_class = check_sampler_class(spec_or_class, spec=spec)
        return Implementation(spec_or_class.__name__, sampler_class, spec)
    text = str(spec_or_class)
    if "=" not in text.partition(":")[0]:  # no NAME=: name it after its class
        text = f"{text.rpartition(':')[2].rpartition('.')[2]}={text}"
    return parse_impl_spec(text)


def check_sampler(
    spec_or_class: str | type[Any],
    *,
    cases: Sequence[Case] | None = None,
    options: RunOptions | str = "default",
    require: Tier | str | None = None,
    **changes: Any,
) -> Verdict:
    """Run the sampler next to the reference on ``cases`` (default: the options' matrix)
    and, unless the options leave it out, through the statistical oracle; its verdicts,
    with ``ok`` saying whether it meets ``require`` (default the options' roles': drop-in).
    ``options``, ``require`` and ``changes`` as ``options_of`` takes them."""
    from harness.defaults import REFERENCE
    from harness.judge import judge
    from harness.pipeline.matrix import matrix_for
    from harness.plugins.implementations import builtin_implementations

    chosen_options = options_of(options, require=require, **changes)
    implementation = implementation_of(spec_or_class)
    if implementation.name == REFERENCE:
        implementation = dataclasses.replace(implementation, name=f"{REFERENCE}-under-test")
    chosen = list(matrix_for(chosen_options) if cases is None else cases)
    judgement = judge(
        chosen,
        [*builtin_implementations((REFERENCE,)), implementation],
        options=chosen_options,
        oracle_on=(implementation.name,),
    )
    required = chosen_options.roles.require
    return dataclasses.replace(judgement.verdict(implementation.name), required=required)


def oracle_verdict(
    implementation: Implementation, *, options: RunOptions | str = "default", **changes: Any
) -> Statistical:
    """The statistical oracle's verdict on one implementation, under ``options`` (as
    ``options_of`` takes them; the oracle runs whatever their ``stats``)."""
    from harness.judge import judge

    chosen = options_of(options, **{**changes, "stats": True})
    judgement = judge([], [implementation], options=chosen)
    assert judgement.oracle is not None  # the options ask for it
    return judgement.oracle.statisticals[implementation.name]


def _assert(
    spec_or_class: str | type[Any],
    *,
    cases: Sequence[Case] | None,
    options: RunOptions | str,
    require: Tier,
    changes: dict[str, Any],
) -> Verdict:
    verdict = check_sampler(spec_or_class, cases=cases, options=options, require=require, **changes)
    if not verdict.ok:
        lines = [f"{verdict.name} is {verdict.summary()}", verdict.evidence()]
        raise AssertionError("\n".join([*filter(None, lines), verdict.statistical_line()]))
    return verdict


def assert_lossless(
    spec_or_class: str | type[Any],
    *,
    cases: Sequence[Case] | None = None,
    options: RunOptions | str = "default",
    **changes: Any,
) -> Verdict:
    """Raise ``AssertionError`` (every failing check listed, and the oracle's verdict)
    unless the sampler is lossless: its checks and the statistical oracle."""
    return _assert(
        spec_or_class, cases=cases, options=options, require=Tier.LOSSLESS, changes=changes
    )


def assert_drop_in(
    spec_or_class: str | type[Any],
    *,
    cases: Sequence[Case] | None = None,
    options: RunOptions | str = "default",
    **changes: Any,
) -> Verdict:
    """Raise ``AssertionError`` unless the sampler is lossless and drop-in."""
    return _assert(
        spec_or_class, cases=cases, options=options, require=Tier.DROP_IN, changes=changes
    )


def case_strategy(
    *,
    max_bs: int = 4,
    max_gamma: int = 5,
    vocab_sizes: tuple[int, int] | SearchStrategy[int] = (2, 300),
    max_hidden_size: int = 32,
    max_markov_rank: int = 8,
    dtypes: Sequence[str] = ("float32",),
    temperatures: Sequence[float] | SearchStrategy[float] = (0.0, 0.5, 1.0, 1.7),
    max_spare_slots: int = 2,
    max_vocab_padding: int = 0,
    max_seed: int = 2**16,
    every_flag: bool = False,
    draft_vocab: bool = False,
) -> SearchStrategy[Case]:
    """Small valid cases: every head kind and anchor layout, folded or greedy fold, the
    fused flag, per-row temperatures and greedy rows, confidence, rows past the batch.

    ``vocab_sizes`` and ``temperatures`` take bounds or values, or a strategy of their
    own; ``max_spare_slots`` bounds ``max_bs - bs``; ``every_flag`` also draws the fused
    flag on folded cases, where it has no effect (for tests of the case value itself);
    ``draft_vocab`` also draws reduced draft vocabularies (``Case.draft_vocab``).
    """
    from hypothesis import strategies as st

    from reference import HEAD_KINDS

    vocab = vocab_sizes if isinstance(vocab_sizes, st.SearchStrategy) else st.integers(*vocab_sizes)
    temperature = (
        temperatures
        if isinstance(temperatures, st.SearchStrategy)
        else st.sampled_from(tuple(temperatures))
    )

    @st.composite
    def draw_case(draw: Any) -> Case:
        bs = draw(st.integers(1, max_bs))
        folded = draw(st.booleans())
        vocab_size = draw(vocab)
        reduced = draft_vocab and vocab_size > 1 and draw(st.booleans())
        return Case(
            bs=bs,
            gamma=draw(st.integers(1, max_gamma)),
            vocab_size=vocab_size,
            hidden_size=draw(st.integers(1, max_hidden_size)),
            markov_rank=draw(st.integers(1, max_markov_rank)),
            head_kind=draw(st.sampled_from(HEAD_KINDS)),
            sample_from_anchor=draw(st.booleans()),
            dtype=draw(st.sampled_from(tuple(dtypes))),
            folded_sampling=folded,
            fused_greedy=(every_flag or not folded) and draw(st.booleans()),
            temperatures=tuple(draw(st.lists(temperature, min_size=bs, max_size=bs))),
            greedy_rows=tuple(draw(st.lists(st.booleans(), min_size=bs, max_size=bs))),
            confidence=draw(st.booleans()),
            max_bs=bs + draw(st.integers(0, max_spare_slots)),
            vocab_padding=draw(st.integers(0, max_vocab_padding)),
            draft_vocab=draw(st.integers(1, vocab_size - 1)) if reduced else 0,
            seed=draw(st.integers(0, max_seed)),
        )

    return draw_case()
