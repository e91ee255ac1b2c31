"""The CUDA-graph sections: every replay of ``harness.gpu.graphs.capture_and_replay``
checked as an eager run is (the comparison's sections), and whether every graph
redraws its noise."""

from __future__ import annotations

from harness.judgement import Judgement, RedrawVerdict
from harness.render.sections import Section, Table
from harness.render.verdicts import comparison_sections

GRAPH_TITLE = "CUDA graph replays"


def redraw_section(redraws: RedrawVerdict) -> Section:
    """Every graph redraws its noise: on identical inputs two replays differ on sampled
    rows (and in the noise buffer) and agree on greedy rows (``ok``: the judgement's)."""
    checks = [(r.case.label(), check) for r in redraws.results for check in r.redraws]
    bad = [(label, c) for label, c in checks if not c.ok]
    sampled = sum(1 for _, c in checks if c.sampled_tokens_differ is not None)
    table = Table.of(
        ["case", "implementation", "two replays, identical inputs"],
        [
            [label, c.implementation, f"{'ok  ' if c.ok else 'FAIL'} {c.describe()}"]
            for label, c in checks
        ],
    )
    if bad:
        verdict = f"graph replays do NOT redraw their noise as they must in {len(bad)} graph(s)"
    else:
        verdict = (
            f"graph replays redraw their noise: sampled rows differ between two replays on "
            f"identical inputs in {sampled}/{sampled} graphs with sampled rows; greedy rows "
            f"identical in every graph"
        )
    return Section(
        title=f"{GRAPH_TITLE}: noise redrawn on every replay",
        ok=redraws.ok,
        verdict=verdict,
        blocks=(table,),
        data={"redraws": [{"case": label, **c.to_json()} for label, c in checks]},
    )


def graph_sections(judgement: Judgement) -> list[Section]:
    """The comparison sections of the replays' judgement, then the redraw section."""
    assert judgement.redraws is not None  # a graphs judgement holds its redraws
    sections = comparison_sections(judgement)
    for section in sections:
        section.title = f"{GRAPH_TITLE}: {section.title}"
    note = (
        "each replay is checked as an eager run is (replay r: inputs and generator seed = "
        "case seed + r);\nwork and noise draws are those of the captured call, the noise "
        "read back through clones captured into the graph"
    )
    if sections:
        sections[-1].prepend(note)
    sections.insert(max(len(sections) - 1, 0), redraw_section(judgement.redraws))
    return sections
