"""Loading plug-ins from files and modules: the import surface, and clear errors.

A file that imports ``sglang.*`` gets the ``sglang`` of its server era while it loads:
detected from its imports or named after the target, never decided by whether an
``sglang`` is importable (here: a stand-in package of our own on ``sys.path``). Every
way a plug-in can fail to load is one ``ImplementationError`` that names the argument
and the expected form, and the command line exits 2.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.plugins.eras import Era, sglang_imports
from harness.plugins.implementations import ImplementationError, parse_impl_spec
from harness.plugins.sglang_surface import SURFACE, harness_import_surface
from reference import VanillaMarkovHead

AFTER_FIX = Path("tests/plugins/upstream/dspark_after_fix.py").resolve()
AFTER_FIX_LAZY = Path("tests/plugins/upstream/dspark_after_fix_lazy.py").resolve()


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source))
    return path


def _sglang_modules() -> list[str]:
    return sorted(name for name in sys.modules if name.split(".")[0] == "sglang")


@pytest.fixture
def stand_in_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A package named ``sglang`` on ``sys.path`` with its own ``VanillaMarkov``."""
    root = tmp_path / "site"
    for module_name, names in SURFACE.items():
        parts = module_name.split(".")
        for depth in range(1, len(parts)):
            package = root.joinpath(*parts[:depth])
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").touch()
        body = (
            "from harness.plugins.sglang_surface import SURFACE\n"
            f"globals().update(SURFACE[{module_name!r}])\n"
        )
        if "VanillaMarkov" in names:
            body = "class VanillaMarkov:\n    pass\n"
        root.joinpath(*parts[:-1], f"{parts[-1]}.py").write_text(body)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in _sglang_modules():
        del sys.modules[name]


def test_an_importable_sglang_does_not_change_the_detected_era(stand_in_sglang: Path) -> None:
    implementation = parse_impl_spec(f"server={AFTER_FIX}")
    assert implementation.era is Era.PR36934
    module = sys.modules[implementation.sampler_class.__module__]
    assert module.VanillaMarkov is VanillaMarkovHead  # the surface's, not the package's


def test_the_installed_era_uses_the_importable_sglang_as_it_is(stand_in_sglang: Path) -> None:
    implementation = parse_impl_spec(f"server={AFTER_FIX}@installed")
    assert implementation.era is Era.INSTALLED
    module = sys.modules[implementation.sampler_class.__module__]
    assert module.VanillaMarkov is not VanillaMarkovHead
    assert str(stand_in_sglang) in sys.modules["sglang"].__file__


def test_the_surface_is_scoped_to_loading_and_restores_what_was_there() -> None:
    sentinel = type(sys)("sglang")
    sys.modules["sglang"] = sentinel
    try:
        with harness_import_surface():
            assert sys.modules["sglang"] is not sentinel
            assert "sglang.srt.environ" in sys.modules
        assert _sglang_modules() == ["sglang"]
        assert sys.modules["sglang"] is sentinel
    finally:
        del sys.modules["sglang"]


def test_an_unknown_flag_names_itself() -> None:
    with harness_import_surface():
        from sglang.srt.environ import envs  # type: ignore[import-not-found]

        with pytest.raises(AttributeError, match="SGLANG_NO_SUCH_FLAG"):
            _ = envs.SGLANG_NO_SUCH_FLAG


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import sglang.srt.utils\n", [("sglang.srt.utils", None)]),
        ("from sglang.srt.environ import envs\n", [("sglang.srt.environ", "envs")]),
        ("def f():\n    from sglang.x import y\n", [("sglang.x", "y")]),
        ("from .sglang import x\n", []),
        ("import sglangish\n", []),
        ("import torch\n", []),
    ],
)
def test_sglang_imports_reads_the_source(source: str, found: list[tuple[str, str | None]]) -> None:
    assert sglang_imports(source, filename="x.py") == found


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from sglang.srt.utils import is_npu\n", [("sglang.srt.utils", "is_npu")]),
        ("def f():\n    from sglang.x import y\n", []),
        ("if TYPE_CHECKING:\n    from sglang.x import y\n", []),
        (
            "if typing.TYPE_CHECKING:\n    import sglang.x\nelse:\n    import sglang.z\n",
            [("sglang.z", None)],
        ),
        (
            "try:\n    import sglang.x\nexcept ImportError:\n    import sglang.y\n",
            [
                ("sglang.x", None),
                ("sglang.y", None),
            ],
        ),
        (
            "class A:\n    from sglang.x import y\n    def f(self):\n        import sglang.z\n",
            [("sglang.x", "y")],
        ),
    ],
    ids=["module-level", "in-function", "type-checking", "else-branch", "try", "class-body"],
)
def test_the_imports_that_run_at_load_leave_out_functions_and_type_checking(
    source: str, found: list[tuple[str, str | None]]
) -> None:
    assert sglang_imports(source, filename="x.py", running_only=True) == found


def test_a_file_with_a_lazy_npu_import_loads_without_an_era_tag() -> None:
    implementation = parse_impl_spec(f"lazy={AFTER_FIX_LAZY}")
    assert implementation.era is Era.PR36934
    assert _sglang_modules() == []


