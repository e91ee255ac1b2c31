"""The harness's packages import each other along its layers (docs/design.md, "The packages"):
read from the import statements of every module with ``ast``, lazy imports included."""

from __future__ import annotations

import ast

from tests.helpers import REPO_ROOT

HARNESS = REPO_ROOT / "harness"
LEAVES = {"defaults", "devices", "interrupts", "progress", "world"}  # import nothing of the harness
LOGIC = {"pipeline", "plugins", "upstream", "oracles", "measure", "gpu", "io"}
# Section builders still in logic packages: each imports render/ until it moves there.
PRESENTATION_IN_LOGIC: set[tuple[str, str]] = set()
# What plugins/ reads from pipeline/: nothing at run time; for type checking only, the
# case a convention builds a sampler for (the pipeline's first value, pipeline/case.py).
PIPELINE_TYPES_IN_PLUGINS = {("plugins/conventions.py", "pipeline.case")}


def harness_imports(*, type_checking_only: bool = False) -> set[tuple[str, str]]:
    """``(module path under harness/, imported harness module without "harness.")``;
    with ``type_checking_only``, only the imports under ``if TYPE_CHECKING:``."""
    edges = set()
    for path in sorted(HARNESS.rglob("*.py")):
        tree = ast.parse(path.read_text())
        roots = [tree]
        if type_checking_only:
            roots = [
                node
                for node in ast.walk(tree)
                if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
            ]
        for node in (found for root in roots for found in ast.walk(root)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("harness."):
                    edges.add((path.relative_to(HARNESS).as_posix(), name.removeprefix("harness.")))
    return edges


def package(module: str) -> str:
    """The package (or top-level module) a path or dotted name belongs to."""
    return module.replace("/", ".").removesuffix(".py").split(".")[0]


def test_the_leaves_import_nothing_of_the_harness_but_leaves() -> None:
    wrong = {(m, t) for m, t in harness_imports() if package(m) in LEAVES}
    assert {(m, t) for m, t in wrong if package(t) not in LEAVES} == set()


def test_only_the_entry_point_imports_the_command_line() -> None:
    users = {m for m, t in harness_imports() if package(t) == "cli" and package(m) != "cli"}
    assert users == {"__main__.py"}


def test_logic_packages_import_presentation_only_where_a_section_builder_remains() -> None:
    found = {
        (m, package(t))
        for m, t in harness_imports()
        if package(m) in LOGIC and package(t) in {"render", "cli"}
    }
    assert found == PRESENTATION_IN_LOGIC  # a new edge is a regression, a gone one a cleanup


def test_plugins_import_nothing_of_pipeline_at_run_time() -> None:
    found = {
        (m, t) for m, t in harness_imports() if package(m) == "plugins" and package(t) == "pipeline"
    }
    assert found == PIPELINE_TYPES_IN_PLUGINS
    assert found <= harness_imports(type_checking_only=True)  # for the type checker only
