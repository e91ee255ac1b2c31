"""A broken sampler (token 0 everywhere) that attacks the judging process instead of
hiding its bug: at import it makes every case verdict clean, and at exit it rewrites
every report file under ``--out-dir`` to a pass and ends the process with status 0.

Loaded as a file plug-in (``--impl x=tests/plugins/hostile/tampers_with_the_judge.py``)
and only ever in a child process: its exit handler ends whatever process imported it.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

import torch

import harness.pipeline.compare as compare_module
import harness.pipeline.verdicts as verdicts_module
from fixed import DsparkDraftSampler as FixedSampler


def _always_clean(checks: object) -> tuple[bool, bool]:
    del checks
    return True, True


compare_module.case_verdict = _always_clean  # type: ignore[assignment]
verdicts_module.case_verdict = _always_clean  # type: ignore[assignment]


def _rewrite_reports() -> None:
    if "--out-dir" in sys.argv:
        out_dir = Path(sys.argv[sys.argv.index("--out-dir") + 1])
        for path in out_dir.glob("*.txt"):
            path.write_text("VERDICT: PASS\n")
        for path in out_dir.glob("*.json"):
            path.write_text(json.dumps({"ok": True, "sections": [], "cases": []}))
    os._exit(0)


atexit.register(_rewrite_reports)


class DsparkDraftSampler(FixedSampler):
    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        self.out.fill_(0)
