"""The verdicts (engine.method.verdict): a delta's interval with the noise between boots, by hand;
the closed test over windows (Bonferroni across, Simes within) against the closure itself;
Holm and Benjamini-Hochberg on a flat family; "no observable effect" only by TOST; and the error
rates of ruler's own judgement on synthetic campaigns (engine.record.simulate)."""

from __future__ import annotations

import itertools
import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.method.boots import CONTROL_CONFIG, Boot, declared, fit
from engine.method.verdict import (
    Call,
    Rule,
    Versus,
    _Closure,
    _hardest,
    adjust,
    from_effect,
    judge,
    judge_one,
    simes,
    versus,
)
from engine.record.simulate import Design, Noise, rates

RULE = Rule(0.05, "holm", 0.05, None)


def _measured() -> Boot:
    return Boot("s1", CONTROL_CONFIG, (100.0, 101.0, 99.0))


def test_a_rows_delta_counts_its_shapes_noise_with_its_degrees_of_freedom() -> None:
    """Var = boot_mean (1 + 1/K) for the window's boot and K control boots, plus what the window's
    reps spread beyond the pooled within-boot variance; the reference t's df the noise's nu."""
    c = CONTROL_CONFIG
    noise = fit([Boot("s1", c, (100.0, 101.0, 99.0)), Boot("s1", c, (104.0, 105.0, 103.0)),
                 Boot("s2", c, (50.0, 50.5, 49.5)), Boot("s2", c, (51.0, 51.5, 50.5))]).noise
    w, c1, c2 = (110.0, 111.0, 109.0), (100.0, 101.0, 99.0), (104.0, 105.0, 103.0)
    v = versus(w, [c1, c2], noise)
    assert v is not None and v.df == noise.nu and noise.df == 2
    d = np.log(w).mean() - np.mean([np.log(c1).mean(), np.log(c2).mean()])
    extra = max(0.0, np.log(w).var(ddof=1) - noise.within) / 3
    se = math.sqrt(noise.boot_mean * 1.5 + extra)
    assert v.log_delta == pytest.approx(d) and v.se == pytest.approx(se)
    lo, hi = v.interval()  # type: ignore[misc]  # an interval: se > 0
    from scipy import stats  # the oracles are imported by the tests that use them, not by every worker

    q = stats.t.ppf(0.975, noise.nu)
    assert (lo, hi) == (pytest.approx(math.expm1(d - q * se)), pytest.approx(math.expm1(d + q * se)))
    assert v.p() == pytest.approx(2 * stats.t.sf(d / se, noise.nu))


def test_a_fitted_effect_is_a_delta_over_its_sessions() -> None:
    order = [(s, c) for s in ("s1", "s2") for c in (CONTROL_CONFIG, "w", CONTROL_CONFIG)]
    boots = [Boot(s, c, tuple(x * (1.1 if c == "w" else 1.0) * (1 + i / 100) for x in (100.0, 101.0, 99.0)))
             for i, (s, c) in enumerate(order)]
    f = fit(boots)
    v = from_effect(f.effects["w"], f.noise, controls=4)
    assert v.sessions == 2 and v.controls == 4 and v.delta == pytest.approx(0.1, abs=0.02)
    assert v.se == pytest.approx(math.sqrt(f.noise.boot_mean * f.effects["w"].factor + f.effects["w"].extra))
    assert "2 sessions" in v.method() and "session as a block" in v.method()


def _closure_by_brute_force(ps: dict[str, list[float]], alpha: float) -> set[tuple[str, int]]:
    """Every intersection of the rows' null hypotheses, each tested by Bonferroni across its
    windows of Simes within: a row is rejected when every intersection holding it is."""
    rows = [(w, i) for w, p in ps.items() for i in range(len(p))]
    tested = []
    for size in range(1, len(rows) + 1):
        for inter in itertools.combinations(rows, size):
            by: dict[str, list[float]] = {}
            for w, i in inter:
                by.setdefault(w, []).append(ps[w][i])
            tested.append((set(inter), any(simes(v) <= alpha / len(by) for v in by.values())))
    return {r for r in rows if all(rejected for inter, rejected in tested if r in inter)}


