"""A correct sampler whose module changes the working directory at import (to the
folder in ``DSPARK_CHDIR_TO``): a relative ``--out-dir`` must not move with it."""

import os

from fixed import DsparkDraftSampler as FixedSampler

os.chdir(os.environ["DSPARK_CHDIR_TO"])


class DsparkDraftSampler(FixedSampler):
    """Correct: the fixed sampler."""
