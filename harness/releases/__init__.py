"""The orchestration that calls the judge over released servers (docs/releases.md), above
the server adapters (``harness.upstream``), beside the Python API:

- ``versions``: the sampler ours, the PR-era and the released speculators side by side,
  measured in one run (``python -m harness versions``);
- ``sweep``: one release judged in a process of its own, and the advisory;
- ``run``: the sweep's processes, its journal and its resumption; ``ray_executor``: the
  same tasks on a Ray cluster.
"""
