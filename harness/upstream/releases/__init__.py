"""Every released DSpark sampler, judged unchanged from its wheel (docs/releases.md).

- ``eras``: the contracts the releases ship, as data (one ``ReleaseEra`` per era) and
  how a version's files are told to fit one;
- ``wheels``: finding the released versions on the package index, fetching a wheel
  without its dependencies into a cache, and extracting it there (never into
  ``site-packages``);
- ``sweep``: one version judged in a process of its own, the journal, the advisory.
"""
