"""How a failing check states the size of a difference between two tensors of logits.

``max |diff|`` over every entry is undefined wherever an entry is infinite: ``-inf``
on both sides (a reduced draft vocabulary's columns, equal on both sides) gives NaN,
and ``-inf`` against a finite value gives ``inf``. So the maximum is taken where both
sides are finite, and the entries it leaves out are counted by kind.
"""

from __future__ import annotations

import torch


def max_abs_diff_text(actual: torch.Tensor, expected: torch.Tensor) -> str:
    """``"max |diff| 0.8125"``, or with the entries the maximum leaves out:
    ``"max |diff| 0.8125 where both sides are finite; -inf on both sides at 96 entries,
    equal"``; ``"max |diff| undefined: ..."`` when no entry is finite on both
    sides."""
    a, e = actual.double(), expected.double()
    nan = a.isnan() | e.isnan()
    both_finite = a.isfinite() & e.isfinite()
    same_infinity = a.isinf() & (a == e)
    one_infinite = ~nan & ~both_finite & ~same_infinity  # |diff| is inf there
    left_out = []
    if same_infinity.any():
        which = "-inf" if bool((a[same_infinity] < 0).all()) else "the same infinity"
        left_out.append(f"{which} on both sides at {_entries(same_infinity)}, equal")
    if one_infinite.any():
        infinities = torch.where(a.isinf(), a, e)[one_infinite]
        which = "-inf" if bool((infinities < 0).all()) else "an infinity"
        left_out.append(f"{which} against a finite value at {_entries(one_infinite)}, |diff| inf")
    if nan.any():
        left_out.append(f"NaN at {_entries(nan)}")
    if not both_finite.any():
        return "max |diff| undefined: " + "; ".join(left_out or ["no entries"])
    finite_max = float((a - e).abs()[both_finite].max())
    if not left_out:
        return f"max |diff| {finite_max:.4g}"
    return "; ".join([f"max |diff| {finite_max:.4g} where both sides are finite", *left_out])


def _entries(mask: torch.Tensor) -> str:
    count = int(mask.sum())
    return f"{count} entry" if count == 1 else f"{count} entries"
