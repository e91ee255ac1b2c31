"""The sequential stages' calibration (docs/statistics.md, "Sequential stages"): the
correct designs of ``tests/plugins/shared_stream_defects.py`` and ``fixed`` at the
default config, seeds 0 to 199, are never rejected, stages or not. With family-wise
alpha 1e-6 the chance of one false alarm in these 1,000 runs is at most 1e-3, and a
family is suspicious with chance at most 1e-3 per run, so more than 6 suspicious runs
would have chance below 1e-3 too (Poisson with mean 1)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.helpers import REPO_ROOT

SEEDS = 200


def calibration_script() -> ModuleType:
    path = REPO_ROOT / "scripts" / "sequential_calibration.py"
    spec = importlib.util.spec_from_file_location("sequential_calibration", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its workers find its functions by module name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_no_correct_design_is_rejected_over_200_seeds_stages_included() -> None:
    calibration = calibration_script().calibrate(SEEDS, jobs=2, say=lambda _: None)
    assert calibration.runs == SEEDS * 5
    assert calibration.false_alarms == 0, calibration.describe()
    assert calibration.suspicious <= 6, calibration.describe()
    assert calibration.stages >= calibration.suspicious  # each suspicious family: a stage
