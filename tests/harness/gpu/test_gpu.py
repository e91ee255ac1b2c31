"""The GPU path: the standard matrix on CUDA, the compiled Triton race, CUDA-graph capture
and replay, and no host synchronisation in fixed's ``__call__``.

Every test here is marked ``gpu`` and skipped on a machine without CUDA
(``tests/harness/gpu/test_gpu_code_path.py`` checks that). Inputs are generated on the CPU from the
seed and moved, as everywhere in the harness.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
import torch

import reference.triton_race as triton_race
from fixed import DsparkDraftSampler as FixedSampler
from harness.case import Case, build_inputs
from harness.gpu.graphs import capture_and_replay, replay_records
from harness.gpu.host_sync import SyncStatus, no_host_sync
from harness.judgement import RedrawVerdict
from harness.pipeline.compare import case_record, evaluate_run
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.render.graphs import graph_sections
from reference.step_samplers import exponential_race, exponential_race_torch
from tests.helpers import REPO_ROOT, judged_records, subprocess_env

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
FIXED = builtin_implementations(("fixed",))[0]
GRAPH_CASES = (
    "folded-sampled/vanilla",
    "folded-sampled/gated+confidence",
    "folded-sampled/rnn/bf16",
    "folded-sampled/vanilla/V=2047/padded",  # bs=4 captured in buffers of max_bs=8
    "folded-all-greedy/vanilla",
    "greedy-fold/fused/vanilla",
    "no-anchor/gated/folded",  # legacy raises before capture
)


def _matrix_case(name: str) -> Case:
    return next(case for case in standard_matrix(device=DEVICE) if case.name == name)


# -- every case on CUDA ------------------------------------------------------------------------
def test_standard_matrix_on_cuda_fixed_is_clean_and_legacy_follows_the_ledger() -> None:
    verdicts = [
        evaluate_run(run_case(case, builtin_implementations()), require_observable=True)
        for case in standard_matrix(device=DEVICE)
    ]
    for verdict in verdicts:
        label = verdict.case.label()
        assert not verdict.failed_checks("fixed"), (label, verdict.failed_checks("fixed"))
        assert not verdict.failed_checks("reference"), (label, verdict.failed_checks("reference"))
        assert verdict.ledger is not None and verdict.ledger.holds, (label, verdict.ledger)
    records = [case_record(v, key=v.case.label()) for v in verdicts]
    assert judged_records(records, require_coverage=True).ok


def test_case_inputs_on_cuda_are_the_cpu_numbers_moved() -> None:
    case = _matrix_case("folded-sampled/gated+confidence")
    on_gpu, on_cpu = build_inputs(case), build_inputs(case.with_changes(device="cpu"))
    assert on_gpu.hidden_states.is_cuda and on_gpu.input_ids.is_cuda
    assert torch.equal(on_gpu.hidden_states.cpu(), on_cpu.hidden_states)
    assert torch.equal(on_gpu.input_ids.cpu(), on_cpu.input_ids)
    for (name, gpu_param), (_, cpu_param) in zip(
        on_gpu.model.named_parameters(), on_cpu.model.named_parameters(), strict=True
    ):
        assert torch.equal(gpu_param.cpu(), cpu_param), name


# -- the compiled Triton race ------------------------------------------------------------------
def _race_inputs(*, bs: int, vocab: int, dtype: torch.dtype, seed: int) -> dict[str, Any]:
    """Made on the CPU from the seed, then moved: logits ~ 3 N(0, 1), T in [0.05, 2],
    alternating greedy rows."""
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(bs, vocab, generator=generator) * 3).to(dtype)
    noise = torch.empty(bs, vocab).exponential_(generator=generator)
    temperatures = torch.linspace(0.05, 2.0, bs)[torch.randperm(bs, generator=generator)]
    greedy_mask = torch.arange(bs) % 2 == seed % 2
    return {
        "logits": logits.to(DEVICE),
        "temperatures": temperatures.to(DEVICE),
        "greedy_mask": greedy_mask.to(DEVICE),
        "noise": noise.to(DEVICE),
    }


def test_triton_race_runs_compiled_on_cuda() -> None:
    assert not triton_race._INTERPRETED, "TRITON_INTERPRET was set: the kernels are interpreted"
    inputs = _race_inputs(bs=2, vocab=1025, dtype=torch.float32, seed=0)
    tokens = triton_race.exponential_race_triton(**inputs)
    assert tokens.is_cuda and tokens.dtype == torch.int64 and tokens.shape == (2,)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # fp16: the matrix
@pytest.mark.parametrize(
    ("vocab", "bs"),
    [(1, 1), (1023, 3), (1024, 4), (1025, 5), (2047, 8), (2049, 8), (129280, 64), (151936, 16)],
)
def test_compiled_triton_race_picks_exactly_the_torch_race_tokens_on_cuda(
    vocab: int, bs: int, dtype: torch.dtype, seed: int
) -> None:
    inputs = _race_inputs(bs=bs, vocab=vocab, dtype=dtype, seed=seed)
    got = exponential_race(**inputs)  # auto: Triton on CUDA tensors
    want = exponential_race_torch(**inputs)
    assert torch.equal(got, want)
    assert torch.equal(triton_race.exponential_race_triton(**inputs), want)


def test_compiled_triton_race_breaks_ties_across_tiles_to_the_lowest_index() -> None:
    bs, vocab = 4, 3 * 1024 + 1
    logits = torch.full((bs, vocab), -5.0)
    logits[:, [7, 1024 + 7, 2048 + 7, vocab - 1]] = 2.0  # one tie spanning every tile
    inputs = {
        "logits": logits.to(DEVICE),
        "temperatures": torch.ones(bs, device=DEVICE),
        "greedy_mask": torch.tensor([True, False, True, False], device=DEVICE),
        "noise": torch.ones(bs, vocab, device=DEVICE),
    }
    got = triton_race.exponential_race_triton(**inputs)
    assert torch.equal(got.cpu(), torch.full((bs,), 7))
    assert torch.equal(got, exponential_race_torch(**inputs))


def test_compiled_triton_race_follows_the_nonfinite_rule_on_cuda() -> None:
    vocab = 2 * 1024 + 5
    logits = torch.zeros(4, vocab)
    logits[0, [1500, 2000]] = float("inf")  # first +inf wins
    logits[1, 1800] = float("inf")
    logits[1, 1900] = float("nan")  # NaN beats +inf
    logits[2] = float("-inf")  # all -inf: token 0
    logits[3, :] = float("-inf")
    logits[3, 1030] = 1.0  # the only finite entry wins
    inputs = {
        "logits": logits.to(DEVICE),
        "temperatures": torch.ones(4, device=DEVICE),
        "greedy_mask": torch.zeros(4, dtype=torch.bool, device=DEVICE),
        "noise": torch.ones(4, vocab, device=DEVICE),
    }
    got = triton_race.exponential_race_triton(**inputs)
    assert got.cpu().tolist() == [1500, 1900, 0, 1030]
    assert torch.equal(got, exponential_race_torch(**inputs))


# -- CUDA graphs -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", GRAPH_CASES)
def test_graph_replays_pass_the_checks_for_fixed_and_show_the_ledger_for_legacy(
    name: str,
) -> None:
    case = _matrix_case(name)
    result = capture_and_replay(case, builtin_implementations(), replays=3)
    assert len(result.replays) == 3
    for verdict in result.replays:
        label = verdict.case.label()
        assert not verdict.failed_checks("fixed"), (label, verdict.failed_checks("fixed"))
        assert not verdict.failed_checks("reference"), (label, verdict.failed_checks("reference"))
        assert verdict.ledger is not None and verdict.ledger.holds, (label, verdict.ledger)
        fixed = verdict.results["fixed"]
        if case.folded_sampling:
            assert fixed.work.noise_calls == case.gamma and len(fixed.noise_draws) == case.gamma
        if case.has_sampled_rows:
            assert "teacher_forcing_fails" in verdict.ledger.observed
            assert "noise_doubled" in verdict.ledger.observed
    records = judged_records(replay_records(result.replays))
    judgement = replace(records, redraws=RedrawVerdict.of([result]))
    assert judgement.ok and all(s.ok for s in graph_sections(judgement))


@pytest.mark.parametrize("name", ["folded-sampled/vanilla", "folded-sampled/rnn/bf16"])
def test_graph_replays_redraw_the_noise_on_identical_inputs(name: str) -> None:
    case = _matrix_case(name)
    result = capture_and_replay(case, builtin_implementations(("fixed", "legacy")), replays=1)
    for redraw in result.redraws:
        assert redraw.ok, (redraw.implementation, redraw.describe())
        assert redraw.noise_redrawn is True
        assert redraw.sampled_tokens_differ is True
        assert redraw.greedy_tokens_equal is True


def test_graph_replay_equals_an_eager_call_from_the_same_rng_state() -> None:
    case = _matrix_case("folded-sampled/gated+confidence")
    graphed = capture_and_replay(case, [FIXED], replays=1).replays[0].results["fixed"]
    eager = run_case(case, [FIXED]).results["fixed"]
    assert graphed.ok and eager.ok
    for mine, theirs in [
        (graphed.tokens, eager.tokens),
        (graphed.corrected, eager.corrected),
        (graphed.confidence, eager.confidence),
    ]:
        assert mine is not None and theirs is not None and torch.equal(mine, theirs)


# -- host synchronisation ----------------------------------------------------------------------
@pytest.mark.parametrize("case", standard_matrix(device=DEVICE), ids=lambda case: case.name)
def test_fixed_call_makes_no_host_synchronisation(case: Case) -> None:
    check = no_host_sync(case, FIXED)
    assert check.status is SyncStatus.SYNC_FREE, (check.error, check.stack)


class HostReadingSampler(FixedSampler):
    """Reads a token on the host inside ``__call__``: not capture-safe."""

    def __call__(self, hidden_states: torch.Tensor, input_ids: torch.Tensor) -> None:
        super().__call__(hidden_states, input_ids)
        if int(self.out[0].item()) < 0:
            raise AssertionError("unreachable: token ids are >= 0")


HOST_READING = Implementation("host-reading", HostReadingSampler, "tests.harness.gpu.test_gpu")


def test_sync_check_names_a_host_read_inside_call() -> None:
    check = no_host_sync(_matrix_case("folded-sampled/vanilla"), HOST_READING)
    assert check.status is SyncStatus.SYNCS
    assert any("test_gpu.py" in frame for frame in check.stack), check.stack


CAPTURE_FAILURE_SCRIPT = """
import json, torch
from fixed import DsparkDraftSampler
from harness.gpu.graphs import capture_and_replay, replay_records
from harness.plugins.implementations import Implementation, builtin_implementations
from harness.pipeline.matrix import standard_matrix
from harness.pipeline.runner import run_case

