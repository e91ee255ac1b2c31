"""What one decode of the statistical oracle runs: its scope (``docs/statistics.md``).

The config after every cut the verifier and the implementation's convention declare
(``harness.oracle_cut``: an interpreted part that cannot afford the defaults), without
the heads the convention cannot express (``Convention.outside_contract``).
``scope_under`` reads them where the implementation is loaded; ``scope_in_domain`` asks
the implementation's trust domain (``scope_task``), where only a plug-in's own process
can read its convention (``--isolate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from harness.executor import Executor, TimeLimited, WorkerFailure, for_domain
from harness.oracle_cut import DeclaresCut, JudgedOnItsLaw, OracleCut, ReadsTruncation
from harness.oracles.decode import oracle_case
from harness.oracles.problem import StatsConfig, StatsError
from harness.plugins.implementations import Implementation
from harness.upstream.dispatch import convention_of
from harness.wire import answer_types
from reference.verifier import Verifier

SCOPE_LIMIT_S = 600.0  # reading a convention (and loading the plug-in in a fresh worker)


@dataclass(frozen=True)
class Scope:
    """What one implementation's decode under one verifier runs: ``config`` after every
    cut the verifier and the implementation's convention declare (``None``: no head of
    the config is inside the convention's contract, nothing is decoded), the cuts, and
    each head its convention cannot express (head kind -> why), never decoded."""

    config: StatsConfig | None
    cuts: tuple[OracleCut, ...] = ()
    heads_not_run: tuple[tuple[str, str], ...] = ()

    @property
    def narrowed(self) -> bool:
        """Whether it runs less than the config it was asked for."""
        return bool(self.cuts or self.heads_not_run)


def scope_under(
    config: StatsConfig, *, verifier: Verifier, implementation: Implementation | None = None
) -> Scope:
    """The scope of a decode at ``config`` under ``verifier`` (of ``implementation``,
    where one is named): at the verifier's own law where it names one
    (``JudgedOnItsLaw``), each declared cut applied in turn (``cut_config``), then the
    heads outside the implementation's contract dropped (``heads_outside``)."""
    config = at_its_law(config, verifier=verifier)
    parts: list[object] = [verifier]
    if implementation is not None:
        parts.append(convention_of(implementation.sampler_class))
    cuts = tuple(
        p.oracle_cut for p in parts if isinstance(p, DeclaresCut) and p.oracle_cut is not None
    ) + truncation_cut(config, verifier=verifier)
    cuts = tuple(c for c in cuts if cut_config(config, c) != config)  # only those that cut
    outside = {} if implementation is None else heads_outside(cut_all(config, cuts), implementation)
    return scope_of(config, cuts=cuts, heads_not_run=tuple(outside.items()))


def at_its_law(config: StatsConfig, *, verifier: Verifier) -> StatsConfig:
    """``config`` judged against the verifier's own server's law where it names one
    (``JudgedOnItsLaw``)."""
    if isinstance(verifier, JudgedOnItsLaw):
        return replace(config, law=verifier.oracle_law)
    return config


def truncation_cut(config: StatsConfig, *, verifier: Verifier) -> tuple[OracleCut, ...]:
    """The cut to the temperature groups of a verifier that applies no truncation
    (``ReadsTruncation``), where ``config`` has truncated groups: at the rows the
    temperature groups take, so theirs are what they are beside the truncated sets."""
    if not config.truncated_at() or (
        isinstance(verifier, ReadsTruncation) and verifier.reads_truncation
    ):
        return ()
    by = f"{verifier.name}: applies no top-k, top-p or min-p to its target"
    return (OracleCut(rows=config.temperature_rows, by=by, truncated=False),)


def cut_all(config: StatsConfig, cuts: Sequence[OracleCut]) -> StatsConfig:
    """``config`` under every cut in turn."""
    for cut in cuts:
        config = cut_config(config, cut)
    return config


def scope_of(
    config: StatsConfig,
    *,
    cuts: tuple[OracleCut, ...],
    heads_not_run: tuple[tuple[str, str], ...],
) -> Scope:
    """The scope of a decode at ``config`` under ``cuts`` without ``heads_not_run``:
    ``scope_under``'s, or the one an implementation's worker states (``--isolate``,
    where only the worker can read a plug-in's convention)."""
    ran = cut_all(config, cuts)
    left_out = {kind for kind, _ in heads_not_run}
    inside = tuple(k for k in ran.head_kinds if k not in left_out)
    return Scope(
        config=replace(ran, head_kinds=inside) if inside else None,
        cuts=cuts,
        heads_not_run=heads_not_run,
    )


