"""The planted defect of every registered check: the sampler of ``tests/plugins``
(``module:Class``) that makes it fail, the case of the defect test's table that exposes
it, the checks it fails with in the same run, and whether it runs beside the reference.

``tests/harness/pipeline/test_check_defects.py`` holds every check of
``harness.pipeline.checks.CHECKS`` to exactly one entry here and runs each.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PlantedDefect:
    """A defect that changes the outputs also differs from the reference, so it runs alone
    unless ``against_reference``."""

    sampler: str
    case: str
    also_fails: tuple[str, ...] = ()
    against_reference: bool = False
    package: str | None = None  # the released package its module loads (skipped without it)


PLANTED_DEFECTS: dict[str, PlantedDefect] = {  # check name -> its planted defect
    "ran": PlantedDefect(
        sampler="broken_samplers:RaisingSampler", case="folded", against_reference=True
    ),
    "outputs_written": PlantedDefect(
        sampler="planted_defects:ConfidenceLogitSampler", case="folded, confidence"
    ),
    "no_writes_outside_batch": PlantedDefect(
        sampler="planted_defects_verdicts:OutPastBatchSampler",
        case="bucketed",
        against_reference=True,
    ),
    "teacher_forcing": PlantedDefect(
        sampler="planted_defects:LogSoftmaxCorrectedSampler", case="folded"
    ),
    "noise_replay": PlantedDefect(
        sampler="planted_defects_verdicts:WrongTemperatureSampler", case="folded"
    ),
    "greedy_consistency": PlantedDefect(
        sampler="planted_defects:NegatedGreedySampler", case="greedy fold"
    ),
    "greedy_rows_argmax": PlantedDefect(
        sampler="planted_defects:GreedyRowsRacedSampler",
        case="folded",
        also_fails=("noise_replay",),
    ),
    # no token wins the race at zero probability: noise replay fails with it
    "support": PlantedDefect(
        sampler="planted_defects:UntemperedSampler", case="cold", also_fails=("noise_replay",)
    ),
    "fresh_noise": PlantedDefect(
        sampler="planted_defects_verdicts:FrozenNoiseSampler", case="folded"
    ),
    # counter noise is never the reference's exponential_ budget
    "noise_shared_with_verifier": PlantedDefect(
        sampler="sglang_samplers:KeyedWithVerifierNoise",
        case="bucketed",
        also_fails=("noise_budget",),
        package="sglang",
    ),
    # inverse-CDF uniforms are never the reference's exponential_ budget
    "torch_stream_shared_with_verifier": PlantedDefect(
        sampler="shared_stream_defects:RewoundGeneratorSampler",
        case="folded",
        also_fails=("noise_budget",),
    ),
    "noise_budget": PlantedDefect(
        sampler="planted_defects:NoiseRefreshSampler", case="folded", against_reference=True
    ),
    "single_walk": PlantedDefect(
        sampler="planted_defects:WarmupWalkSampler", case="folded", against_reference=True
    ),
    "inputs_unchanged": PlantedDefect(
        sampler="planted_defects_verdicts:InputMutatingSampler",
        case="folded",
        against_reference=True,
    ),
    "state_restored": PlantedDefect(
        sampler="untrusted_samplers:DtypeLeakingSampler", case="folded"
    ),
    "life_replays": PlantedDefect(sampler="life_defects:WrongFromThirdCallSampler", case="life"),
    # the replays read that buffer
    "life_server_buffer": PlantedDefect(
        sampler="life_defects:OwnOutBufferSampler", case="life", also_fails=("life_replays",)
    ),
    "life_fresh_noise": PlantedDefect(sampler="life_defects:AlternatingNoiseSampler", case="life"),
    "life_drop_in": PlantedDefect(
        sampler="life_defects:ExtraWalkFromThirdCallSampler", case="life"
    ),
    "matches_reference": PlantedDefect(
        sampler="planted_defects:PrivateGeneratorSampler", case="life", against_reference=True
    ),
}
