"""Shared test configuration: Hypothesis profiles, the gpu marker, interpreter set-up,
and a guard that fails any test leaking global torch or process state."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from harness.defaults import DEFAULT_THREADS
from harness.upstream.loaders import vllm_loader
from harness.upstream.loaders.sglang_loader import unavailable_reason
from tests.helpers import DefaultReport
from tests.oracle_memo import FRESH, SWITCH, OracleMemo, installed, must_compute_afresh
from tests.session_share import computed_once, session_folder

# Triton must see the interpreter flag before it is first imported; without CUDA
# every kernel test runs interpreted.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Triton's C extension aborts the process when it is imported a second time, and a nested
# in-process pytest run (``pytester.runpytest_inprocess``) unloads every module it
# imported: load Triton here, before any nested run, so none unloads it.
with contextlib.suppress(ImportError):
    import triton  # noqa: F401

# Each process of the suite (each xdist worker too) runs the small shapes on one intra-op
# thread, as the harness does by default.
torch.set_num_threads(DEFAULT_THREADS)

settings.register_profile(
    "default",
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=400,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    upstream_missing = unavailable_reason()
    skip_upstream = pytest.mark.skip(reason=upstream_missing or "")
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    vllm_missing = vllm_loader.unavailable_reason()
    skip_vllm = pytest.mark.skip(reason=vllm_missing or "")
    for item in items:  # by marker: a test's keywords also hold its folders' names
        if item.get_closest_marker("gpu") is not None and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if item.get_closest_marker("upstream") is not None and upstream_missing:
            item.add_marker(skip_upstream)
        if item.get_closest_marker("vllm") is not None and vllm_missing:
            item.add_marker(skip_vllm)


PYTEST_OWN_VARIABLE = "PYTEST_CURRENT_TEST"  # pytest rewrites it in every test phase


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != PYTEST_OWN_VARIABLE}


def _restore_environment(before: dict[str, str]) -> list[str]:
    """Put ``os.environ`` back to ``before``; return what had changed (+added -removed ~set)."""
    after = _environment()
    changes = [f"+{k}" for k in sorted(set(after) - set(before))]
    changes += [f"-{k}" for k in sorted(set(before) - set(after))]
    changes += [f"~{k}" for k in sorted(set(before) & set(after)) if before[k] != after[k]]
    for key in set(after) - set(before):
        del os.environ[key]
    os.environ.update(before)
    return changes


@pytest.fixture(autouse=True)
def no_leaked_global_state() -> Iterator[None]:
    """Fail a test that changes the default dtype, the default device or ``os.environ``.

    Drawing from the global CPU RNG is legitimate, so its state is restored rather than
    checked: no test sees another test's draws. The leaked state is restored too, so one
    leak fails one test only. Runs after ``monkeypatch`` has undone its own changes.
    """
    rng_state = torch.get_rng_state()
    dtype = torch.get_default_dtype()
    device = torch.get_default_device()
    environ = _environment()
    yield
    torch.set_rng_state(rng_state)
    leaks = []
    if torch.get_default_dtype() != dtype:
        leaks.append(f"default dtype {dtype} -> {torch.get_default_dtype()}")
        torch.set_default_dtype(dtype)
    if torch.get_default_device() != device:
        leaks.append(f"default device {device} -> {torch.get_default_device()}")
        torch.set_default_device(device)
    changed = _restore_environment(environ)
    if changed:
        leaks.append(f"os.environ changed: {', '.join(changed)}")
    if leaks:
        pytest.fail("test leaked global state: " + "; ".join(leaks), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def oracle_memo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OracleMemo | None]:
    """Each distinct oracle decode of the judge's path once a session, shared by the xdist
    workers (``tests/oracle_memo.py``); ``None`` when ``DSPARK_TEST_ORACLE_MEMO=0``."""
    if os.environ.get(SWITCH, "1") == "0":
        yield None
        return
    folder = session_folder(tmp_path_factory) / "oracle-memo"
    folder.mkdir(exist_ok=True)
    memo = OracleMemo(folder)
    with installed(memo):
        yield memo


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture of the test is set up, module-scoped ones included."""
    FRESH.now = must_compute_afresh(item)


@pytest.fixture(scope="session")
def default_report(tmp_path_factory: pytest.TempPathFactory) -> DefaultReport:
    """The default report without the work section, run once a session for the tests
    that only read it: by the first xdist worker that asks, the others read what it left
    (``tests/session_share.py``). It runs before any test's leak guard, so it checks the
    same global state itself (and leaves the CPU RNG as it found it)."""
    out_dir = session_folder(tmp_path_factory) / "default-report"  # one for every worker
    code, stdout = computed_once(
        tmp_path_factory, "default-report", lambda: _run_default_report(out_dir)
    )
    return DefaultReport(exit_code=code, stdout=stdout, out_dir=out_dir)


def _run_default_report(out_dir: Path) -> tuple[int, str]:
    from harness.cli import main

    rng_state, dtype, environ = torch.get_rng_state(), torch.get_default_dtype(), _environment()
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(["--no-work", "--quiet", "--out-dir", str(out_dir)])
    torch.set_rng_state(rng_state)
    changed = _restore_environment(environ)
    assert not changed and torch.get_default_dtype() == dtype, (changed, dtype)
    return code, stdout.getvalue()