_P = st.one_of(st.floats(0, 0.02), st.floats(0, 0.2), st.floats(0, 1))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from("abcd"), st.lists(_P, min_size=1, max_size=3), min_size=1, max_size=3),
       st.sampled_from([0.05, 0.1]))
def test_the_shortcut_is_the_closed_test(ps: dict[str, list[float]], alpha: float) -> None:
    """The rows the shortcut rejects are exactly those the full closure rejects, and a row's
    adjusted p-value is at most alpha exactly when it is rejected at alpha."""
    closure = _Closure({w: max(p) for w, p in ps.items()})
    got = set()
    for w, p in ps.items():
        for i, pi in enumerate(p):
            h = _hardest(pi, p[:i] + p[i + 1:])
            rejected = closure.rejects(w, h, alpha)
            assert (closure.adjusted(w, h) <= alpha) == rejected
            if rejected:
                got.add((w, i))
    assert got == _closure_by_brute_force(ps, alpha)


def _v(log_delta: float, se: float, df: float = 30.0) -> Versus:
    return Versus(log_delta, se, df, declared(0.01), 3, 2)


def test_a_window_moving_at_every_shape_is_tested_over_windows_not_rows() -> None:
    """Four windows of six shapes; one moves everywhere (each row's p about 0.01): its rows are
    called at about 0.05 / 4 a window, where Holm over all 24 rows would need 0.05 / 24."""
    moving = {f"sh{i}": _v(-0.1, 0.036) for i in range(6)}
    still = {f"sh{i}": _v(0.0, 0.036) for i in range(6)}
    family = {"moves": moving, "a": still, "b": dict(still), "c": dict(still)}
    v = judge(family, RULE)
    p = moving["sh0"].p()
    assert p is not None and 0.005 < p < 0.0125
    assert all(v.rows[("moves", s)].call == Call.EFFECT for s in moving)
    assert v.windows["moves"].call == Call.EFFECT and v.windows["moves"].effects == 6
    assert min(adjust([x for w in family.values() for x in (y.p() for y in w.values()) if x is not None],
                      "holm")) > 0.05
    assert all(v.rows[(w, s)].call != Call.EFFECT for w in "abc" for s in still)
    assert v.rows[("a", "sh0")].windows == 4


def test_a_window_moving_at_one_shape_pays_for_its_other_shapes() -> None:
    rows = {f"sh{i}": _v(0.0, 0.036) for i in range(6)}
    rows["sh0"] = _v(-0.12, 0.036)
    v = judge({"one": rows, "other": {f"sh{i}": _v(0.0, 0.036) for i in range(6)}}, RULE)
    p = rows["sh0"].p()
    assert p is not None
    assert v.rows[("one", "sh0")].p_adjusted == pytest.approx(min(1.0, p * 12), rel=0.05)


def test_bh_is_over_every_row() -> None:
    family = {"a": {"x": _v(-0.1, 0.03), "y": _v(0.0, 0.03)}, "b": {"x": _v(0.01, 0.03)}}
    v = judge(family, Rule(0.05, "bh", 0.05, None))
    ps = [family["a"]["x"].p(), family["a"]["y"].p(), family["b"]["x"].p()]
    want = adjust([p for p in ps if p is not None], "bh")
    assert [v.rows[k].p_adjusted for k in (("a", "x"), ("a", "y"), ("b", "x"))] == pytest.approx(want)


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


def test_no_effect_is_shown_by_equivalence_not_presumed() -> None:
    """A precise +0.5 % is no observable effect (its 90 % interval inside ±5 %); the same point
    with wide noise is undetermined, and says how many sessions would settle it."""
    ctl = (100.0, 100.2, 99.8)
    precise = versus((100.5, 100.7, 100.3), [ctl], declared(0.002))
    loose = versus((100.5, 100.7, 100.3), [ctl], declared(0.05))
    p, lo = judge_one(precise, RULE), judge_one(loose, RULE)
    assert p.call == Call.NONE and "inside ±5 %" in p.why()
    assert lo.call == Call.UNDETERMINED
    assert "sessions of this window would settle it" in lo.why()


