"""The oracle's defaults that the command line offers, defined once and importable
without torch, so that ``python -m harness stats --help`` answers at once;
``harness.oracles.problem.StatsConfig`` takes its defaults from here."""

from __future__ import annotations

from dataclasses import dataclass

GREEDY = 0.0  # the temperature that marks a greedy row (top_k = 1)
DEFAULT_M = 2  # committed tokens per row in the joint
DEFAULT_ROUNDS = 4  # draft-verify rounds per row
DEFAULT_GAMMA = 4
DEFAULT_VOCAB_SIZE = 8
DEFAULT_HIDDEN_SIZE = 16  # of the toy drafters
DEFAULT_MARKOV_RANK = 8
DEFAULT_TEMPERATURES = (0.6, 1.0, 1.4, GREEDY)


@dataclass(frozen=True)
class ParameterSet:
    """One group's request parameters (``reference.request_law``): a temperature, a top-k
    (0: none, 1: greedy), a top-p (1: none) and a min-p (0: none)."""

    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.top_k == 1

    @property
    def label(self) -> str:
        """``greedy``, ``T=0.6``, ``T=1 top-k 3 top-p 0.9``: how reports name the group."""
        if self.greedy:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        parts += [f"top-k {self.top_k}"] if self.top_k else []
        parts += [f"top-p {self.top_p:g}"] if self.top_p != 1 else []
        parts += [f"min-p {self.min_p:g}"] if self.min_p else []
        return " ".join(parts)


# The truncated groups beside the temperature groups: each truncation alone, and all three
# together (docs/statistics.md, "Request parameters"). They run at the far target only, where
# each takes one row for every DEFAULT_TEMPERATURE_WEIGHT rows of a temperature group: a
# smaller stated depth, so the temperature groups keep their rows.
DEFAULT_TRUNCATED = (
    ParameterSet(1.0, top_k=3),
    ParameterSet(1.0, top_p=0.8),
    ParameterSet(1.0, min_p=0.2),
    ParameterSet(0.8, top_k=6, top_p=0.9, min_p=0.1),
)
DEFAULT_TEMPERATURE_WEIGHT = 10
DEFAULT_ALPHA = 1e-6  # family-wise level
# The sequential stages (docs/statistics.md, "Sequential stages"): a family p-value below
# this, and not decisive, is suspicious; each stage decodes this many fresh rows of the
# strongest test's target and head, and the stages' sum is the row budget.
DEFAULT_SUSPICIOUS = 1e-3
DEFAULT_STAGE_ROWS = (20_000, 50_000)
DEFAULT_MODEL_SEED = 0

# The verifiers by the names the command line uses, each with what it needs
# (``harness.oracles.verifiers.VERIFIERS`` holds the verifiers themselves).
VERIFIER_NAMES = {
    "chain": "ours, always",
    "sglang-blockwise": "the released sglang's block-wise rejection; needs the sglang package",
    "vllm-rejection": "vLLM 0.33's rejection_sample; needs the vllm package, slow under the "
    "interpreter, so it runs only where named",
}
