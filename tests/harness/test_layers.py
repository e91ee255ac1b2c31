"""The harness's packages import each other along its layers (docs/design.md, "The packages"):
read from the import statements of every module with ``ast``, lazy imports included."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

HARNESS = REPO_ROOT / "harness"
LEAVES = {"defaults", "devices", "interrupts", "progress", "world"}  # import nothing of the harness
LOGIC = {"pipeline", "plugins", "upstream", "oracles", "measure", "gpu", "io"}
# Section builders still in logic packages: each imports render/ until it moves there.
PRESENTATION_IN_LOGIC: set[tuple[str, str]] = set()
# Values every layer reads, below plugins/ and pipeline/: they import only leaves.
VALUES = {"case"}
PACKAGES = ("reference", "legacy", "fixed", "harness")
# The harness's layers, lowest first: a module imports only modules of its own layer or
# below. A name is a module or package under harness/; a module takes the layer of the
# longest name that holds it (docs/design.md, "The packages").
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # import nothing of the harness (the loaders find the released packages, no more)
    (
        "leaves",
        frozenset(
            {
                "__init__",
                "defaults",
                "devices",
                "interrupts",
                "progress",
                "world",
                "executor",
                "wire",
                "upstream.loaders",  # the released packages found and loaded, no more
                "upstream.releases.__init__",
                "upstream.releases.wheels",
                "upstream.releases.eras",
                "upstream.releases.era_parts",
                "upstream.releases.era_laws",
                "releases.__init__",
                "releases.ray_executor",  # the sweep's Ray pool: an executor, no more
                "examples",  # samplers to copy: the built-ins' packages, no more
            }
        ),
    ),
    # plain values every stage reads: the case, a run's options, a check's result, a cut
    ("values", frozenset({"case", "options", "pipeline.check_result", "oracle_cut"})),
    ("plugins", frozenset({"plugins"})),  # implementations and our calling conventions
    ("upstream", frozenset({"upstream"})),  # the released packages' conventions and verifiers
    ("logic", frozenset({"pipeline", "oracles", "measure", "gpu", "io"})),
    ("judge", frozenset({"judgement", "judge"})),  # the one verdict, and what computes it
    # the Python API and the orchestration beside it that calls the judge: the versions
    # table and the release sweep
    ("api", frozenset({"testing", "releases"})),
    ("render", frozenset({"render"})),
    ("entry", frozenset({"cli", "pytest_plugin", "__main__"})),
)


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once a process (every test here reads the same files)."""
    return ast.parse(path.read_text())


@functools.cache
def harness_imports() -> frozenset[tuple[str, str]]:
    """``(module path under harness/, imported harness module without "harness.")``, the
    imports for the type checker included."""
    edges = set()
    for path in sorted(HARNESS.rglob("*.py")):
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.startswith("harness."):
                    edges.add((path.relative_to(HARNESS).as_posix(), name.removeprefix("harness.")))
    return frozenset(edges)


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


