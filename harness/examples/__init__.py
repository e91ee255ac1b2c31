"""Samplers to copy, installed with the harness (the README shows them)."""