def test_a_lazy_import_is_resolved_from_the_era_when_it_runs(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "lazy_site.py",
        """
        from sglang.srt.utils import is_npu

        def site():
            from sglang.srt.speculative.spec_tp_sync import SpecTpSyncSite
            return SpecTpSyncSite

        def npu_only():
            from sglang.srt.hardware_backend.npu.dspark import npu_draft_block
            return npu_draft_block

        class DsparkDraftSampler:
            def __init__(self, *, model, gamma, max_bs, device, out=None):
                pass

            def stage_sampling_params(self, *, bs, sampling_info):
                pass

            def __call__(self, hidden_states, input_ids):
                pass
        """,
    )
    implementation = parse_impl_spec(f"lazy={path}")
    module = sys.modules[implementation.sampler_class.__module__]
    served = SURFACE["sglang.srt.speculative.spec_tp_sync"]["SpecTpSyncSite"]
    assert module.site() is served
    assert _sglang_modules() == []
    with pytest.raises(
        ImportError,
        match=r"lazy_site\.py imports sglang\.srt\.hardware_backend\.npu\.dspark where it "
        r"runs; the pr36934 era does not serve it",
    ):
        module.npu_only()


def test_a_module_with_only_lazy_imports_takes_its_era_from_its_constructor(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path / "newer_lazy.py",
        """
        class DsparkDraftSampler:
            def __init__(self, *, model, gamma, max_bs, device, noise, tp_sync, greedy_draft):
                pass

            def __call__(self, hidden_states, input_ids):
                from sglang.srt.speculative.dspark_components.dspark_draft import (
                    draft_markov_block,
                )
                return draft_markov_block
        """,
    )
    assert parse_impl_spec(f"newer={path}").era is Era.SGLANG_0_5_23


def test_a_module_that_fits_no_era_asks_for_one(tmp_path: Path) -> None:
    path = _write(tmp_path / "odd.py", "from sglang.srt.server_args import ServerArgs\n")
    with pytest.raises(
        ImplementationError, match=r"sglang\.srt\.server_args\.ServerArgs.*@pr36934"
    ):
        parse_impl_spec(f"odd={path}")


def test_an_unknown_era_names_the_known_ones() -> None:
    with pytest.raises(ImplementationError, match=r"unknown era 'pr1'.*@sglang-0\.5\.23"):
        parse_impl_spec(f"x={AFTER_FIX}@pr1")


@pytest.mark.parametrize(
    ("source", "spec_suffix", "expected"),
    [
        ("raise RuntimeError('boom at import')\n", "", r"raised RuntimeError: boom at import"),
        ("import sys\nsys.exit(3)\n", "", r"called sys\.exit\(3\)"),
        (
            "class Other:\n    pass\n",
            "",
            r"has no 'DsparkDraftSampler' \(classes defined there: Other\)",
        ),
        ("class Other:\n    pass\n", ":Missing", r"has no 'Missing'"),
        ("VALUE = 3\n", ":VALUE", r"'VALUE' is a int, neither a sampler class"),
    ],
    ids=["raises", "sys-exit", "no-default-class", "no-named-class", "not-a-class"],
)
def test_a_file_that_cannot_give_a_sampler_is_one_clear_error(
    tmp_path: Path, source: str, spec_suffix: str, expected: str
) -> None:
    path = _write(tmp_path / "plugin.py", source)
    with pytest.raises(ImplementationError, match=expected):
        parse_impl_spec(f"mine={path}{spec_suffix}")
    assert "dspark_impl_mine" not in sys.modules


def test_a_missing_file_names_the_path_and_the_form(tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"
    with pytest.raises(ImplementationError, match=r"no such file .*nope\.py.*NAME=path/to"):
        parse_impl_spec(f"mine={missing}")


def test_a_path_that_is_not_a_python_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImplementationError, match=r"not a \.py file"):
        parse_impl_spec(f"mine={tmp_path}/sampler.txt:Sampler")


def test_a_failed_load_leaves_no_surface_behind(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "bad.py", "from sglang.srt.utils import is_npu\nraise ValueError('x')\n"
    )
    with pytest.raises(ImplementationError, match="ValueError: x"):
        parse_impl_spec(f"bad={path}")
    assert _sglang_modules() == []
    assert "dspark_impl_bad" not in sys.modules


def test_a_sampler_that_needs_a_missing_sglang_name_says_which(tmp_path: Path) -> None:
    path = _write(tmp_path / "newer.py", "from sglang.srt.utils import brand_new_helper\n")
    with pytest.raises(ImplementationError, match="brand_new_helper"):
        parse_impl_spec(f"newer={path}")


@pytest.mark.parametrize(
    "spec",
    ["mine=/definitely/not/here.py", "mine=no_such_module_anywhere:Sampler", "mine=justaname"],
)
def test_the_cli_exits_2_on_a_plugin_that_cannot_load(
    spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", "--impl", spec, "--quiet", "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--impl" in err
    assert "NAME=" in err
