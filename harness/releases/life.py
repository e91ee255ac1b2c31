"""A release's life across the junction of its drafter and its verifier, as its row
holds it (docs/releases.md, "What a release's row holds"; docs/design.md, "A life across
the junction").

``release_life`` lives ``harness.oracles.junction_judge``'s life with the release's own
sampler as the drafter, on the junction server of its server's verifier
(``harness.oracles.junction_servers``: vLLM's own ``rejection_sample`` entered with the
slot-indexed buffers its model runner keeps, sglang's ``BlockwiseRejection``, or ours,
chain, where the harness has none), at the depth its era sets (``ReleaseEra.life_rows``:
a vLLM release's drafter runs under Triton's interpreter) and gives the row's ``life``
record: the states that ran and at how many rows each, with the bound each state states,
what of its server stands in (its batch building, where the harness does not run the
release's) and why, and the findings, each naming the state that exposed it.
"""

from __future__ import annotations

from typing import NamedTuple, TypedDict

from harness.oracles.junction_judge import JUNCTION_ROWS, JunctionVerdict, judge_junction
from harness.oracles.junction_servers import junction_server
from harness.upstream.releases.eras import ReleaseEra

LAW = "junction_law"


class LifeState(TypedDict):
    """One request state of the life: its judged rows, its law test's p-value and the
    fraction of its rows a fixed-token defect must reach to be seen (None: no bound)."""

    rows: int
    p_value: float
    bound: float | None


class LifeRecord(TypedDict):
    """A release's life, as its row holds it."""

    lossless: bool
    server: str  # the junction server: the verifier it enters, as the server enters it
    kept: list[str]  # the buffers the server keeps between steps
    verifier_reads: list[str]  # those the verifier reads (poisoned before the first step)
    steps: int
    calls: int
    depth: str  # the rows a state asked for, and why where it is cut
    states: dict[str, LifeState]
    stands_in: list[str]


class LifeFinding(NamedTuple):
    """One failed check of a life: its class and its evidence, naming the state."""

    check: str
    evidence: str


def life_depth(era: ReleaseEra | None, *, asked: int | None = None) -> tuple[int, str]:
    """The rows a state the release's life asks for (``asked``, given by ``--life-rows``;
    else its era's), and the words that say so."""
    if asked is not None:
        cut = "" if asked >= JUNCTION_ROWS else f" (full depth is {JUNCTION_ROWS:,})"
        return asked, f"{asked:,} rows a state asked (--life-rows){cut}"
    rows = JUNCTION_ROWS if era is None or era.life_rows is None else era.life_rows
    if rows >= JUNCTION_ROWS:
        return rows, f"full: {rows:,} rows a state asked"
    return rows, (
        f"{rows} rows a state asked: the depth it reached within the row's time bound "
        f"(its drafter, batch building and verifier under Triton's interpreter; full depth "
        f"is {JUNCTION_ROWS:,}: --life-rows {JUNCTION_ROWS})"
    )


def release_life(
    sampler_class: type,
    *,
    era: ReleaseEra | None,
    verifier: str,
    seed: int,
    rows: int | None = None,
) -> tuple[LifeRecord, list[LifeFinding]]:
    """The life of ``sampler_class`` (the release's sampler, loaded) on the junction
    server of ``verifier``, at ``rows`` a state (``None``: its era's depth); its record
    and its findings."""
    rows, depth = life_depth(era, asked=rows)
    server = junction_server(verifier)
    verdict = judge_junction(sampler_class, rows=rows, seed=seed, server_class=server)
    record: LifeRecord = {
        "lossless": verdict.ok,
        "server": f"{server.__qualname__} (verifier: {server.VERIFIER})",
        "kept": list(verdict.kept),
        "verifier_reads": list(verdict.verifier_reads),
        "steps": verdict.steps,
        "calls": verdict.calls,
        "depth": depth,
        "states": {
            law.state: {"rows": law.rows, "p_value": law.p_value, "bound": law.bound}
            for law in verdict.laws
        },
        "stands_in": list(server.STANDS_IN),
    }
    return record, life_findings(verdict)


def life_findings(verdict: JunctionVerdict) -> list[LifeFinding]:
    """Each failed check of the life, its evidence naming the request state that
    exposed it."""
    if verdict.raised is not None:  # its life ended there: nothing else was judged
        return [LifeFinding("ran", f"the life across the junction: {verdict.raised}")]
    said = dict(verdict.exposed_in)
    found = [
        LifeFinding(check, f"the life across the junction, {said[check]}: {line}")
        for check, line in (
            ("junction_leftovers", verdict.leftovers),
            ("junction_keys", verdict.keys),
        )
        if line is not None
    ]
    rejected = [law for law in verdict.laws if law.rejected]
    if rejected or verdict.incomplete:
        states = ", ".join(
            f"{law.state} (p = {law.p_value:.3g}, {law.rows} rows)" for law in rejected
        )
        short = (
            f"{verdict.incomplete} judged segment(s) short of their tokens"
            if verdict.incomplete
            else ""
        )
        found.append(
            LifeFinding(
                LAW,
                f"the life across the junction, {states or short}: the committed tokens "
                "do not fit the target's law",
            )
        )
    found += [
        LifeFinding(
            f.check, f"the life across the junction, a drafter call (every state): {f.describe()}"
        )
        for f in verdict.held.findings
    ]
    return found
