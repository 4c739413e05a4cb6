"""The noise between boots (engine.method.boots): the one-way random-effects estimate on log tok/s,
by hand and by simulation, and the declared value where nothing was booted twice."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.method.boots import Boot, declared, measure, within


def test_the_estimate_by_hand() -> None:
    """Two groups booted twice and three times: the variance of the boots' mean logs, pooled with
    boots - 1 degrees of freedom each; its part beyond the reps' own noise."""
    a = [(100.0, 102.0, 98.0), (110.0, 111.0, 109.0)]
    b = [(50.0, 51.0, 49.0), (47.0, 48.0, 46.0), (52.0, 52.5, 51.5)]
    boots = [Boot("a", r) for r in a] + [Boot("b", r) for r in b] + [Boot("c", (70.0, 71.0, 69.0))]
    n = measure(boots, 0.05)
    means = {g: [np.log(r).mean() for r in rs] for g, rs in (("a", a), ("b", b))}
    pooled = (np.var(means["a"], ddof=1) * 1 + np.var(means["b"], ddof=1) * 2) / 3
    assert n.measured and n.df == 3 and n.boots == 5 and n.groups == 2
    assert n.boot_mean == pytest.approx(pooled)
    w = np.mean([np.log(r).var(ddof=1) for r in a + b + [(70.0, 71.0, 69.0)]])  # equal reps: a mean
    assert n.within == pytest.approx(w)
    assert n.between == pytest.approx(pooled - w / 3)
    assert n.sd == pytest.approx(math.expm1(math.sqrt(pooled - w / 3)))
    assert n.how().startswith("measured: 5 boots in 2 groups")


def test_nothing_booted_twice_is_the_declared_value_and_says_so() -> None:
    n = measure([Boot("a", (100.0, 101.0)), Boot("b", (90.0, 91.0))], 0.05)
    assert not n.measured and n.df == math.inf and n.sd == pytest.approx(0.05)
    assert n.how().startswith("declared 5.0 %")
    assert n.within == pytest.approx(within([Boot("a", (100.0, 101.0)), Boot("b", (90.0, 91.0))]))
    assert declared(0.0).boot_mean == 0.0  # a declared zero is the campaign's own, written out


def test_a_server_that_moves_between_boots_is_measured_so() -> None:
    """Simulated: boots moving by 5 % (sd of log), reps within a boot by 2 %; 2 boots in each of 40
    groups. The estimate lands near 5 %, and its reps' part is taken out."""
    rng = np.random.default_rng(7)
    boots = [Boot(g, tuple(100 * np.exp(b + rng.normal(0, 0.02, 3))))
             for g in range(40) for b in rng.normal(0, 0.05, 2)]
    n = measure(boots, 0.01)
    assert n.df == 40
    assert 0.035 < math.sqrt(n.between) < 0.065
    assert 0.015 < math.sqrt(n.within) < 0.025


def test_a_quiet_server_has_no_noise_between_boots_beyond_its_reps() -> None:
    rng = np.random.default_rng(8)
    boots = [Boot(g, tuple(100 * np.exp(rng.normal(0, 0.03, 3)))) for g in range(30) for _ in range(2)]
    n = measure(boots, 0.05)
    assert n.between < 0.02 ** 2  # what is left is the reps' share, not the server moving
    assert n.boot_mean == pytest.approx(n.within / 3, rel=0.5)
