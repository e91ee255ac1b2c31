"""The released DSpark samplers' wheels and contracts (docs/releases.md); the sweep that
judges them is ``harness.releases``, above these adapters.

- ``eras``: the contracts the releases ship, as data (one ``ReleaseEra`` per era) and
  how a version's files are told to fit one;
- ``wheels``: finding the released versions on the package index, fetching a wheel
  without its dependencies into a cache, and extracting it there (never into
  ``site-packages``);
- ``loading``: a release's sampler loaded from its extracted files the way its era says.
"""
