"""The two verdicts and the roles that decide what each implementation must meet.

Per case, an implementation is ``lossless`` when no lossless-tier check failed and
``drop_in`` when, in addition, no drop-in-tier check failed (see
``harness.pipeline.check_result``). Over a comparison it is lossless (drop-in) when
it is so on every case. What each implementation is held to is its role
(``harness.options.Roles``).

The statistical oracle's verdict (``Statistical``) is part of the lossless verdict:
an implementation it rejects is not lossless, whatever its checks say. Without it
(not run) the lossless verdict rests on the checks alone, and every line that states it
says so (``CHECKS_ONLY``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harness.pipeline.call_findings import CallFinding
from harness.pipeline.check_result import Skip, Tier
from harness.pipeline.records import CaseRecord, CheckRecord

MAX_CARRIERS = 4  # rejections named in a verdict line
CHECKS_ONLY = "checks only; statistical oracle not run"  # a lossless verdict without the oracle
# an oracle's verdict under --verifier-noise independent: it rests on streams the server
# never uses, so it says so wherever it is stated
INDEPENDENT_STREAMS = "drafter and verifier on independent streams: a control"


@dataclass(frozen=True)
class Statistical:
    """The statistical oracle's verdict on one implementation, as the lossless verdict
    needs it: whether it ran, whether it rejected (``None``: it did not finish), the
    family p-value, and which head/group/position carried a rejection."""

    ran: bool = False
    rejected: bool | None = None
    p_value: float | None = None
    carried_by: tuple[str, ...] = ()  # target/head/group/test of each rejection, strongest first
    error: str | None = None
    not_judged: str | None = None  # it ran out of time: no verdict either way
    not_ruled_out: str = ""  # after a pass: the smallest defect it would have seen
    scope: str = ""  # what it ran short of the config: heads left out, a cut (rows, targets)
    randomness: str = ""  # a released server's verdict: judged on its server's own randomness
    # its decodes' calls that failed a per-call check: a defect, whatever the p-values say
    call_findings: tuple[CallFinding, ...] = ()
    independent: bool = False  # its verifier drew from streams of its own (a control)
    stages: str = ""  # what the sequential stages found, when the family was unsure

    @property
    def failed(self) -> bool:
        """Rejected, raised or not judged, or a call of its decodes failed a per-call
        check: either way not shown lossless."""
        return self.ran and (self.rejected is not False or bool(self.call_findings))

    @property
    def gave_no_verdict(self) -> bool:
        """It ran and ended without a verdict either way (raised, its process died, or out
        of time), and no call of its decodes failed a per-call check: nothing shown."""
        no_verdict = self.error is not None or self.not_judged is not None
        return self.ran and no_verdict and not self.rejected and not self.call_findings

    @property
    def streams(self) -> str:
        """What its decodes drew from, where that is not each server's own plumbing."""
        return INDEPENDENT_STREAMS if self.ran and self.independent else ""

    def describe(self) -> str:
        notes = (self.scope, self.randomness, self.streams)
        scope = "".join(f" [{note}]" for note in notes if note)
        if not self.ran:
            return f"statistical oracle not run{scope}"
        if self.call_findings:
            return self.describe_findings() + scope
        if self.not_judged is not None:
            return f"not judged by the statistical oracle: {self.not_judged}{scope}"
        if self.error is not None:
            return f"statistical oracle could not judge it: {self.error}{scope}"
        p = "nan" if self.p_value is None else f"{self.p_value:.3g}"
        stages = f"; {self.stages}" if self.stages else ""
        if self.rejected:
            return (
                f"statistical oracle REJECTED it (family p={p}; carried by "
                f"{self.carriers()}{stages}){scope}"
            )
        bound = f"; {self.not_ruled_out}" if self.not_ruled_out else ""
        return f"statistical oracle passed it (family p={p}{stages}{bound}){scope}"

    def describe_findings(self) -> str:
        """The first finding on the oracle's calls, how many more, and what the tests
        said: ``check [oracle]: where: token: expected; the statistical oracle ...``."""
        first, more = self.call_findings[0], len(self.call_findings) - 1
        others = f"; {more} more finding(s) on the oracle's calls" if more else ""
        p = "nan" if self.p_value is None else f"{self.p_value:.3g}"
        if self.error is not None or self.not_judged is not None:
            tests = "the statistical oracle's tests gave no verdict"
        elif self.rejected:
            tests = f"the statistical oracle's tests also REJECTED it (family p={p})"
        else:
            tests = f"the statistical oracle's tests passed it (family p={p}), which clears nothing"
        return f"{first.describe()}{others}; {tests}"

    def every_finding(self) -> str:
        """Every finding on the oracle's calls, one per line."""
        return "\n".join(f.describe() for f in self.call_findings)

    def carriers(self) -> str:
        """The first ``MAX_CARRIERS`` of ``carried_by`` (strongest first), and how many
        more."""
        more = len(self.carried_by) - MAX_CARRIERS
        return ", ".join(self.carried_by[:MAX_CARRIERS]) + (f" and {more} more" if more > 0 else "")

    def every_carrier(self) -> str:
        """Every rejection, strongest first, as one line."""
        return ", ".join(self.carried_by)

    def to_json(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "rejected": self.rejected,
            "p_value": self.p_value,
            "carried_by": self.every_carrier(),
            "error": self.error,
            "not_judged": self.not_judged,
            "not_ruled_out": self.not_ruled_out,
            "scope": self.scope,
            "randomness": self.randomness,
            "independent_streams": bool(self.streams),
            "call_findings": [asdict(f) for f in self.call_findings],
            "stages": self.stages,
        }


