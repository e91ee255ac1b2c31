"""Goodness-of-fit arithmetic of the statistical oracle, in float64.

This module owns the tails every caller uses (the oracle, its power math and the
tests' own fixed-seed checks), as scipy computes them (its special functions where one
is the whole answer: ``scipy.stats`` costs far more to import and to call): the chi-square tail
``chi2_sf`` and its inverse ``chi2_isf``, the noncentral tail, the normal tail; and
Pearson's statistic with rare cells merged, summed over strata; cell counting; and
Holm's step-down correction that keeps a family of tests at one level.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import special

MIN_EXPECTED_COUNT = 5.0  # Pearson's rule: cells expected below this are merged


def chi2_sf(chi2: float, dof: int) -> float:
    """Upper tail ``P(X >= chi2)`` of the chi-square with ``dof`` degrees of freedom
    (1 for no degrees of freedom: nothing was tested)."""
    return float(special.chdtrc(dof, chi2)) if dof > 0 else 1.0


@functools.lru_cache(maxsize=4096)  # the power math asks for the same few values often
def chi2_isf(alpha: float, dof: int) -> float:
    """Critical value: the ``c`` with ``chi2_sf(c, dof) = alpha``."""
    if dof <= 0:
        raise ValueError(f"dof must be positive, got {dof}")
    return float(special.chdtri(dof, alpha))


def noncentral_chi2_sf(x: float, *, dof: int, noncentrality: float) -> float:
    """Upper tail of the noncentral chi-square (the central one at noncentrality 0)."""
    if noncentrality <= 0:
        return chi2_sf(x, dof)
    return max(0.0, 1.0 - float(special.chndtr(x, dof, noncentrality)))  # power: no far tail


def normal_sf(z: float) -> float:
    """Upper tail of the standard normal, accurate far into the tail."""
    return float(special.ndtr(-z))


def normal_isf(alpha: float) -> float:
    """The ``z`` with ``normal_sf(z) = alpha``."""
    return float(-special.ndtri(alpha)) + 0.0  # + 0.0: no -0.0 at alpha 0.5


def holm_rejections(p_values: Sequence[float], *, alpha: float) -> list[bool]:
    """Holm's step-down procedure: which of the family's hypotheses are rejected while
    the chance of any false rejection stays at most ``alpha``."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if not p_values[i] < alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


# -- Pearson's statistic -------------------------------------------------------------------------
@dataclass(frozen=True)
class GoodnessOfFit:
    """Pearson chi-square of observed against exact expected counts, strata summed."""

    chi2: float
    dof: int
    p_value: float
    tv_distance: float  # pooled over strata
    impossible: int  # observations in cells of target probability 0 (p-value 0 then)
    observations: int


def merged_groups(expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group each stratum's cells so every group expects at least ``MIN_EXPECTED_COUNT``.

    expected ``[S, C]`` float64 counts, one stratum a row. Cells below the threshold go
    into one group, which then takes the next smallest cells until it reaches the
    threshold (or holds all). Returns the group of each cell ``[S, C]`` int64 (group 0
    the merged one, where there is one) and each stratum's number of groups ``[S]``.
    """
    cells = expected.shape[1]
    order = np.argsort(expected, axis=1, kind="stable")
    ascending = np.take_along_axis(expected, order, axis=1)
    below = (ascending < MIN_EXPECTED_COUNT).sum(axis=1)  # [S]
    # the merged group keeps taking the next smallest cells until it is big enough
    reach = np.cumsum(ascending, axis=1) >= MIN_EXPECTED_COUNT
    reached_at = np.where(reach.any(axis=1), reach.argmax(axis=1) + 1, cells)
    merged = np.where(below > 0, np.maximum(below, reached_at), 0)[:, None]  # [S, 1]
    first_own_group = (merged > 0).astype(np.int64)
    rank = np.arange(cells)
    by_rank = np.where(rank < merged, 0, rank - merged + first_own_group)  # [S, C]
    groups = np.empty_like(by_rank)
    np.put_along_axis(groups, order, by_rank, axis=1)
    return groups, (first_own_group + cells - merged)[:, 0]


def group_sums(groups: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``[S, C]``: each stratum's ``weights`` ``[S, C]`` summed by ``groups`` ``[S, C]``
    (``merged_groups``); the columns past a stratum's groups are 0."""
    strata, cells = groups.shape
    flat = groups + cells * np.arange(strata)[:, None]
    return np.bincount(flat.ravel(), weights=weights.ravel(), minlength=strata * cells).reshape(
        strata, cells
    )


def chi2_distances(estimated: np.ndarray, exact: np.ndarray, *, n_groups: np.ndarray) -> np.ndarray:
    """``[S]``: each stratum's ``sum((estimated - exact)**2 / exact)`` over its groups
    (``group_sums`` of both, ``n_groups`` ``[S]``)."""
    inside = np.arange(exact.shape[1]) < n_groups[:, None]
    terms = (estimated - exact) ** 2 / np.where(inside, exact, 1.0)
    return np.where(inside, terms, 0.0).sum(axis=1)


def pearson_fit(observed: torch.Tensor, *, expected_probs: torch.Tensor) -> GoodnessOfFit:
    """Goodness of fit of observed counts ``[S, C]`` to expected probabilities ``[S, C]``.

    Each stratum (a row) is fitted with its own total, rare cells merged; the
    statistics and degrees of freedom of the strata add up.
    """
    counts = observed.detach().cpu().to(torch.float64).numpy()
    probs = expected_probs.detach().cpu().to(torch.float64).numpy()
    chi2, dof = 0.0, 0
    impossible = int(counts[probs == 0].sum())
    stratum_rows = counts.sum(axis=1)  # [S]
    fitted = np.nonzero(stratum_rows)[0]  # the strata with rows
    if fitted.size:
        expected = stratum_rows[fitted, None] * probs[fitted]  # [S', C]
        groups, n_groups = merged_groups(expected)
        chi2 = float(
            chi2_distances(
                group_sums(groups, counts[fitted]), group_sums(groups, expected), n_groups=n_groups
            ).sum()
        )
        dof = int((n_groups - 1).sum())
    total = float(stratum_rows.sum())
    if total == 0:
        return GoodnessOfFit(
            chi2=0.0, dof=0, p_value=1.0, tv_distance=0.0, impossible=0, observations=0
        )
    pooled_expected = (stratum_rows[:, None] * probs).sum(0) / total
    tv = 0.5 * float(np.abs(counts.sum(0) / total - pooled_expected).sum())
    p_value = 0.0 if impossible else chi2_sf(chi2, dof)
    return GoodnessOfFit(
        chi2=chi2,
        dof=dof,
        p_value=p_value,
        tv_distance=tv,
        impossible=impossible,
        observations=int(total),
    )


def cell_counts(tokens: torch.Tensor, *, vocab_size: int) -> torch.Tensor:
    """Counts ``[V**k]`` float64 of token tuples ``[n, k]`` (row-major cells)."""
    cells = vocab_size ** tokens.shape[1]
    weights = vocab_size ** torch.arange(tokens.shape[1] - 1, -1, -1, device=tokens.device)
    cell = (tokens * weights).sum(dim=1)  # [n]
    return torch.bincount(cell, minlength=cells).to(torch.float64)


def marginal_probs(joint: torch.Tensor, *, position: int, m: int, vocab_size: int) -> torch.Tensor:
    """Marginal ``[V]`` of one position from a joint ``[V**m]``."""
    full = joint.view(*([vocab_size] * m))
    other = tuple(j for j in range(m) if j != position)
    return full.sum(dim=other) if other else full
