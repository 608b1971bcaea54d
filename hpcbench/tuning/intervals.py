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
from functools import lru_cache
from statistics import mean, stdev

MIN_SEEDS = 3
CONFIDENCE = 0.95


def t_within(x: float, df: int) -> float:
    """P(|T| < x) for Student's t with ``df`` degrees of freedom (a whole number ≥ 1): the closed form for
    whole degrees of freedom (Abramowitz and Stegun 26.7.3–4), a finite sum in cos²θ with θ = atan(x/√df)."""
    theta = math.atan(x / math.sqrt(df))
    c2, term, total = math.cos(theta) ** 2, 1.0, 1.0
    if df % 2:  # odd: 2/π (θ + sinθ cosθ (1 + 2/3 c² + 2·4/(3·5) c⁴ + …)), df − 1 terms after θ's
        if df == 1:
            return 2 * theta / math.pi
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    for k in range(1, df // 2):  # even: sinθ (1 + 1/2 c² + 1·3/(2·4) c⁴ + …)
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


@lru_cache(maxsize=1024)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided ``confidence`` quantile of Student's t with ``df`` degrees of freedom (df ≥ 1): the x
    with P(|T| < x) = confidence, by bisection on the closed form."""
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    if not 0 < confidence < 1:
        raise ValueError(f"a confidence is inside (0, 1), not {confidence}")
    low, high = 0.0, 1.0
    while t_within(high, df) < confidence:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if mid in (low, high):
            break
        low, high = (mid, high) if t_within(mid, df) < confidence else (low, mid)
    return high


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


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of ``values`` (finite numbers, one per seed) with its t interval at ``confidence``."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("an interval needs at least one value")
    m = mean(xs)
    if len(xs) < 2:
        return Interval(m, -math.inf, math.inf, len(xs))
    half = t_quantile(len(xs) - 1, confidence) * stdev(xs) / math.sqrt(len(xs))
    return Interval(m, m - half, m + half, len(xs))


def paired(a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The interval of a − b, seed by seed (both in the same seed order)."""
    if len(a) != len(b):
        raise ValueError(f"paired seeds: {len(a)} values against {len(b)}")
    return interval([x - y for x, y in zip(a, b)], confidence)
