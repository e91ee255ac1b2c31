"""Names and defaults the command line offers before any work, defined once and
importable without torch (so ``python -m harness --help`` answers at once): the
built-in implementations, the pair's sides, the model dtypes, the devices' form, the
seeds' range, the per-call time limit, the intra-op thread count and where the oracle's
verifier draws from."""

from __future__ import annotations

import enum
import re

LEGACY, FIXED, REFERENCE = "legacy", "fixed", "reference"
BUILTIN_NAMES = (REFERENCE, FIXED, LEGACY)  # the order every report lists them in
DEFAULT_PAIR = (LEGACY, FIXED)
# The two slots of a pair (its buggy side, its fixed side), named after the built-ins that
# fill them by default; timing and sweep tables key their columns by slot.
PAIR_SIDES = (BUGGY_SIDE, FIXED_SIDE) = (LEGACY, FIXED)
DTYPE_NAMES = ("float32", "bfloat16", "float16")  # the model dtypes a case can take
DEVICE_FORM = re.compile(r"cpu|cuda(:[0-9]+)?")  # the devices a case can name
SEED_LIMIT = 1 << 63  # seeds lie in [0, 2^63): every torch generator accepts them
DEFAULT_TIME_LIMIT_S = 120.0  # per construction, staging and call of an implementation
# Intra-op threads of a run: the shapes are small, and on a shared 2-core machine a second
# thread per process mostly waits for a busy core (docs/design.md, "Threads").
DEFAULT_THREADS = 1
# Processes a judgement's stages run in: with 2, the statistical oracle runs in a process
# forked beside the one that runs the matrix and the work (docs/design.md, "Threads").
DEFAULT_JOBS = 2
# the statistical oracle's rows per head kind (``--rows``): at the far target 1,250 per
# temperature group and 250 per truncated set (docs/statistics.md, "Request parameters")
DEFAULT_ROWS = 5_500


class VerifierNoise(enum.StrEnum):
    """Where the verifier's draws come from in the oracle's decodes (``--verifier-noise``)."""

    SHARED = "shared"  # each server's own plumbing: drafter and verifier from one seed
    INDEPENDENT = "independent"  # streams of their own: a control

    @property
    def description(self) -> str:
        if self is VerifierNoise.SHARED:
            return "the server's own randomness: drafter and verifier from one server seed"
        return "independent streams: a control, drafter and verifier never share a source"


DEFAULT_VERIFIER_NOISE = VerifierNoise.SHARED
# A life across the junction (docs/design.md): the judged rows a request state asks for
# at full depth (``--life-rows``), and the fewest a life can be planned with (its last
# wave is half a wave).
JUNCTION_ROWS = 2_000
MIN_JUNCTION_ROWS = 2