def test_a_row_whose_interval_excludes_zero_but_is_not_called_says_why() -> None:
    """Eight windows, one with a 95 % interval clear of 0 that the family does not call: its
    reason names the adjusted p-value and the windows it is adjusted over."""
    family = {f"w{i}": {"x": _v(0.0, 0.03)} for i in range(8)}
    family["w0"] = {"x": _v(-0.075, 0.03)}
    j = judge(family, RULE).rows[("w0", "x")]
    iv = j.versus.interval() if j.versus is not None else None
    assert iv is not None and iv[1] < 0 and j.call == Call.UNDETERMINED
    assert j.why().startswith("not called: p ") and "over 8 windows" in j.why()


def test_sessions_needed_is_at_the_level_the_row_is_tested_at() -> None:
    v = _v(-0.05, 0.03)
    strict, loose = v.sessions_needed(0.05 / 8, 0.05, 0.05), v.sessions_needed(0.05, 0.05, 0.05)
    assert strict is not None and loose is not None and strict > loose


def test_an_effect_under_the_margin_precisely_measured_is_an_effect() -> None:
    ctl = (100.0, 100.2, 99.8)
    assert judge_one(versus((103.0, 103.2, 102.8), [ctl], declared(0.002)), RULE).call == Call.EFFECT


def test_a_call_on_a_declared_noise_says_so() -> None:
    ctl = (100.0, 100.2, 99.8)
    j = judge_one(versus((110.0, 110.2, 109.8), [ctl], declared(0.01)), RULE)
    assert j.call == Call.EFFECT and "rests on the declared noise" in j.why()


# A/A campaigns of 6 windows x 2 classes x 2 loads (24 rows): at most about 5 % of campaigns show
# any false effect (120 campaigns: 5 % is 6, the 95 % band up to about 11, so 0.09).
TWO = Design(windows=6, sessions=2, loads=(1, 8))
AA = [
    ("equal", TWO, Noise()),
    ("classes 1 % / 8 %", TWO, Noise(boot={"prose": 0.01, "code": 0.08})),
    ("t3 tails, interleaved", Design(windows=6, sessions=2, loads=(1, 8), control="interleaved"),
     Noise(tails="t3")),
    ("session shifts 5 %", Design(windows=6, sessions=3, loads=(1, 8)), Noise(shift=0.05)),
]


@pytest.mark.parametrize(("name", "design", "noise"), AA, ids=[a[0] for a in AA])
def test_false_effects_across_an_aa_campaign_stay_under_the_error_rate(
        name: str, design: Design, noise: Noise) -> None:
    r = rates(design, RULE, noise, 0.0, 120, seed=3)
    assert r.any_false <= 0.09, (name, r)


def test_a_real_ten_percent_drop_is_called_at_low_noise() -> None:
    """Two sessions, 2 % rep noise, 1 % between boots: a real -10 % window is called at most of
    its rows, in the right direction, and as a window nearly always."""
    r = rates(Design(windows=4, sessions=2, loads=(1, 8)), RULE, Noise(boot=0.01, rep=0.02), -0.10, 40,
              seed=4, changed=1)
    assert r.power >= 0.75 and r.windows_found >= 0.9, r


def test_an_interval_past_the_float_range_is_as_wide_as_a_float_goes() -> None:
    """A t of half a degree of freedom (heavy tails) at a look's small share of the error rate is
    astronomically large: its upper end was an OverflowError, which took ``ruler run`` down with a
    traceback when throughput.csv's row was written (an A/A campaign, until_decided, at load 9)."""
    v = _v(0.0, 1.0, df=0.5)
    lo, hi = v.interval(1 - 2e-5) or (None, None)
    assert lo == pytest.approx(-1.0) and hi is not None and math.isfinite(hi) and hi > 1e300
    judged = judge({"w": {"sh": v}}, Rule(1e-5, "holm", 0.05, None))
    assert judged.rows[("w", "sh")].call == Call.UNDETERMINED and judged.rows[("w", "sh")].why()
