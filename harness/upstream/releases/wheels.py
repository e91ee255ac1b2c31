"""Released versions and their wheels: found with pip, fetched into a cache, extracted.

Everything goes through pip's own client (``python -m pip``): ``pip index versions``
lists a package's versions, ``pip download --no-deps PKG==V -d DIR`` fetches one wheel
and nothing else. A wheel is a zip; ``extract`` unpacks it into the cache beside it,
once, and the loaders read the files there. Nothing is installed: no file of a release
reaches ``site-packages``. With ``--wheel-dir`` the cache is the user's (an offline
machine fills it once): a wheel already there is never fetched again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE = Path(
    os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "dspark-harness", "wheels"
)
FETCH_TIMEOUT_S = 600


class NotFetched(RuntimeError):
    """A wheel could not be had; the message is pip's reason, in one line."""


def version_key(version: str) -> tuple[int, ...]:
    """``"0.5.21"`` -> ``(0, 5, 21)``; a pre- or post-release part sorts by its digits."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


def parse_selection(text: str) -> tuple[str, ...]:
    """``"0.5.19,0.5.21-0.5.23"``: the named versions and the ranges' ends, as written;
    a range keeps every known version between its ends (``select``)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def select(selection: tuple[str, ...], *, known: tuple[str, ...]) -> tuple[str, ...]:
    """The versions a selection names, in release order: a plain version as it is (known
    or not), a range ``A-B`` as every known version from A to B."""
    chosen: list[str] = []
    for part in selection:
        low, dash, high = part.partition("-")
        if not dash:
            chosen.append(low)
            continue
        chosen += [v for v in known if version_key(low) <= version_key(v) <= version_key(high)]
    return tuple(sorted(dict.fromkeys(chosen), key=version_key))


def _pip(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _reason(completed: subprocess.CompletedProcess[str]) -> str:
    lines = [
        line.strip()
        for line in (completed.stderr + completed.stdout).splitlines()
        if line.strip() and not line.startswith("WARNING")
    ]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or [f"pip exited {completed.returncode}"])[-1]


def index_versions(package: str, *, timeout_s: float = 120) -> tuple[str, ...]:
    """Every version of ``package`` on the index pip uses, oldest first."""
    completed = _pip("index", "versions", package, timeout_s=timeout_s)
    found = re.search(r"Available versions:\s*(.+)", completed.stdout)
    if completed.returncode != 0 or found is None:
        raise NotFetched(f"pip index versions {package}: {_reason(completed)}")
    versions = [v.strip() for v in found.group(1).split(",")]
    return tuple(sorted((v for v in versions if v), key=version_key))


@dataclass(frozen=True)
class Wheel:
    """One release's wheel in the cache and the folder it is extracted to."""

    package: str
    version: str
    path: Path
    extracted: Path  # holds the package folder (``extracted / package``)


def _folder(cache: Path, package: str, version: str) -> Path:
    return cache / f"{package}-{version}"


def cached_wheel(package: str, version: str, *, cache: Path) -> Path | None:
    """The wheel already in the cache (fetched before, or put there by the user)."""
    name = package.replace("-", "_")
    for folder in (_folder(cache, package, version), cache):
        found = sorted(folder.glob(f"{name}-{version}-*.whl")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


def fetch(package: str, version: str, *, cache: Path, offline: bool = False) -> Path:
    """The release's wheel, fetched once with ``pip download --no-deps`` (``offline``:
    from the cache only)."""
    found = cached_wheel(package, version, cache=cache)
    if found is not None:
        return found
    if offline:
        raise NotFetched(f"no {package}-{version} wheel in {cache} (offline: not fetched)")
    folder = _folder(cache, package, version)
    folder.mkdir(parents=True, exist_ok=True)
    completed = _pip(
        "download",
        "--no-deps",
        "--only-binary=:all:",
        f"{package}=={version}",
        "-d",
        str(folder),
        timeout_s=FETCH_TIMEOUT_S,
    )
    found = cached_wheel(package, version, cache=cache)
    if completed.returncode != 0 or found is None:
        raise NotFetched(_reason(completed))
    return found


def extract(package: str, version: str, *, wheel: Path, members: tuple[str, ...]) -> Wheel:
    """Unpack the wheel's files under the ``members`` prefixes next to it, each prefix
    once (a marker file per prefix says its extraction finished), and always its
    ``.dist-info``: a release whose modules ask ``importlib.metadata`` for their own
    version (vLLM's platform detection does) finds it beside them."""
    target = wheel.parent / f"{package}-{version}-files"
    markers = target / ".extracted"
    wanted = (*members, f"{package}-{version}.dist-info/")
    pending = [m for m in wanted if not (markers / m.replace("/", "_")).is_file()]
    if pending:
        markers.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith(tuple(pending)) and ".." not in Path(name).parts:
                    archive.extract(name, target)
        for member in pending:
            (markers / member.replace("/", "_")).write_text(wheel.name)
    return Wheel(package=package, version=version, path=wheel, extracted=target)
