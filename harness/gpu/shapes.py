"""The GPU commands' shapes and counts, importable without torch, so that their options
are offered before CUDA is touched."""

from __future__ import annotations

KERNEL_BS = 64  # the largest decode graph bucket (docs/design.md, "The work model")
KERNEL_VOCAB = 129280  # DeepSeek V3/V4
FIGURE_BS = KERNEL_BS
FIGURE_HIDDEN = 4096  # within the production drafters' 2560..5120
FIGURE_DTYPE = "bfloat16"
DEFAULT_REPEATS = 30  # alternating legacy/fixed pairs per figure
DEFAULT_REPLAYS = 3  # checked replays per captured graph
