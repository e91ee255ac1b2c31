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
# Values every layer reads, below plugins/ and pipeline/: they import only leaves.
VALUES = {"case"}


def harness_imports() -> set[tuple[str, str]]:
    """``(module path under harness/, imported harness module without "harness.")``, the
    imports for the type checker included."""
    edges = set()
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
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


def test_plugins_import_nothing_of_pipeline() -> None:
    found = {
        (m, t) for m, t in harness_imports() if package(m) == "plugins" and package(t) == "pipeline"
    }
    assert found == set()  # not even for the type checker: a case is a value below both


def test_the_values_import_only_leaves() -> None:
    found = {(m, t) for m, t in harness_imports() if package(m) in VALUES}
    assert {(m, t) for m, t in found if package(t) not in LEAVES} == set()


# -- where implementation code runs ---------------------------------------------------------
ISOLATION = "pipeline.isolation"  # the isolated executor: only entry points choose it
STAGES = {
    "pipeline.runner",
    ISOLATION,
    "oracles.stats",
    "measure.timing",
    "measure.counters",
    "pipeline.life",
    "measure.work",
    "measure.time_ratio",
}


def module_imports() -> dict[str, set[str]]:
    """Every harness module (dotted, without "harness.") and the harness modules it imports,
    as ``harness_imports`` reads them, ``from harness.pipeline import isolation`` read as an
    import of ``pipeline.isolation``."""
    modules = {
        path.relative_to(HARNESS).with_suffix("").as_posix().replace("/", "."): path
        for path in sorted(HARNESS.rglob("*.py"))
    }
    modules = {name.removesuffix(".__init__"): path for name, path in modules.items()}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                continue
            found = {i.removeprefix("harness.") for i in imported if i.startswith("harness.")}
            graph[name] |= {target for target in found if target in modules}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_no_stage_imports_the_isolation_machinery_and_the_stages_form_no_circle() -> None:
    graph = module_imports()
    assert {"executor", "wire"} <= set(graph)
    for leaf in ("executor", "wire"):  # below every stage: they import only leaves
        assert {t for t in graph[leaf] if package(t) not in LEAVES} == set(), leaf
    users = {
        module
        for module, targets in graph.items()
        if ISOLATION in targets and package(module) in {"pipeline", "oracles", "measure"}
    }
    assert users == set()  # a stage takes an executor; where it runs is its caller's choice
    assert set(graph) >= STAGES
    assert [c for c in circles(graph) if c & STAGES] == []
