"""Sampler modules shaped like the server's own DSpark sampler file (our own writing).

They import from ``sglang.*`` and speak the server's calling convention, so the
harness must load them through ``--impl NAME=path.py`` with no adapter. Each file is
whole, as a working copy of the server's module is: ``diff`` the two to see the fix.
"""
