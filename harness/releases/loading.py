"""A release's sampler, loaded unchanged from its extracted wheel the way its era says.

- ``Loading.SERVER_FILE`` (sglang 0.5.17-0.5.21) and ``Loading.SGLANG_0_5_16``: the
  sglang loader reads the release's own sampler, step kernel, Markov heads and flags
  from the extracted folder (``harness.upstream.sglang_wheel``); 0.5.16's
  folded sampler and eager ``sample_draft_block`` are called per batch as its proposer
  calls them (``harness.upstream.sglang_0_5_16``). A wheel that ships its
  sampler file alone (the tests' own) has it under the bug era's surface, said so;
- ``Loading.SGLANG_PACKAGE`` (sglang 0.5.22 and later): the sglang loader reads the
  release's DSpark modules from the extracted folder (``sglang_loader.use_release``),
  with its stand-ins; a module the release lacks is left out (0.5.22 ships no
  block-wise rejection, so its oracle runs under chain, said so);
- ``Loading.VLLM_PACKAGE``: vLLM's modules import its whole package: the extracted
  folder joins ``sys.path`` (``vllm_loader.use_release``, with the oracle's depth its
  era sets) and its speculator is judged on every path the era ships
  (``ReleaseEra.variants``: dense, and top-K where it has one), only where its light
  dependencies are installed as pinned and the vLLM loader's own conditions hold
  (Triton's interpreter and its variables on a CPU).

First of all, the era's light dependencies (``ReleaseEra.light_deps``) must be
installed at their pinned versions: a missing one is the reason it is not judged.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.plugins.implementations import Implementation, ImplementationError, parse_impl_spec
from harness.upstream.loaders import sglang_loader, vllm_loader
from harness.upstream.releases.eras import Loading, ReleaseEra
from harness.upstream.releases.wheels import Wheel

# The checkout the requirement files live in (the working directory is tried first).
PROJECT_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class LoadedRelease:
    implementation: Implementation
    verifier: str  # the harness verifier its oracle runs under
    notes: tuple[str, ...]  # what of its server the judgement leaves out
    other_paths: tuple[Implementation, ...] = ()  # its further paths, judged in its row


def missing_light_deps(requirements: str) -> list[str]:
    """``name==version`` pins of the requirements file that are not installed as pinned."""
    path = next(
        (p for p in (Path(requirements), PROJECT_ROOT / requirements) if p.is_file()),
        PROJECT_ROOT / requirements,
    )
    if not path.is_file():
        return [f"{requirements} (the file is not in this checkout)"]
    missing = []
    for line in path.read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
        if pin is None:
            continue
        name, version = pin.groups()
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"{name}=={version} (not installed)")
            continue
        if installed != version:
            missing.append(f"{name}=={version} ({installed} installed)")
    return missing


def load_release(era: ReleaseEra, *, files: Callable[[], Wheel], name: str) -> LoadedRelease | str:
    """The release's sampler as an implementation, or why it is not judged here
    (``files``: the era's folders of the wheel, extracted once the rest is known to
    be in place)."""
    if era.loading is Loading.NONE:
        return era.why_not_judged
    missing = missing_light_deps(era.light_deps)
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        return f"its light dependencies are not installed as pinned: {shown} ({era.light_deps})"
    try:
        if era.loading in (Loading.SERVER_FILE, Loading.SGLANG_0_5_16):
            return _sglang_wheel(era, files=files(), name=name)
        if era.loading is Loading.SGLANG_PACKAGE:
            return _sglang_package(era, files=files(), name=name)
        return _vllm_package(era, files=files(), name=name)
    except ImplementationError as error:
        return f"its sampler did not load: {error}"


def _sglang_wheel(era: ReleaseEra, *, files: Wheel, name: str) -> LoadedRelease | str:
    """sglang 0.5.16-0.5.21: the wheel's own sampler, step kernel, Markov heads and flags
    (``sglang_wheel``); a wheel without the kernel, heads or flags (the tests' own hold a
    sampler file alone) has its sampler file under the bug era's surface, said so."""
    from harness.upstream import sglang_0_5_16, sglang_wheel

    path = files.extracted / era.sampler_file
    spec = f"sglang-{files.version}:{path}"
    first = era.loading is Loading.SGLANG_0_5_16
    lacking = sglang_wheel.lacking(files.extracted)
    try:
        if not lacking:
            loaded = sglang_wheel.load_wheel(files.extracted, version=files.version)
            module = loaded.modules[sglang_wheel.DRAFT if first else sglang_wheel.SAMPLER]
            implementation = Implementation(name, module.DsparkDraftSampler, spec)
            return LoadedRelease(implementation, "chain", ())
        note = f"the wheel has no {', '.join(lacking)}: {sglang_wheel.SURFACE_STANDS_IN}"
        if not first:
            return LoadedRelease(parse_impl_spec(f"{name}={path}"), "chain", (note,))
        sampler_class = sglang_0_5_16.load_sampler_class(path)
        return LoadedRelease(Implementation(name, sampler_class, spec), "chain", (note,))
    except (ImportError, AttributeError, RuntimeError) as error:
        return f"its sampler did not load: {type(error).__name__}: {error}"


def _vllm_package(era: ReleaseEra, *, files: Wheel, name: str) -> LoadedRelease | str:
    vllm_loader.use_release(
        vllm_loader.VllmRelease(
            root=files.extracted, version=files.version, oracle_depth=era.oracle_depth
        )
    )
    reason = vllm_loader.unavailable_reason()
    if reason is not None:
        return reason
    dense, *others = (
        parse_impl_spec(f"{path_name(name, variant)}=vllm:{variant}") for variant in era.variants
    )
    return LoadedRelease(dense, era.verifier or "chain", (), other_paths=tuple(others))


def path_name(name: str, variant: str) -> str:
    """The implementation name of a release's path: ``name`` for the dense one,
    ``name-topk4`` for ``topk=4``."""
    return name if variant == "dense" else f"{name}-{variant.replace('=', '')}"


def _sglang_package(era: ReleaseEra, *, files: Wheel, name: str) -> LoadedRelease:
    root = files.extracted / "sglang"
    modules = tuple(
        module
        for module in sglang_loader.DSPARK_MODULES
        if files.extracted.joinpath(*module.split(".")).with_suffix(".py").is_file()
    )
    sglang_loader.use_release(
        sglang_loader.SglangRelease(root=root, version=files.version, modules=modules)
    )
    implementation = parse_impl_spec(f"{name}=sglang")
    absent = [m.rsplit(".", 1)[1] for m in sglang_loader.DSPARK_MODULES if m not in modules]
    if era.verifier is not None and sglang_loader.load_sglang().BlockwiseRejection is not None:
        return LoadedRelease(implementation, era.verifier, ())
    return LoadedRelease(
        implementation,
        "chain",
        (f"its server's verifier: the wheel has no {', '.join(absent)} (oracle under chain)",),
    )
