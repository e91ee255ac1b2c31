"""Each distinct decode of the statistical oracle computed once a test session.

The oracle's decode of one implementation (``harness.oracles.stats.decode_task``) and
legacy's power curves (``run_power_curves``, as ``harness.oracles.part`` calls them)
are pure functions of their arguments: the same sampler, config and verifier give the
same rows, bit for bit (``tests/harness/test_determinism.py`` holds it). The entry
points' tests (report, compare, stats, the API, the plugin) run the oracle on the
built-in implementations at the default config over and over; what they test is the
path to and from the judge, not the decode. So the suite keeps each distinct answer the
first time it is computed, in a folder shared by every xdist worker and every process
forked from one, and hands it back to the next caller with the same arguments.

What keeps it honest:

- The key is every argument, pickled (implementation, config or problem, verifier,
  level, seeds, the rows already decoded), plus the bytes of the sampler's own source
  file and of any file its spec names, plus the bytes of every module of the four
  packages: a change to a sampler, a file plug-in rewritten in place or any code of the
  project is another key. Arguments that do not pickle are never kept.
- Only answers that judged something are kept: an implementation that raised or ran out
  of time is computed again each time (its timing is not a pure function).
- Only the judge's path goes through it: the oracle's own tests call ``run_stats``,
  ``decode_and_fit`` and ``held_decode``, which always decode.
- A test that uses ``monkeypatch`` (it may change what a decode does) or carries the
  ``fresh_oracle`` marker (the determinism tests, whose point is a second decode)
  computes every decode afresh.
- ``DSPARK_TEST_ORACLE_MEMO=0`` turns it off for a whole run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import pickle
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("reference", "legacy", "fixed", "harness")
SWITCH = "DSPARK_TEST_ORACLE_MEMO"


@functools.cache
def _code_digest() -> str:
    """The bytes of every module of the four packages, hashed once a process."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _source_bytes(implementation: Any) -> bytes:
    """The sampler's own source file and any file its spec names."""
    paths: list[str] = []
    with contextlib.suppress(TypeError, OSError):
        paths.append(inspect.getsourcefile(implementation.sampler_class) or "")
    paths += re.split(r"[:=,]", str(getattr(implementation, "spec", "")))
    chunks = []
    for name in paths:
        path = Path(name)
        if name and path.is_file():
            chunks.append(str(path.resolve()).encode() + b"\0" + path.read_bytes())
    return b"\0".join(chunks)


class _Fresh:
    now = False  # set before each test's set-up (``tests/conftest.py``): compute afresh


FRESH = _Fresh()


def must_compute_afresh(item: Any) -> bool:
    """A test that may change what a decode does (``monkeypatch``) or whose point is a
    second decode (``fresh_oracle``)."""
    names = getattr(item, "fixturenames", ())
    return "monkeypatch" in names or item.get_closest_marker("fresh_oracle") is not None


class OracleMemo:
    """Answers kept as pickles in ``folder``, one lock per key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.hits = 0

    def key(self, kind: str, implementation: Any, arguments: tuple[Any, ...]) -> str | None:
        try:
            pickled = pickle.dumps((kind, implementation, arguments), protocol=5)
        except (pickle.PicklingError, AttributeError, TypeError, RuntimeError):
            return None
        digest = hashlib.sha256(_code_digest().encode())
        digest.update(pickled)
        digest.update(_source_bytes(implementation))
        return digest.hexdigest()

    def answer(
        self, key: str | None, compute: Callable[[], Any], *, keep: Callable[[Any], bool]
    ) -> Any:
        if key is None or FRESH.now:
            return compute()
        path = self.folder / f"{key}.pickle"
        with FileLock(str(path.with_suffix(".lock"))):
            if path.is_file():
                self.hits += 1
                return pickle.loads(path.read_bytes())
            answer = compute()
            if keep(answer):
                partial = path.with_suffix(f".{os.getpid()}.partial")
                partial.write_bytes(pickle.dumps(answer, protocol=5))
                partial.replace(path)
            return answer


def _judged(answer: Any) -> bool:
    """A decode that judged something (not raised, not out of time)."""
    stats = answer[0] if isinstance(answer, tuple) and answer else None
    return getattr(stats, "error", "?") is None and getattr(stats, "not_judged", "?") is None


@contextlib.contextmanager
def installed(memo: OracleMemo) -> Iterator[None]:
    """Route the oracle's decodes and power curves through ``memo`` (undone on exit)."""
    import harness.oracles.part as part
    import harness.oracles.stats as stats

    decode_task, power_curves = stats.decode_task, part.run_power_curves

    def remembered_decode(
        implementation: Any, *, config: Any, time_limit_s: Any, verifier: Any
    ) -> Any:
        key = memo.key("decode", implementation, (config, time_limit_s, verifier))
        return memo.answer(
            key,
            lambda: decode_task(
                implementation, config=config, time_limit_s=time_limit_s, verifier=verifier
            ),
            keep=_judged,
        )

    def remembered_curves(implementation: Any, *, progress: Any = None, **arguments: Any) -> Any:
        """The curves and the progress lines they printed, which a hit prints again."""
        key = memo.key("power", implementation, tuple(sorted(arguments.items())))
        lines: list[str] = []

        def tee(line: str) -> None:
            lines.append(line)
            if progress is not None:
                progress(line)

        def compute() -> tuple[Any, list[str]]:
            return power_curves(implementation, progress=tee, **arguments), lines

        curves, printed = memo.answer(key, compute, keep=lambda _: True)
        if printed is not lines and progress is not None:  # a kept answer: print its lines
            for line in printed:
                progress(line)
        return curves

    # Named as the function it stands for: a task sent to an ``--isolate`` worker by its
    # name (``harness.pipeline.isolation.task_name``) runs the real decode there.
    for stand_in, real in ((remembered_decode, decode_task), (remembered_curves, power_curves)):
        stand_in.__module__, stand_in.__qualname__ = real.__module__, real.__qualname__
    stats.decode_task, part.run_power_curves = remembered_decode, remembered_curves
    try:
        yield
    finally:
        stats.decode_task, part.run_power_curves = decode_task, power_curves
