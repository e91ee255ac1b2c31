"""Which versions the table runs here, and what each part of a row runs: every part in
full for our modules, each in its convention's cut for vLLM 0.33's speculator under
Triton's interpreter (the scan on the points inside its contract, at most the cut's rows
a call; one timing repetition), stated in the row."""

from __future__ import annotations

import pytest

from harness.pipeline.support_scan import full_plan
from harness.plugins.implementations import builtin_implementations, parse_impl_spec
from harness.releases import versions
from harness.upstream.loaders import vllm_loader

PLAN = full_plan(triples_per_point=1 << 16)


def test_without_vllm_its_rows_are_absent_and_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_loader, "unavailable_reason", lambda: "vllm is not installed")
    runnable, absent = versions.versions_to_run()
    assert runnable == versions.VERSIONS
    assert absent == ("vllm-0.33-dense, vllm-0.33-topk4: not run here: vllm is not installed",)


def test_our_modules_run_every_part_in_full() -> None:
    plan = versions.version_plan(builtin_implementations(("fixed",))[0], plan=PLAN, repeats=5)
    assert plan.scan_points == tuple(PLAN.points()) and len(plan.scan_points) == 12
    assert (plan.nonfinite_bs, plan.nonfinite_calls, plan.repeats) == (1024, 4, 5)
    assert plan.cut == ()


@pytest.mark.vllm
def test_vllms_rows_run_each_part_in_its_cut_and_say_so() -> None:
    runnable, absent = versions.versions_to_run()
    assert set(versions.VLLM_VERSIONS) <= set(runnable) and absent == ()
    if not vllm_loader.interpreted():
        pytest.skip("vLLM's kernels are compiled here (CUDA): its convention declares no cut")
    plan = versions.version_plan(parse_impl_spec("v=vllm"), plan=PLAN, repeats=5)
    # inside its contract: the vanilla head, float32 (the interpreter has no bfloat16)
    assert {(p.head_kind, p.dtype) for p in plan.scan_points} == {("vanilla", "float32")}
    assert len(plan.scan_points) == 2 and all(p.bs == 250 for p in plan.scan_points)
    assert (plan.nonfinite_bs, plan.nonfinite_calls, plan.repeats) == (250, 1, 1)
    assert plan.cut == (
        "cut by vllm-0.33 (sampler under Triton's interpreter): scan 2 points inside its "
        "contract (10 outside not run) at bs=250, 2000 triples; non-finite rule at bs=250, "
        "1 call; timing 1 repetition",
    )