NOT_RUN = Statistical()


def case_verdict(checks: Sequence[CheckRecord]) -> tuple[bool, bool]:
    """``(lossless, drop_in)`` of one implementation's check records on one case."""
    failed_tiers = {Tier(c["tier"]) for c in checks if c["status"] == "fail"}
    lossless = Tier.LOSSLESS not in failed_tiers
    return lossless, lossless and Tier.DROP_IN not in failed_tiers


@dataclass(frozen=True)
class Failure:
    """One failed check of one implementation on one case."""

    case: str  # the case's label
    check: str
    tier: Tier
    detail: str

    @property
    def lossless(self) -> bool:
        """Whether the failed check is of the lossless tier (else drop-in)."""
        return self.tier is Tier.LOSSLESS

    def line(self) -> str:
        """``case: check: detail``."""
        return f"{self.case}: {self.check}: {self.detail}"


@dataclass(frozen=True)
class Verdict:
    """One implementation's two verdicts over a set of cases, with the evidence."""

    name: str
    lossless: bool
    drop_in: bool
    cases: int
    failures: tuple[Failure, ...]
    required: Tier = Tier.DROP_IN  # what ``ok`` holds it to
    statistical: Statistical = field(default=NOT_RUN)
    replayable: bool = True  # False: some case's draws could not be replayed
    outside_contract: int = 0  # of ``cases``, not run: outside the implementation's contract

    @property
    def judged(self) -> int:
        """The cases its checks ran on."""
        return self.cases - self.outside_contract

    def not_run_note(self) -> str:
        """``" (N of M cases not run: outside its contract)"``, or ``""`` when all ran."""
        if not self.outside_contract:
            return ""
        return f" ({self.outside_contract} of {self.cases} cases not run: outside its contract)"

    def with_statistical(self, statistical: Statistical) -> Verdict:
        """This verdict with the statistical oracle's part in it: rejected (or raised)
        means not lossless, so not drop-in either. Only a verdict of the checks alone
        takes one: a second part would be and-ed into the first's verdict while the text
        showed only the second."""
        if self.statistical != NOT_RUN:
            raise ValueError(
                f"{self.name}: this verdict already holds the statistical oracle's part; "
                "take the checks' verdict (stats=False) to give it another"
            )
        keep = not statistical.failed
        return replace(
            self,
            lossless=self.lossless and keep,
            drop_in=self.drop_in and keep,
            statistical=statistical,
        )

    @property
    def reason(self) -> str:
        """Why it is not lossless (else not drop-in): the first such failure, or the
        statistical oracle's rejection when no lossless check failed."""
        wanted_lossless = not self.lossless  # why not lossless, else why not drop-in
        if wanted_lossless and not self.lossless_failures():
            return self.statistical.describe()
        for failure in self.failures:
            if failure.lossless == wanted_lossless:
                return f"{failure.check}: {failure.detail} ({failure.case})"
        return ""

    def meets(self, requirement: Tier) -> bool:
        return self.drop_in if requirement is Tier.DROP_IN else self.lossless

    @property
    def ok(self) -> bool:
        """Whether it meets ``required``."""
        return self.meets(self.required)

    def evidence(self) -> str:
        """One line per failing check: ``case: check [tier]: detail``."""
        return "\n".join(f"{f.case}: {f.check} [{f.tier}]: {f.detail}" for f in self.failures)

    def summary(self) -> str:
        """``"lossless and drop-in"``, ``"lossless; not drop-in: <reason>"`` or
        ``"NOT lossless: <reason>"``; a lossless verdict without the statistical oracle
        ends with ``(checks only; statistical oracle not run)``, one on part of the
        oracle's config with what it ran short of it."""
        if self.cases and not self.judged:
            return f"not run: all {self.cases} cases are outside its contract"
        part, streams = self.statistical.scope, self.statistical.streams
        if not self.statistical.ran:
            checks_only = f" ({CHECKS_ONLY}{': ' + part if part else ''})"
        else:
            checks_only = f" (statistical oracle on part: {part})" if part else ""
            checks_only += f" (statistical oracle with {streams})" if streams else ""
        checks_only += self.not_run_note()
        if self.drop_in:
            return f"lossless and drop-in{checks_only}"
        if self.lossless:
            return f"lossless; not drop-in: {self.reason}{checks_only}"
        if self.statistical.not_judged is not None and not self.lossless_failures():
            return f"not judged: {self.reason}"  # out of time is no defect
        return f"NOT lossless: {self.reason}{self.not_run_note()}"

    def lossless_failures(self) -> bool:
        """Whether a lossless check failed on some case."""
        return any(f.lossless for f in self.failures)

    def to_json(self) -> dict[str, Any]:
        return {
            "lossless": self.lossless,
            "drop_in": self.drop_in,
            "cases": self.cases,
            "outside_contract": self.outside_contract,
            "summary": self.summary(),
            "statistical": self.statistical.to_json(),
            "replayable": self.replayable,
        }

    def statistical_line(self) -> str:
        """How the statistical oracle enters the lossless verdict, in one sentence."""
        if not self.statistical.ran:
            return CHECKS_ONLY
        if not self.replayable:
            streams = self.statistical.streams
            passed = f"passed [{streams}]" if streams else "passed"
            return (
                "draws not visible / not replayable: the statistical oracle carries the "
                "lossless verdict — "
                + (passed if not self.statistical.failed else self.statistical.describe())
            )
        return self.statistical.describe()


