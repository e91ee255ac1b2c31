"""The orchestration that calls the judge over released servers (docs/releases.md), above
the server adapters (``harness.upstream``), beside the Python API:

- ``versions``: ours, the PR era's modules and the released speculators side by side,
  measured in one run (``python -m harness versions``);
- ``sweep``: one release judged in a process of its own, its row;
- ``advisory``: the rows as an advisory, and what the sweep found (its exit status);
- ``run``: the sweep's processes, its journal and its resumption; ``ray_executor``: the
  same tasks on a Ray cluster.
"""