class HostReadingSampler(DsparkDraftSampler):
    def __call__(self, hidden_states, input_ids):
        super().__call__(hidden_states, input_ids)
        self.out[0].item()

fixed = builtin_implementations(("fixed",))[0]
case = next(c for c in standard_matrix(device="cuda") if c.name == "folded-sampled/vanilla")
bad = Implementation("host-reading", HostReadingSampler, "inline")
verdict = capture_and_replay(case, [fixed, bad], replays=1).replays[0]
later = run_case(case, [fixed]).results["fixed"]
print(json.dumps({
    "fixed_failed": [c.name for c in verdict.failed_checks("fixed")],
    "bad_failed": [c.name for c in verdict.failed_checks("host-reading")],
    "bad_error": verdict.results["host-reading"].error.summary(),
    "later_eager_ok": later.ok,
    "later_eager_error": None if later.ok else later.error.summary(),
}))
"""


def test_capture_of_a_syncing_sampler_is_a_recorded_failure_and_the_process_goes_on() -> None:
    # In a subprocess: a failed capture must not leave state behind in this one.
    done = subprocess.run(
        [sys.executable, "-c", CAPTURE_FAILURE_SCRIPT],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["fixed_failed"] == [], outcome
    assert outcome["bad_failed"] == ["ran"], outcome
    assert outcome["later_eager_ok"], outcome