def implementation_verdict(records: Sequence[CaseRecord], name: str) -> Verdict:
    """The verdicts of implementation ``name`` over every record that ran it."""
    failures = []
    lossless = drop_in = replayable = True
    cases = outside = 0
    for record in records:
        entry = record["implementations"].get(name)
        if entry is None:
            continue
        cases += 1
        outside += any(c["skip"] == Skip.OUTSIDE_CONTRACT for c in entry["checks"])
        case_lossless, case_drop_in = case_verdict(entry["checks"])
        lossless &= case_lossless
        drop_in &= case_drop_in
        failures += [
            Failure(case=record["label"], check=c["name"], tier=Tier(c["tier"]), detail=c["detail"])
            for c in entry["checks"]
            if c["status"] == "fail"
        ]
        replayable &= not any(
            c["name"] == "noise_replay" and c["skip"] == Skip.NOT_VISIBLE for c in entry["checks"]
        )
    if cases and outside == cases:  # nothing ran: no claim either way
        lossless = drop_in = False
    return Verdict(
        name,
        lossless,
        drop_in,
        cases,
        tuple(failures),
        replayable=replayable,
        outside_contract=outside,
    )


Statisticals = Mapping[str, Statistical] | None  # None: the statistical oracle did not run


def full_verdict(records: Sequence[CaseRecord], name: str, statistical: Statisticals) -> Verdict:
    """``name``'s verdicts from its checks with the statistical oracle's part in them."""
    part = NOT_RUN if statistical is None else statistical.get(name, NOT_RUN)
    return implementation_verdict(records, name).with_statistical(part)
