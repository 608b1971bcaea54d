"""Intervals over seeds (tuning.intervals) against an independent implementation (scipy's t)."""
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcbench.tuning.intervals import interval, paired, t_quantile

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 29, 30, 31, 45, 60, 120, 1000])
def test_the_t_quantile_is_students(df):
    assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), rel=1e-6)


@given(st.integers(1, 400), st.floats(0.01, 0.9999))
def test_the_t_quantile_at_any_confidence_is_students(df, confidence):
    """The corrected levels a claim of several rows uses (1 − 0.05/k) are exact too."""
    assert t_quantile(df, confidence) == pytest.approx(stats.t.ppf((1 + confidence) / 2, df), rel=1e-6)


values = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=2, max_size=40)


@given(values)
def test_the_interval_is_the_t_interval_of_the_mean(xs):
    iv = interval(xs)
    mean, sem = stats.tmean(xs), stats.sem(xs)
    low, high = (mean, mean) if sem == 0 else stats.t.interval(0.95, len(xs) - 1, loc=mean, scale=sem)
    tol = 1e-9 + 3e-3 * max(sem, 1e-12) + 1e-9 * abs(mean)
    assert iv.n == len(xs) and iv.mean == pytest.approx(mean, abs=1e-9 + 1e-12 * abs(mean))
    assert iv.low == pytest.approx(low, abs=tol) and iv.high == pytest.approx(high, abs=tol)


def test_one_seed_has_no_interval_and_decides_nothing():
    iv = interval([0.7])
    assert (iv.mean, iv.n) == (0.7, 1) and math.isinf(iv.low) and math.isinf(iv.high)
    assert iv.side(0.0) is None and iv.text() == "+70.0 pts"


def test_a_paired_interval_is_narrower_when_seeds_move_both_methods_together():
    a, b = [0.60, 0.70, 0.80], [0.59, 0.69, 0.79]  # b one point behind a at every seed
    iv = paired(a, b)
    assert iv.mean == pytest.approx(0.01) and iv.side(0.0) is True
    separate = interval(a).low - interval(b).high
    assert separate < 0 < iv.low  # unpaired, the intervals overlap; paired, the lead is clear
    assert iv.text() == "+1.0 pts [+1.0, +1.0]"
    with pytest.raises(ValueError, match="paired seeds: 3 values against 2"):
        paired(a, b[:2])
