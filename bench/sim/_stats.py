"""Means with 95% confidence intervals over seeds (Student's t), for the benchmark tables.

Seed-to-seed spread on these workloads is several points while policy gaps are often below one, so
every headline figure is a mean over seeds with the half-width of its 95% interval; a policy is
"ahead" only when the paired interval of its per-seed differences excludes zero.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)
"""Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom."""


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (normal beyond 30)."""
    if df < 1:
        raise ValueError(f"t975: degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.960


@dataclass(frozen=True)
class Interval:
    """A mean over seeds and the half-width of its 95% confidence interval (NaN with one value)."""

    mean: float
    half: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half


def interval(values: Sequence[float]) -> Interval:
    """Mean and 95% half-width of ``values``, NaNs (a run where the figure does not exist) left out."""
    kept = [v for v in values if not math.isnan(v)]
    if not kept:
        return Interval(math.nan, math.nan, 0)
    if len(kept) == 1:
        return Interval(kept[0], math.nan, 1)
    return Interval(statistics.fmean(kept), t975(len(kept) - 1) * statistics.stdev(kept) / math.sqrt(len(kept)),
                    len(kept))


def paired(a: Sequence[float], b: Sequence[float]) -> Interval:
    """The interval of the per-seed differences ``a - b`` (same seeds, same order)."""
    if len(a) != len(b):
        raise ValueError(f"paired: {len(a)} and {len(b)} values; the same seeds are needed on both sides")
    return interval([x - y for x, y in zip(a, b, strict=True)])
