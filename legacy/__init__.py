"""The DSpark draft sampler as it was before the fix (double Markov walk)."""

from legacy.dspark_sampler import DsparkDraftSampler

__all__ = ["DsparkDraftSampler"]
