"""The one error a plug-in that cannot take part raises."""

from __future__ import annotations


class ImplementationError(ValueError):
    """An ``--impl`` that cannot be loaded, constructed or does not fit the interface."""
