"""The delta of one row against another from their reps alone, its interval (Welch's t on log
tok/s, 95 %; Stein's first stage), and Student's t as scipy gives it. The verdict that counts the
noise between boots: tests/unit/engine/method/test_verdict.py."""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.method.delta import Interval, relative_delta, t_cdf, t_quantile

# Student's t at 0.975, from any printed table.
T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 10: 2.2281, 30: 2.0423}


@pytest.mark.parametrize(("nu", "t"), sorted(T975.items()))
def test_t_quantile_matches_the_table(nu: int, t: float) -> None:
    assert t_quantile(0.975, nu) == pytest.approx(t, abs=1e-4)
    assert t_cdf(t, nu) == pytest.approx(0.975, abs=1e-5)  # the table rounds t to 4 places


@settings(max_examples=300, deadline=None)
@given(p=st.floats(0.75, 0.9999), nu=st.floats(0.2, 1000))  # levels 50-99.98 %; Welch ν
def test_t_quantile_is_the_point_bisection_finds(p: float, nu: float) -> None:
    """Newton's steps (a day-long report's thousands of intervals) land where bisection on the
    same t_cdf does, to its 1e-10."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, nu) < p:
        hi *= 2
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, nu) < p else (lo, mid)
    assert t_quantile(p, nu) == pytest.approx((lo + hi) / 2, rel=2e-10, abs=2e-10)


def near(x: float) -> float:
    """pytest.approx(x) where a float is declared: it equals the floats near x."""
    return cast(float, pytest.approx(x))


def test_t_far_out_is_the_normal_and_nu_1_is_cauchy() -> None:
    assert t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)
    assert t_cdf(2.0, 1) == pytest.approx(0.5 + math.atan(2.0) / math.pi, abs=1e-12)
    assert t_cdf(-2.0, 1) == pytest.approx(0.5 - math.atan(2.0) / math.pi, abs=1e-12)
    assert t_quantile(0.975, 4.37) < T975[4]  # fractional ν (Welch) falls between the rows


CONTROL = [100.0, 102.0, 98.0]  # 2 % spread, as three reps on a quiet GPU


def test_a_ten_percent_shift_excludes_zero() -> None:
    iv = relative_delta([x * 1.10 for x in CONTROL], CONTROL)
    assert iv is not None and iv.delta == pytest.approx(0.10)
    assert iv.lo is not None and iv.hi is not None and 0 < iv.lo < 0.10 < iv.hi


def test_no_shift_includes_zero() -> None:
    iv = relative_delta([101.0, 99.0, 100.0], CONTROL)
    assert iv is not None and iv.lo is not None and iv.hi is not None
    assert iv.lo < 0 < iv.hi and abs(iv.delta) < 0.01


def test_the_interval_by_hand() -> None:
    """Welch on the logs, written out: the mean difference, its standard error, ν, t."""
    w, c = [110.0, 115.0, 108.0], [100.0, 104.0, 97.0, 101.0]
    lw, lc = np.log(w), np.log(c)
    vw, vc = lw.var(ddof=1) / 3, lc.var(ddof=1) / 4
    nu = (vw + vc) ** 2 / (vw ** 2 / 2 + vc ** 2 / 3)
    d, half = lw.mean() - lc.mean(), t_quantile(0.975, nu) * math.sqrt(vw + vc)
    iv = relative_delta(w, c)
    assert iv == Interval(near(math.expm1(d)), near(math.expm1(d - half)), near(math.expm1(d + half)))


def test_the_interval_covers_the_true_shift_95_times_in_100() -> None:
    """Three reps a side with 3 % lognormal noise and a true shift of +7 %: over 4000 seeded
    draws the interval holds +7 % about 95 % of the time (Welch's is slightly conservative)."""
    rng = np.random.default_rng(1234)
    hits = 0
    n = 4000
    for _ in range(n):
        c = 100 * np.exp(rng.normal(0, 0.03, 3))
        w = 107 * np.exp(rng.normal(0, 0.03, 3))
        iv = relative_delta(list(w), list(c))
        assert iv is not None and iv.lo is not None and iv.hi is not None
        hits += iv.lo <= 0.07 <= iv.hi
    assert 0.94 <= hits / n <= 0.98, hits / n


def test_one_rep_has_no_interval() -> None:
    assert relative_delta([125.0], [100.0]) == Interval(near(0.25), None, None)
    assert relative_delta([], [100.0]) is None and relative_delta([0.0, 1.0], [100.0]) is None
    assert relative_delta([100.0, 100.0], [100.0, 100.0]) == Interval(0.0, 0.0, 0.0)


def test_steins_interval_takes_the_first_stages_variance_and_n0_minus_1_df() -> None:
    """Reps added to a precision: the first stage's variance over every rep's count, n0 - 1 df."""
    w, c = [110.0, 115.0, 108.0, 111.0, 111.0], [100.0, 104.0, 97.0, 101.0]
    lw, lc = np.log(w), np.log(c)
    se = math.sqrt(lw[:3].var(ddof=1) / 5 + lc[:3].var(ddof=1) / 4)
    d, half = lw.mean() - lc.mean(), t_quantile(0.975, 2) * se
    assert relative_delta(w, c, stage=3) == Interval(near(math.expm1(d)), near(math.expm1(d - half)),
                                                      near(math.expm1(d + half)))


def test_a_delta_past_the_float_range_is_as_wide_as_a_float_goes() -> None:
    """Reps a factor e^300 apart on one side, at the 99.999 % level: the upper end of exp(d + half)
    is past the largest float, and was an OverflowError rather than an interval."""
    iv = relative_delta([1.0, 1e300, 1.0], [1.0, 1.0, 1.0], level=1 - 1e-5)
    assert iv is not None and iv.lo is not None and iv.hi is not None
    assert math.isfinite(iv.hi) and iv.hi > 1e300 and iv.lo < 0
