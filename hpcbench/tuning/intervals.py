"""Confidence intervals over seeds, and what a difference must clear to count (pure).

A study's number is a mean over seeds; its interval is Student's t interval of that mean (95%,
two-sided), the usual choice for a handful of independent runs. Two methods run with the same seeds
see the same data order and the same initial model, so a comparison takes the interval of the
per-seed differences (paired), which is narrower than two separate intervals when seeds move both
methods together. Fewer than ``MIN_SEEDS`` seeds decide nothing.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean, stdev

MIN_SEEDS = 3
CONFIDENCE = 0.95
# Student's t quantile at 0.975 for 1..30 degrees of freedom (two-sided 95%).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (df ≥ 1)."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.4 / df  # within 0.003 of the exact value beyond 30


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its 95% interval (infinite with fewer than two seeds)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half(self) -> float:
        """Half its width (infinite with fewer than two seeds)."""
        return self.high - self.mean

    def side(self, threshold: float) -> bool | None:
        """True: the whole interval is above ``threshold``; False: below; None: it straddles it."""
        if self.low > threshold:
            return True
        if self.high < threshold:
            return False
        return None

    def text(self, scale: float = 100.0, unit: str = " pts", digits: int = 1) -> str:
        """``+5.8 pts [+4.9, +6.7]`` (the interval omitted where there is none)."""
        def fmt(x: float) -> str:
            return f"{scale * x:+.{digits}f}"

        if math.isinf(self.low) or math.isinf(self.high):  # one seed: no interval
            return f"{fmt(self.mean)}{unit}"
        return f"{fmt(self.mean)}{unit} [{fmt(self.low)}, {fmt(self.high)}]"


def interval(values: Sequence[float]) -> Interval:
    """The mean of ``values`` (finite numbers, one per seed) with its t interval."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("an interval needs at least one value")
    m = mean(xs)
    if len(xs) < 2:
        return Interval(m, -math.inf, math.inf, len(xs))
    half = t_quantile(len(xs) - 1) * stdev(xs) / math.sqrt(len(xs))
    return Interval(m, m - half, m + half, len(xs))


def paired(a: Sequence[float], b: Sequence[float]) -> Interval:
    """The interval of a − b, seed by seed (both in the same seed order)."""
    if len(a) != len(b):
        raise ValueError(f"paired seeds: {len(a)} values against {len(b)}")
    return interval([x - y for x, y in zip(a, b)])
