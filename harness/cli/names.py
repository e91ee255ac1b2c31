"""Close matches for a mistyped name (a command, a choice, a listed name), so that a
refusal can say what was probably meant; torch-free, as every refusal of usage is."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from harness.cli.emit import UsageError


def did_you_mean(unknown: Iterable[str], known: Iterable[str]) -> str:
    """``"did you mean X? "`` with the closest known name to each unknown one that has
    one; ``""`` when none is close."""
    candidates = list(known)
    matches = [match for name in unknown if (match := closest(name, candidates)) is not None]
    if not matches:
        return ""
    return f"did you mean {', '.join(dict.fromkeys(matches))}? "


def closest(name: str, candidates: list[str]) -> str | None:
    """The candidate closest to ``name`` (``difflib.get_close_matches``), one with the
    same letters first: a transposition (``reprot``) is the likeliest typo."""
    close = difflib.get_close_matches(name, candidates, n=3)
    close.sort(key=lambda match: sorted(match) != sorted(name))  # stable: else difflib's order
    return close[0] if close else None


def check_known(names: Sequence[str], known: Sequence[str], *, option: str, what: str) -> None:
    """Every name one of ``known``; the refusal names the closest to a mistyped one."""
    unknown = [name for name in names if name not in known]
    if unknown:
        raise UsageError(
            f"{option}: unknown {what}(s) {unknown}; {did_you_mean(unknown, known)}"
            f"expected some of {list(known)}"
        )
