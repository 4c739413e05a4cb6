"""The verdicts (engine.method.verdict): a delta's interval with the noise between boots, by hand;
Holm and Benjamini-Hochberg over a family; "no observable effect" only by TOST; and the error
rates of ruler's own judgement on synthetic campaigns (engine.record.simulate)."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.method.boots import Boot, declared, measure
from engine.method.verdict import Call, Rule, adjust, judge, versus
from engine.record.simulate import Design, rates

RULE = Rule(0.05, "holm", 0.05, 0.05)


def test_a_measured_noise_sets_the_interval_with_its_degrees_of_freedom() -> None:
    """Var = boot_mean (1 + 1/K) for the window's boot and K control boots, plus what the window's
    reps spread beyond the pooled within-boot variance; df the noise's."""
    noise = measure([Boot("c", (100.0, 101.0, 99.0)), Boot("c", (104.0, 105.0, 103.0)),
                     Boot("d", (50.0, 50.5, 49.5)), Boot("d", (51.0, 51.5, 50.5))], 0.05)
    w, c1, c2 = (110.0, 111.0, 109.0), (100.0, 101.0, 99.0), (104.0, 105.0, 103.0)
    v = versus(w, [c1, c2], noise)
    assert v is not None and v.df == noise.df == 2
    d = np.log(w).mean() - np.mean([np.log(c1).mean(), np.log(c2).mean()])
    extra = max(0.0, np.log(w).var(ddof=1) - noise.within) / 3
    se = math.sqrt(noise.boot_mean * 1.5 + extra)
    assert v.log_delta == pytest.approx(d) and v.se == pytest.approx(se)
    lo, hi = v.interval()  # type: ignore[misc]  # an interval: se > 0
    from scipy import stats  # the oracles are imported by the tests that use them, not by every worker

    q = stats.t.ppf(0.975, 2)
    assert (lo, hi) == (pytest.approx(math.expm1(d - q * se)), pytest.approx(math.expm1(d + q * se)))
    assert v.p() == pytest.approx(2 * stats.t.sf(d / se, 2))


def test_a_declared_noise_is_known_and_welch_takes_the_reps() -> None:
    noise = declared(0.05)
    w, c = (110.0, 112.0, 108.0), (100.0, 103.0, 97.0)
    v = versus(w, [c], noise)
    assert v is not None
    vw, vc = np.log(w).var(ddof=1) / 3, np.log(c).var(ddof=1) / 3
    between = math.log1p(0.05) ** 2 * 2
    assert v.se == pytest.approx(math.sqrt(between + vw + vc))
    assert v.df == pytest.approx((between + vw + vc) ** 2 / (vw ** 2 / 2 + vc ** 2 / 2))
    # Stein's first stage: its variance, n0 - 1 degrees of freedom.
    staged = versus((110.0, 112.0, 108.0, 110.0), [c], noise, stage=3)
    assert staged is not None and staged.df == 2


def test_holm_and_bh_adjust_over_the_family() -> None:
    """Five deltas, two of them real: Holm's step-down and BH's step-up, as written."""
    noise = declared(0.01)
    ctl = (100.0, 100.5, 99.5)
    family = [versus(tuple(x * f for x in ctl), [ctl], noise) for f in (1.08, 1.05, 1.01, 0.99, 1.0)]
    ps = [p for v in family if v is not None and (p := v.p()) is not None]
    holm = judge(family, RULE)
    order = np.argsort(ps)
    want = np.maximum.accumulate([ps[i] * (5 - k) for k, i in enumerate(order)])
    for k, i in enumerate(order):
        assert holm[i].p_adjusted == pytest.approx(min(1.0, want[k]))
    assert [j.call for j in holm][:2] == [Call.EFFECT, Call.EFFECT]
    bh = judge(family, Rule(0.05, "bh", 0.05, 0.01))
    assert all(b.p_adjusted is not None and h.p_adjusted is not None and b.p_adjusted <= h.p_adjusted
               for b, h in zip(bh, holm, strict=True))


