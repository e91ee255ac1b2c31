"""The DSpark draft sampler after the fix (single Markov walk)."""

from fixed.dspark_sampler import DsparkDraftSampler

__all__ = ["DsparkDraftSampler"]
