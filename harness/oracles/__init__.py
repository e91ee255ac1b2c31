"""Oracles that need more than one call: the statistical losslessness oracle."""
