"""Oracles that judge samplers by what their output does, not by how it was made.

The statistical losslessness oracle (docs/statistics.md): ``problem`` (what is
decoded), ``gof`` (the chi-square arithmetic), ``fits`` (the family of tests),
``stats`` (the run and the verdicts), ``power`` (power curves), ``section`` (how
it reads in a report).
"""
