"""The one registry of server eras (``harness.upstream.releases.eras.ERAS``): each era
bound to one convention, ``convention_of`` a lookup over it, the plug-in eras and the
documented table read from it (docs/releases.md, "Adding a contract")."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from harness.plugins.conventions import Convention, ConventionName
from harness.plugins.eras import Era
from harness.upstream import dispatch
from harness.upstream.loaders import sglang_loader
from harness.upstream.releases import eras
from harness.upstream.releases.era_parts import ConventionRef
from harness.upstream.releases.eras import ERAS, Loading
from tests.helpers import REPO_ROOT


def test_every_era_the_harness_drives_is_bound_to_one_convention_of_the_adapters() -> None:
    for era in ERAS:
        if era.loading is Loading.NONE:
            assert era.convention is None and era.why_not_judged, era.name
            continue
        if era.convention is None:  # a file plug-in: its constructor says (ours or the PR era's)
            assert era.loading is Loading.SERVER_FILE, era.name
            continue
        for dotted in era.convention:
            assert dotted.startswith("harness.upstream."), (era.name, dotted)
        convention, speaks = dispatch.bound_convention(era.convention)
        assert isinstance(convention, Convention) and callable(speaks)
        assert (convention, speaks) in dispatch.contract_conventions()


class _PlantedSampler:
    """A sampler class of a contract the registry does not know until it is added."""


class _PlantedConvention(Convention):
    name = ConventionName.HARNESS  # never shown

    def takes_out(self, sampler_class: type[Any]) -> bool:
        return False

    def build(self, sampler_class: type[Any], **_: Any) -> Any:
        raise NotImplementedError


PLANTED = _PlantedConvention()


def speaks_planted(sampler_class: type[Any]) -> bool:
    return issubclass(sampler_class, _PlantedSampler)


def test_a_new_contract_is_one_value_of_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding an era bound to a convention makes ``convention_of`` find it for the classes
    it speaks for, and no other lookup needs to learn of it."""
    assert not any(speaks(_PlantedSampler) for _, speaks in dispatch.contract_conventions())
    here = __name__
    planted = replace(
        ERAS[-1],
        name="planted-1.0",
        versions=("1.0.0",),
        convention=ConventionRef(f"{here}.PLANTED", speaks=f"{here}.speaks_planted"),
    )
    monkeypatch.setattr(dispatch, "ERAS", (*ERAS, planted))
    assert dispatch.convention_of(_PlantedSampler) is PLANTED


def test_a_registry_entry_that_names_no_convention_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrong = replace(
        ERAS[-1],
        convention=ConventionRef(f"{__name__}.speaks_planted", speaks=f"{__name__}.speaks_planted"),
    )
    monkeypatch.setattr(dispatch, "ERAS", (wrong,))
    with pytest.raises(TypeError, match="is no Convention"):
        dispatch.convention_of(_PlantedSampler)


def test_the_plugin_eras_are_the_registrys_own() -> None:
    """Every plug-in era a file can be built for (``--impl FILE@ERA``) but ``installed``
    serves an era of the registry, and the installed package's era lists the version its
    loader supports."""
    named = {era.plugin_era for era in ERAS if era.plugin_era is not None}
    assert named == {era for era in Era if era is not Era.INSTALLED}
    package = [era for era in ERAS if era.plugin_era is Era.SGLANG_0_5_23]
    assert [sglang_loader.SUPPORTED_VERSION in era.versions for era in package] == [True]


# A row of docs/releases.md's era table: "| sglang 0.5.17-0.5.18 | ..."
_ROW = re.compile(r"^\| (sglang|vLLM) (\S+) \|", re.MULTILINE)


def documented_eras(text: str) -> list[tuple[str, str, str]]:
    """``(package, first, last)`` of each row of the era table in the text."""
    table = text.split("## The eras, read from the wheels", 1)[1].split("\n## ", 1)[0]
    rows = []
    for package, versions in _ROW.findall(table):
        first, _, last = versions.partition("-")
        rows.append((package.lower(), first, last or first))
    return rows


def test_the_documented_era_table_has_one_row_per_era_of_the_registry() -> None:
    text = (REPO_ROOT / "docs" / "releases.md").read_text()
    assert documented_eras(text) == [(era.package, era.first, era.last) for era in ERAS]


def test_a_registry_era_without_its_docs_row_is_found() -> None:
    text = (REPO_ROOT / "docs" / "releases.md").read_text()
    table = text.split("## The eras, read from the wheels", 1)[1]
    first_row = next(line for line in table.splitlines() if _ROW.match(line))
    dropped = text.replace(first_row + "\n", "", 1)
    assert len(documented_eras(dropped)) == len(documented_eras(text)) - 1


def test_the_registry_is_the_only_list_of_eras_the_sweep_reads() -> None:
    """The sweep's default selection and the command's known releases come from it."""
    from harness.cli.releases import default_selection

    for package in ("sglang", "vllm"):
        ends = {v for era in ERAS if era.package == package for v in (era.first, era.last)}
        assert set(default_selection(package)) == ends
        assert set(eras.known_versions(package)) >= ends
