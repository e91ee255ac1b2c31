"""The advisory from the sweep's rows, as an audit tool gives one (docs/releases.md, "The
advisory and its exit status").

``advisories(rows)`` is the per-class table: for each package and defect class the
judged releases that show it (first, last, all), the first later judged release free of
it, and the first affected release's evidence with the command that replays it.
``advisory_verdict(rows, ...)`` is what the sweep found, in one value: how many releases
were judged, which judged ones are not lossless and by how many defect classes; its
``ok`` is the command's exit status. A release that could not be judged is no finding,
and no sign of health either: a sweep that judged nothing is not clean.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

from harness.releases.sweep import ReleaseRow
from harness.upstream.releases.wheels import version_key


class Affected(TypedDict):
    first: str
    last: str
    versions: list[str]


# One defect class of one package: where it shows, where it was fixed, and the first
# affected release's evidence and repro command ("class" is a keyword: the functional form
# keeps the JSON name).
Advisory = TypedDict(
    "Advisory",
    {
        "class": str,
        "package": str,
        "affected": Affected,
        "fixed_in": str | None,
        "evidence": str,
        "repro": str,
    },
)


def _release_order(row: ReleaseRow) -> tuple[str, tuple[int, ...], str]:
    return row["package"], version_key(row["version"]), row["version"]


def order_rows(rows: Iterable[ReleaseRow]) -> list[ReleaseRow]:
    """Releases by package, then version; ``--impl`` rows last, as given."""
    listed = list(rows)
    releases = sorted((r for r in listed if r["package"] != "impl"), key=_release_order)
    return releases + [r for r in listed if r["package"] == "impl"]


def advisories(rows: Sequence[ReleaseRow]) -> list[Advisory]:
    """Per package and defect class: the judged releases that show it (first, last, all),
    the first judged release after the last affected one that does not, and the first
    affected release's evidence and repro command."""
    found: list[Advisory] = []
    packages = sorted({r["package"] for r in rows if r["package"] != "impl"})
    for package in packages:
        judged = [r for r in order_rows(rows) if r["package"] == package and r["judged"]]
        classes = sorted({f["class"] for r in judged for f in r["findings"]})
        for defect in classes:
            shown = [
                (r["version"], f) for r in judged for f in r["findings"] if f["class"] == defect
            ]
            affected = list(dict.fromkeys(version for version, _ in shown))
            last = version_key(affected[-1])
            fixed = next((r["version"] for r in judged if version_key(r["version"]) > last), None)
            first = shown[0][1]
            found.append(
                {
                    "class": defect,
                    "package": package,
                    "affected": {"first": affected[0], "last": affected[-1], "versions": affected},
                    "fixed_in": fixed,
                    "evidence": first["evidence"],
                    "repro": first["repro"],
                }
            )
    return found


def advisory_json(rows: Sequence[ReleaseRow]) -> dict[str, object]:
    """``{"releases": [...], "advisories": [...]}``."""
    ordered = order_rows(rows)
    return {"releases": ordered, "advisories": advisories(ordered)}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 'es' if word.endswith('ss') else 's'}"


@dataclass(frozen=True)
class AdvisoryVerdict:
    """What a sweep found. ``ok`` (the exit status: 0 when it holds, else 1) holds when
    at least one release was judged, every task answered, and no judged release is
    affected (not lossless), or ``exit_zero`` asks for a sweep that only reports. A
    sweep that judged nothing, or one whose task gave no answer, does not hold even then:
    no verdict is not a clean one."""

    releases: int  # rows, releases and --impl files
    judged: int
    affected: tuple[str, ...]  # "package version" of each judged row that is not lossless
    classes: tuple[str, ...]  # the defect classes the affected rows show
    unanswered: int  # tasks that gave no row (their rows say why)
    exit_zero: bool = False  # --exit-zero: findings are reported, not failed

    @property
    def ok(self) -> bool:
        if self.judged == 0 or self.unanswered:
            return False
        return self.exit_zero or not self.affected

    def line(self) -> str:
        """The verdict line: what the sweep found and what it covered."""
        not_judged = self.releases - self.judged
        if self.judged == 0:
            said = f"nothing judged: none of {_plural(self.releases, 'release')} could be"
        elif self.affected:
            said = (
                f"{len(self.affected)} of {_plural(self.releases, 'release')} affected by "
                f"{_plural(len(self.classes), 'defect class')} ({', '.join(self.classes)}); "
                f"{self.judged} judged, {not_judged} not judged"
            )
        else:
            said = (
                f"no judged release affected: {self.judged} of "
                f"{_plural(self.releases, 'release')} judged lossless, {not_judged} not judged"
            )
        if self.unanswered:
            said += f"; {self.unanswered} gave no answer (its row says why)"
        if self.exit_zero and self.affected and self.ok:
            said += " (--exit-zero: reported, exit 0)"
        return said


def advisory_verdict(
    rows: Sequence[ReleaseRow], *, unanswered: int, exit_zero: bool = False
) -> AdvisoryVerdict:
    """What the rows say, in one value (``unanswered``: the sweep's tasks that gave no
    row of their own)."""
    judged = [r for r in order_rows(rows) if r["judged"]]
    affected = [r for r in judged if r["lossless"] is False]
    return AdvisoryVerdict(
        releases=len(rows),
        judged=len(judged),
        affected=tuple(f"{r['package']} {r['version']}" for r in affected),
        classes=tuple(sorted({f["class"] for r in affected for f in r["findings"]})),
        unanswered=unanswered,
        exit_zero=exit_zero,
    )