def cut_config(config: StatsConfig, cut: OracleCut) -> StatsConfig:
    """``config`` under one cut: at most ``cut.rows`` rows per head, only the targets and
    heads the cut keeps, the cut's rounds and stage rows where it names them; ``config``
    itself when the cut changes nothing. ``StatsError`` when it keeps none of the config's
    targets or heads."""
    targets = tuple(t for t in config.targets if cut.targets is None or t.name in cut.targets)
    if not targets:
        raise StatsError(
            f"{cut.by}: the oracle's cut keeps the targets {list(cut.targets or ())}, "
            f"the config has {[t.name for t in config.targets]}"
        )
    heads = tuple(k for k in config.head_kinds if cut.heads is None or k in cut.heads)
    if not heads:
        raise StatsError(
            f"{cut.by}: the oracle's cut keeps the heads {list(cut.heads or ())}, "
            f"the config has {list(config.head_kinds)}"
        )
    ran = replace(
        config,
        rows=min(config.rows, cut.rows),
        targets=targets,
        head_kinds=heads,
        rounds=config.rounds if cut.rounds is None else cut.rounds,
        truncated=config.truncated if cut.truncated else (),
        stage_rows=config.stage_rows if cut.stage_rows is None else cut.stage_rows,
    )
    return config if ran == config else ran


def heads_outside(config: StatsConfig, implementation: Implementation) -> dict[str, str]:
    """Each head kind of ``config`` whose rows the implementation's convention cannot
    express (``Convention.outside_contract`` on the oracle's case of that head), and why."""
    sampler_class = implementation.sampler_class
    convention = convention_of(sampler_class)
    reasons = {
        kind: convention.outside_contract(
            oracle_case(config, head_kind=kind, seed=config.seed), sampler_class=sampler_class
        )
        for kind in config.head_kinds
    }
    return {kind: why for kind, why in reasons.items() if why is not None}


def scope_task(
    implementation: Implementation, *, config: StatsConfig, verifier: Verifier
) -> tuple[tuple[OracleCut, ...], tuple[tuple[str, str], ...]]:
    """A task: the cuts and the heads outside the contract of the implementation's decode
    at ``config`` (``scope_under``), as plain data."""
    scope = scope_under(config, verifier=verifier, implementation=implementation)
    return scope.cuts, scope.heads_not_run


answer_types(OracleCut)


def scope_in_domain(
    config: StatsConfig, *, verifier: Verifier, implementation: Implementation, executor: Executor
) -> Scope:
    """``scope_under``, its convention read in the implementation's trust domain (the judge
    may hold a stand-in for a plug-in loaded there only). A task that gives no answer, or
    not a scope, leaves the verifier's cuts alone: the decode then meets the same failure
    and records it."""
    future = for_domain(executor, implementation.trust_domain).submit(
        TimeLimited(scope_task, SCOPE_LIMIT_S), implementation, config=config, verifier=verifier
    )
    try:
        answer = future.result()
    except WorkerFailure:
        return scope_under(config, verifier=verifier)
    if isinstance(answer, tuple) and len(answer) == 2:
        cuts, heads = answer
        if all(isinstance(c, OracleCut) for c in cuts) and all(
            isinstance(h, tuple) and len(h) == 2 and all(isinstance(x, str) for x in h)
            for h in heads
        ):
            return scope_of(
                at_its_law(config, verifier=verifier), cuts=tuple(cuts), heads_not_run=tuple(heads)
            )
    return scope_under(config, verifier=verifier)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def scope_label(scope: Scope) -> str:
    """``3 targets x 3 heads``, and what was cut or left out, for the progress line."""
    if scope.config is None:
        return "no head inside its contract: not run"
    ran = scope.config
    rows = ", ".join(f"{t.name} {ran.target_rows(t)}" for t in ran.targets)
    cut = f"; cut by {', '.join(c.by for c in scope.cuts)}" if scope.cuts else ""
    return (
        f"{_count(len(ran.targets), 'target')} x {_count(len(ran.head_kinds), 'head')}, "
        f"rows per head {rows}, "
        f"{_count(ran.rounds, 'round')}{cut}"
    )
