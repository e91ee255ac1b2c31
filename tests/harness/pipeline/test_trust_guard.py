"""No implementation can change another's verdict: each sees pristine inputs and global
state, and what it changes is its own failure."""

from __future__ import annotations

import pytest
import torch

from harness.pipeline.compare import evaluate_run
from harness.pipeline.runner import run_case
from harness.plugins.implementations import Implementation, builtin_implementations
from tests.helpers import small_case
from tests.plugins import alternative_samplers, untrusted_samplers

CASE = small_case(seed=5)


def _blamed(sampler_class: type | None, *, first: bool) -> dict[str, dict[str, str]]:
    """Failed checks by implementation, with the planted one (if any) run first or last."""
    builtins = builtin_implementations()
    planted = [] if sampler_class is None else [Implementation("planted", sampler_class, "tests")]
    order = [*planted, *builtins] if first else [*builtins, *planted]
    verdict = evaluate_run(run_case(CASE, order), require_observable=False)
    assert verdict.ledger is not None and verdict.ledger.holds
    return {
        name: {c.name: c.detail for c in verdict.failed_checks(name)} for name in verdict.checks
    }


@pytest.mark.parametrize(
    ("sampler_class", "mutated"),
    [
        (untrusted_samplers.HiddenStatesMutatingSampler, "hidden_states"),
        (untrusted_samplers.WeightMutatingSampler, "model.lm_head.weight"),
    ],
)
@pytest.mark.parametrize("first", [True, False])
def test_a_mutating_plugin_is_the_only_one_blamed(
    sampler_class: type, mutated: str, first: bool
) -> None:
    failed = _blamed(sampler_class, first=first)
    assert failed["planted"] == {"inputs_unchanged": f"mutated its inputs: {mutated}"}
    assert failed["reference"] == failed["fixed"] == {}
    assert failed["legacy"] == _blamed(None, first=True)["legacy"]  # its own bug, no more


@pytest.mark.parametrize(
    ("sampler_class", "leak"),
    [
        (untrusted_samplers.DtypeLeakingSampler, "default dtype torch.float32 -> torch.float64"),
        (untrusted_samplers.EnvironmentLeakingSampler, "environment DSPARK_PLANTED_LEAK"),
        (untrusted_samplers.ThreadCountLeakingSampler, "thread count"),
        (untrusted_samplers.DeterministicFlagLeakingSampler, "deterministic algorithms"),
    ],
    ids=["default-dtype", "environment", "thread-count", "deterministic-algorithms"],
)
def test_leaked_global_state_is_blamed_on_its_implementation_and_restored(
    sampler_class: type, leak: str
) -> None:
    failed = _blamed(sampler_class, first=True)
    assert set(failed["planted"]) == {"state_restored"}
    assert failed["planted"]["state_restored"].startswith(f"changed global state: {leak}")
    assert failed["reference"] == failed["fixed"] == {}
    # the conftest guard also fails this test if anything leaked out of run_case


@pytest.mark.parametrize(
    "sampler_class",
    [
        untrusted_samplers.TidySampler,
        alternative_samplers.PrestagedNoiseSampler,
        alternative_samplers.UniformGumbelSampler,
        alternative_samplers.MultinomialSampler,
    ],
)
def test_no_false_alarm_for_samplers_that_leave_inputs_and_state_alone(
    sampler_class: type,
) -> None:
    failed = _blamed(sampler_class, first=True)
    assert "inputs_unchanged" not in failed["planted"]
    assert "state_restored" not in failed["planted"]
    assert failed["fixed"] == {}


def test_checks_read_the_inputs_as_generated() -> None:
    planted = Implementation("planted", untrusted_samplers.HiddenStatesMutatingSampler, "tests")
    run = run_case(CASE, [planted])
    clean = run_case(CASE, [])
    assert torch.equal(run.inputs.hidden_states, clean.inputs.hidden_states)
    assert torch.equal(run.block.base_logits, clean.block.base_logits)