def test_the_corrections_give_the_textbook_adjusted_p_values() -> None:
    """Four p-values by hand: Holm 0.005x4, 0.01x3, 0.03x2 (and 0.04x1 held up to it); BH 0.005x4,
    0.01x4/2, 0.03x4/3, 0.04 (and each held down to the one after); ties and 1 kept."""
    ps = [0.01, 0.04, 0.03, 0.005]
    assert adjust(ps, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert adjust(ps, "bh") == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert adjust([0.5, 0.5, 0.9], "holm") == pytest.approx([1.0, 1.0, 1.0])
    assert adjust([0.02, 0.02], "bh") == pytest.approx([0.02, 0.02])
    assert adjust([], "holm") == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=40), st.sampled_from(["holm", "bh"]))
def test_the_corrections_are_statsmodels(ps: list[float], correction: str) -> None:
    """The library's multipletests is the oracle: ties, zeros and ones included. It collects all
    the process's garbage on each call (0.1 s in a test worker's heap), which answers nothing."""
    from statsmodels.stats.multitest import multipletests

    with mock.patch("gc.collect", return_value=0):
        want = multipletests(ps, method={"holm": "holm", "bh": "fdr_bh"}[correction])[1]
    assert adjust(ps, correction) == pytest.approx(list(want), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_the_corrections_keep_their_order_and_bounds(ps: list[float]) -> None:
    """Each adjusted p is at least its own and at most 1, in the p-values' order, BH never above
    Holm; Holm is the step-down maximum of (m - rank) p, BH the step-up minimum of m p / rank."""
    m, order = len(ps), sorted(range(len(ps)), key=lambda i: ps[i])
    holm, bh = adjust(ps, "holm"), adjust(ps, "bh")
    for a, b in zip(order, order[1:], strict=False):
        assert holm[a] <= holm[b] and bh[a] <= bh[b]
    for i in range(m):
        assert ps[i] <= bh[i] <= holm[i] <= 1.0 or ps[i] == bh[i] == holm[i] == 1.0
    for k, i in enumerate(order):
        assert holm[i] == pytest.approx(max(min(1.0, (m - j) * ps[order[j]]) for j in range(k + 1)))
        assert bh[i] == pytest.approx(min(min(1.0, m * ps[order[j]] / (j + 1)) for j in range(k, m)))


def test_no_effect_is_shown_by_equivalence_not_presumed() -> None:
    """A precise +0.5 % is no observable effect (its 90 % interval inside ±5 %); the same point
    with wide noise is undetermined, and says how many sessions would settle it."""
    ctl = (100.0, 100.2, 99.8)
    precise = versus((100.5, 100.7, 100.3), [ctl], declared(0.002))
    loose = versus((100.5, 100.7, 100.3), [ctl], declared(0.05))
    [p], [lo] = judge([precise], RULE), judge([loose], RULE)
    assert p.call == Call.NONE and "inside ±5 %" in p.why()
    assert lo.call == Call.UNDETERMINED
    assert loose is not None and (loose.sessions_needed(RULE) or 0) >= 2
    assert "sessions of this window would settle it" in lo.why()


def test_an_effect_under_the_margin_precisely_measured_is_an_effect() -> None:
    """The 10 % floor never called a precise 3 % change; the new rule does."""
    ctl = (100.0, 100.2, 99.8)
    v = versus((103.0, 103.2, 102.8), [ctl], declared(0.002))
    [j] = judge([v], RULE)
    assert j.call == Call.EFFECT


@pytest.mark.parametrize(("sessions", "rep_noise", "boot_noise"), [(1, 0.05, 0.05), (2, 0.10, 0.0),
                                                                    (2, 0.02, 0.05)])
def test_false_effects_across_an_aa_campaign_stay_under_the_error_rate(
        sessions: int, rep_noise: float, boot_noise: float) -> None:
    """A/A campaigns of 8 windows x 2 classes x 3 loads (48 rows) with the control again: at most
    about 5 % of campaigns show any false effect (150 campaigns: 5 % is 7.5, its 95 % band up to
    about 13)."""
    r = rates(Design(windows=8, sessions=sessions), RULE, rep_noise, boot_noise, 0.0, 150, seed=3)
    assert r.any_false <= 0.09, r


def test_a_real_ten_percent_drop_is_called_at_low_noise() -> None:
    """Two sessions, 2 % rep noise, 1 % between boots: a real -10 % row is called an effect most
    of the time (seen: 84 % of 180 rows), in the right direction, with Holm over 24 rows."""
    r = rates(Design(windows=4, sessions=2), RULE, 0.02, 0.01, -0.10, 60, seed=4, changed=1)
    assert r.power >= 0.75, r
