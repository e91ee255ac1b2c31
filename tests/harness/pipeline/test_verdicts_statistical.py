"""The statistical oracle's verdict inside each implementation's lossless verdict.

A planted defect whose draws cannot be replayed (``ReusedNoiseSampler``: one noise
draw reused by every step) passes every lossless check, so only the oracle can
see it: its verdict must be "not lossless", naming the head/group/position that
carried the rejection. The correct alternative designs stay "lossless; not
drop-in" with the statistical part passing; without the oracle the verdict says
its statistical part was not run. The comparison tables are Markdown tables in a
report. Fixed seeds throughout.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.exit_codes import ExitCode
from harness.judge import judge_oracle
from harness.judgement import Judgement, OracleVerdict
from harness.options import Roles, RunOptions
from harness.pipeline.check_result import Tier
from harness.pipeline.compare import compare
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.verdicts import implementation_verdict
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.sections import Section, Table
from harness.render.verdicts import comparison_sections
from tests.helpers import judged_records
from tests.plugins import alternative_samplers
from tests.plugins.stats_defects import ReusedNoiseSampler
from tests.session_share import computed_once

ALTERNATIVES = {
    "pre": alternative_samplers.PrestagedNoiseSampler,  # replayable: one staged draw
    "gumbel": alternative_samplers.UniformGumbelSampler,  # not replayable: uniform_
    "multi": alternative_samplers.MultinomialSampler,  # not replayable: multinomial
}
NOT_REPLAYABLE = ("reused", "gumbel", "multi")
REUSED_IMPL = "reused=tests.plugins.stats_defects:ReusedNoiseSampler"
UNIFORMS_IMPL = "uniforms=tests.plugins.shared_stream_defects:VerifierUniformsSampler"


def _plugins() -> list[Implementation]:
    reused = Implementation("reused", ReusedNoiseSampler, "test:ReusedNoiseSampler")
    others = [Implementation(n, cls, f"test:{cls.__name__}") for n, cls in ALTERNATIVES.items()]
    return [reused, *others]


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], OracleVerdict]:
    """The standard matrix's records and the oracle's verdicts, for fixed, reference, the
    planted defect and the three alternative designs (once a session)."""
    return computed_once(tmp_path_factory, "statistical-verdicts-judged", _judged)


def _judged() -> tuple[list[dict], OracleVerdict]:
    implementations = [*builtin_implementations(("reference", "fixed")), *_plugins()]
    records = compare(
        standard_matrix(seed=0), implementations, options=RunOptions(require_observable=True)
    )
    oracle = judge_oracle(  # the reference is not judged by the tests of this module
        implementations[1:], options=RunOptions(roles=Roles(require=Tier.LOSSLESS)), power=False
    )
    return records, oracle


def _judgement(records: list[dict], oracle: OracleVerdict | None) -> Judgement:
    return judged_records(records, roles=Roles(require=Tier.LOSSLESS), oracle=oracle)


def _sections(records: list[dict], oracle: OracleVerdict | None) -> dict:
    return {s.title: s for s in comparison_sections(_judgement(records, oracle))}


def test_a_defect_only_the_oracle_sees_is_not_lossless(judged) -> None:
    records, oracle = judged
    statistical = oracle.statisticals
    by_checks = implementation_verdict(records, "reused")
    assert by_checks.lossless and not by_checks.replayable  # the checks cannot see it
    part = statistical["reused"]
    assert part.ran and part.rejected and part.p_value is not None and part.p_value < 1e-6
    section = _sections(records, oracle)["Implementation reused"]
    assert not section.ok
    cases = len(standard_matrix())
    assert section.verdict.startswith(
        f"reused: passes every lossless check on {cases}/{cases} cases"
    )
    assert "NOT lossless" in section.verdict
    assert "the statistical oracle carries the lossless verdict" in section.verdict
    first = part.carried_by
    assert f"carried by {', '.join(first[:4])} and {len(first) - 4} more)" in section.verdict
    assert all(name.count("/") == 3 for name in first)  # target/head/group/test
    assert "/pos " in first[0]  # the strongest carrier is a position
    body = _judgement(records, oracle).to_json()
    entry = body["implementations"]["reused"]
    assert (entry["lossless"], entry["drop_in"]) == (False, False)
    assert entry["statistical"]["rejected"] is True
    assert entry["statistical"]["carried_by"] == ", ".join(part.carried_by)
    assert "statistical oracle REJECTED" in entry["summary"]


def test_alternative_designs_stay_lossless_not_drop_in_with_the_statistical_part_passing(
    judged,
) -> None:
    records, oracle = judged
    sections = _sections(records, oracle)
    body = _judgement(records, oracle).to_json()
    for name in ALTERNATIVES:
        entry = body["implementations"][name]
        assert (entry["lossless"], entry["drop_in"]) == (True, False), entry["summary"]
        assert entry["summary"].startswith("lossless; not drop-in: ")
        assert entry["statistical"]["ran"] and entry["statistical"]["rejected"] is False
        assert entry["statistical"]["p_value"] > 1e-6
        section = sections[f"Implementation {name}"]
        assert section.ok, section.verdict
        carried = (
            "draws not visible / not replayable: the statistical oracle carries the lossless "
            "verdict"
        )
        assert (f"{carried} — passed" in section.verdict) == (name in NOT_REPLAYABLE)
    assert "statistical oracle passed it" in sections["Implementation pre"].verdict
    assert body["implementations"]["fixed"]["drop_in"] is True


def test_without_the_oracle_the_verdict_says_its_statistical_part_was_not_run(judged) -> None:
    records, _ = judged
    sections = _sections(records, None)
    assert sections["Fixed sampler"].verdict.endswith("checks only; statistical oracle not run")
    assert sections["Implementation reused"].ok  # the checks alone cannot see the defect
    body = _judgement(records, None).to_json()
    for entry in body["implementations"].values():
        assert entry["statistical"] == {
            "ran": False,
            "rejected": None,
            "p_value": None,
            "carried_by": "",
            "error": None,
            "not_judged": None,
            "not_ruled_out": "",
            "scope": "",
            "randomness": "",
            "independent_streams": False,
            "call_findings": [],
            "stages": "",
        }


def test_comparison_tables_are_markdown_tables_and_aligned_text(judged) -> None:
    records, statistical = judged
    sections = _sections(records, statistical)
    for title in ("Verdicts per implementation", "Checks per implementation"):
        section: Section = sections[title]
        assert any(isinstance(b, Table) for b in section.blocks)
        markdown = section.markdown()
        assert "```" not in markdown, title
        tables = [t.splitlines() for t in markdown.split("\n\n") if t.startswith("|")]
        assert tables, title
        for rows in tables:
            assert len(rows) >= 3 and rows[1].startswith("|--"), title
            assert len({len(line) for line in rows}) == 1, title  # a padded Markdown table
        assert "|" not in section.text.splitlines()[-1], title  # the terminal text is not
    verdicts = sections["Verdicts per implementation"].markdown()
    assert "| statistical " in verdicts and "REJECTED" in verdicts


def test_report_command_carries_the_statistical_verdict_into_json_and_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One defect only the oracle sees, one noise draw reused by every step, and a drafter
    # whose noise is the verifier's next acceptance uniforms, which the report's oracle sees
    # because it runs on the server's own randomness by default (one report for both), as
    # the exact check on torch's stream does (tests/harness/pipeline/test_torch_stream.py).
    argv = ["report", "--impl", REUSED_IMPL, "--impl", UNIFORMS_IMPL, "--no-work", "--quiet"]
    argv += ["--require", "lossless", "--out-dir", str(tmp_path), "--json"]
    # the uniforms it reads are our chain verifier's: where sglang is installed, the
    # report adds sglang's block-wise verifier, whose own uniforms it does not read
    argv += ["--verifiers", "chain"]
    expected = ["--expect-fail", "reused", "--expect-fail", "uniforms"]
    assert main([*argv, *expected]) == ExitCode.OK
    body = json.loads(capsys.readouterr().out)
    assert body["judgement"]["oracle"]["verifier_noise"] == "shared"
    verdicts = body["judgement"]["implementations"]
    for name in ("reused", "uniforms"):
        assert verdicts[name]["lossless"] is False
        assert verdicts[name]["statistical"]["rejected"] is True
    assert verdicts["fixed"]["statistical"]["rejected"] is False
    assert verdicts["legacy"]["statistical"]["rejected"] is True
    line = next(s["verdict"] for s in body["sections"] if s["title"] == "Implementation reused")
    assert line.startswith("reused: fails a lossless check, as expected — statistical oracle")
    assert line.count("REJECTED") == 1
    markdown = (tmp_path / "report.md").read_text()
    assert "| implementation " in markdown and "| class " in markdown


def test_a_verdict_takes_the_oracles_part_once(judged) -> None:
    records, oracle = judged
    statistical = oracle.statisticals
    by_checks = implementation_verdict(records, "fixed")
    judged_once = by_checks.with_statistical(statistical["fixed"])
    assert judged_once.statistical == statistical["fixed"]
    with pytest.raises(ValueError, match="already holds the statistical oracle's part"):
        judged_once.with_statistical(statistical["fixed"])  # would hide the first part's verdict
