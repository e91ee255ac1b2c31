"""Every tox environment is run by CI, in full or in its cheapest form
(``scripts/guard_tox_envs.py``), and the docs list exactly the environments ``tox.ini``
declares."""

from __future__ import annotations

import configparser
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests.helpers import REPO_ROOT


def _guard_script() -> ModuleType:
    path = REPO_ROOT / "scripts" / "guard_tox_envs.py"
    spec = importlib.util.spec_from_file_location("guard_tox_envs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules[spec.name]


def _tox_environments() -> set[str]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO_ROOT / "tox.ini")
    return {section.split(":", 1)[1] for section in config.sections() if ":" in section}


CI_RUN = (REPO_ROOT / ".ci" / "run").read_text()


def test_ci_runs_every_environment_in_full_or_guarded() -> None:
    guard = _guard_script()
    in_full = set(re.findall(r"tox run -e ([\w,]+)", CI_RUN))
    in_full = {name for names in in_full for name in names.split(",")}
    assert in_full == set(guard.RUN_BY_CI)
    assert "scripts/guard_tox_envs.py" in CI_RUN
    assert set(guard.GUARDS) | in_full == _tox_environments()
    assert not set(guard.GUARDS) & in_full


def test_ci_removes_every_environment_once_it_has_run() -> None:
    """Ten environments of about 2 GB each do not fit on a CI machine with little disk:
    `.ci/run` removes each one it runs in full, and the guard removes the others."""
    guard = _guard_script()
    discarded = set(re.findall(r"^discard_only ([\w ]+)$", CI_RUN, flags=re.MULTILINE))
    discarded = {name for names in discarded for name in names.split()}
    assert discarded == set(guard.RUN_BY_CI)
    assert re.search(r"^python3 scripts/guard_tox_envs.py \"\$\{discard\[@\]\}\"$", CI_RUN, re.M)
    assert "discard=(--discard)" in CI_RUN


def test_discard_removes_the_directory_tox_names(tmp_path: Path, monkeypatch) -> None:
    guard = _guard_script()
    env_dir = tmp_path / "env"
    (env_dir / "lib").mkdir(parents=True)
    (env_dir / "lib" / "torch.so").write_bytes(b"x")
    asked: list[tuple[str, ...]] = []

    def fake_tox(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
        asked.append(args)
        out = f"[testenv:slow]\nenv_dir = {env_dir}\n"
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")

    monkeypatch.setattr(guard, "tox", fake_tox)
    guard.discard("slow")
    assert asked == [("config", "-e", "slow", "-k", "env_dir")]
    assert not env_dir.exists()
    guard.discard("slow")  # already gone: nothing to do, no error
    assert not env_dir.exists()


def test_the_environment_table_lists_exactly_the_tox_environments() -> None:
    usage = (REPO_ROOT / "docs" / "usage.md").read_text()
    table = usage[usage.index("| environment | what it runs |") :].split("\n\n")[0]
    listed = {re.match(r"\| `(\w+)`", row).group(1) for row in table.splitlines()[2:]}  # type: ignore[union-attr]
    assert listed == _tox_environments()


def test_cheapest_forms_add_only_their_own_arguments(tmp_path: Path) -> None:
    guard = _guard_script()
    cheap = guard.Guard(pytest=guard.Form.COLLECT, harness=guard.Form.DRY_RUN)
    pytest_line = "pytest -p no:cacheprovider -n auto -m 'vllm and not slow'"
    harness_line = "python -m harness compare --only none --out-dir /x"
    assert shlex.split(guard.cheapest(pytest_line, guard=cheap, scratch=tmp_path)[0]) == [
        *shlex.split(pytest_line),
        "--collect-only",
        "-q",
    ]
    assert shlex.split(guard.cheapest(harness_line, guard=cheap, scratch=tmp_path)[0]) == [
        *shlex.split(harness_line),
        "--dry-run",
    ]
    bench_line = "pytest -m bench tests/bench --benchmark-autosave --benchmark-storage=file:///r"
    full = guard.Guard()
    assert shlex.split(guard.cheapest(bench_line, guard=full, scratch=tmp_path)[0])[-1] == (
        f"--benchmark-storage=file://{tmp_path}"  # the last one given wins
    )
    other = "pytest-benchmark compare"
    assert guard.cheapest(other, guard=cheap, scratch=tmp_path) == (other, guard.Form.FULL)


def test_the_readme_names_exactly_the_tox_environments() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    sentence = readme[readme.index("`tox.ini` has ") :].split(".\n")[0]
    named = set(re.findall(r"`(\w+)`", sentence.split("(")[0]))
    assert named == _tox_environments()