def modules_of(package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every module of a top-level package."""
    modules = {}
    for path in sorted((REPO_ROOT / package).rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


@functools.cache
def module_imports() -> dict[str, set[str]]:
    """Module -> the modules of the four packages it imports (module-level granularity:
    ``from a.b import c`` imports ``a.b.c`` where that is a module, else ``a.b``; relative,
    lazy and type-checking imports included)."""
    modules = {name: path for package in PACKAGES for name, path in modules_of(package).items()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        imported: set[str] = set()
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    imported.add(submodule if submodule in modules else source)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[name] = {target for target in imported if target in modules and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import each other round a circle (the strongly connected
    components of more than one module, Tarjan's), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def one_circle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest way round the component from its first module back to it."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        step = []
        for module in frontier:
            for target in sorted(graph[module] & members):
                if target == start:
                    return [*paths[module], start]
                if target not in paths:
                    paths[target] = [*paths[module], target]
                    step.append(target)
        frontier = step
    raise AssertionError(f"{component} is not a circle")


def describe_circles(graph: dict[str, set[str]], found: list[list[str]]) -> str:
    return "\n".join(
        f"{len(c)} modules: {' -> '.join(one_circle(graph, c))} (all: {', '.join(c)})"
        for c in found
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_the_import_graph_of_each_package_has_no_circle(package: str) -> None:
    graph = module_imports()
    found = [c for c in circles(graph) if any(m.split(".")[0] == package for m in c)]
    assert found == [], "import circles:\n" + describe_circles(graph, found)


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of a harness module (dotted, ``harness.`` prefixed)."""
    name = module.removeprefix("harness").removeprefix(".") or "__init__"
    best: tuple[int, int] | None = None  # (length of the name that holds it, layer)
    for layer, (_, members) in enumerate(LAYERS):
        for member in members:
            if (name == member or name.startswith(member + ".")) and (
                best is None or len(member) > best[0]
            ):
                best = (len(member), layer)
    assert best is not None, f"{module} is in no layer of LAYERS"
    return best[1]


def test_every_harness_module_imports_no_module_of_a_higher_layer() -> None:
    graph = module_imports()
    upward = sorted(
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in graph.items()
        if module.split(".")[0] == "harness"
        for target in targets
        if target.split(".")[0] == "harness" and layer_of(target) > layer_of(module)
    )
    assert upward == []


def every_module() -> Iterator[str]:
    for package in PACKAGES:
        yield from modules_of(package)


# Imports each module named on the command line in turn and prints, as JSON, the
# variables each import added, removed or changed.
_IMPORT_EACH = """
import importlib, json, os, sys
before, changed = dict(os.environ), {}
for name in sys.argv[1:]:
    importlib.import_module(name)
    now = dict(os.environ)
    if now != before:
        changed[name] = sorted(k for k in set(now) | set(before) if now.get(k) != before.get(k))
        before = now
print(json.dumps(changed))
"""


@pytest.mark.e2e
def test_importing_every_module_leaves_the_process_environment_unchanged() -> None:
    """In a fresh process with a clean environment (nothing of this one's: no
    ``TRITON_INTERPRET`` set by the test suite), no import writes ``os.environ``."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, *every_module()],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {}


def test_no_stage_imports_the_isolated_executor() -> None:
    """Where implementation code runs follows from the options in one place, the judge
    (``harness.judge`` starts the executor ``RunOptions.isolate`` asks for): a stage
    takes an executor (``harness.executor``, below every stage with the wire) and never
    imports the isolated one."""
    graph = module_imports()
    for leaf in ("harness.executor", "harness.wire"):
        assert {t for t in graph[leaf] if layer_of(t) > 0} == set(), leaf
    users = {
        module
        for module, targets in graph.items()
        if "harness.pipeline.isolation" in targets
        and module.split(".")[1] in {"pipeline", "oracles", "measure", "gpu"}
    }
    assert users == set()


def folder_of(module: str) -> str:
    """The folder a dotted module lives in (``harness.upstream.dispatch`` ->
    ``harness.upstream``)."""
    return module.rpartition(".")[0]


def two_way_folders(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every pair of folders of the harness that import each other (each pair sorted),
    beside the package's top folder, whose modules take their layers one by one."""
    edges = {
        (folder_of(module), folder_of(target))
        for module, targets in graph.items()
        for target in targets
        if module.startswith("harness.") and target.startswith("harness.")
    }
    return {(a, b) for a, b in edges if a < b and (b, a) in edges and "harness" not in (a, b)}


# A package and its subpackage of checks, which read the pipeline's results and which the
# ledger runs: one stage, two folders.
TWO_WAY_FOLDERS = {("harness.pipeline", "harness.pipeline.checks")}


def test_no_two_folders_of_the_harness_import_each_other() -> None:
    assert two_way_folders(module_imports()) == TWO_WAY_FOLDERS


def test_a_folder_that_imports_back_is_found() -> None:
    graph = {
        "harness.upstream.dispatch": {"harness.upstream.releases.eras"},
        "harness.upstream.releases.eras": set(),
        "harness.upstream.releases.loading": {"harness.upstream.vllm_loader"},
        "harness.upstream.vllm_loader": set(),
        "harness.case": {"harness.upstream.dispatch"},
    }
    assert two_way_folders(graph) == {("harness.upstream", "harness.upstream.releases")}
    del graph["harness.upstream.releases.loading"]
    assert two_way_folders(graph) == set()


# The longest a module of the product (harness/, reference/, legacy/, fixed/) may be.
MODULE_LINES = 500


def modules_over_the_limit(root: Path) -> dict[str, int]:
    """Every module under ``root`` longer than ``MODULE_LINES`` lines, with its length."""
    over = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES:
            over[path.relative_to(root).as_posix()] = lines
    return over


def test_no_module_of_the_product_is_over_the_limit() -> None:
    packages = [REPO_ROOT / name for name in ("harness", "reference", "legacy", "fixed")]
    over = {
        f"{package.name}/{name}": lines
        for package in packages
        for name, lines in modules_over_the_limit(package).items()
    }
    assert not over, over


def test_a_module_one_line_over_the_limit_is_found(tmp_path: Path) -> None:
    (tmp_path / "stage").mkdir()
    (tmp_path / "stage" / "at.py").write_text("x = 1\n" * MODULE_LINES)
    (tmp_path / "stage" / "over.py").write_text("x = 1\n" * (MODULE_LINES + 1))
    assert modules_over_the_limit(tmp_path) == {"stage/over.py": MODULE_LINES + 1}
