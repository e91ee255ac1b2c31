"""Deliberately broken samplers that tests plug into the harness with ``--impl``."""
