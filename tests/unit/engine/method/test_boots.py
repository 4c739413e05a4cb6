"""The noise between boots (engine.method.boots): the two-way fit at one shape, with the session as
a block, by hand and by simulation; heavy tails; an earlier run's noise; nothing measured."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from engine.method.boots import CONTROL_CONFIG, Boot, Source, declared, fit, within

C = CONTROL_CONFIG


def _boots(rows: Sequence[tuple[str, str, tuple[float, ...]]]) -> list[Boot]:
    return [Boot(s, c, r) for s, c, r in rows]


def test_the_fit_by_hand() -> None:
    """Two sessions, the control twice in each, a window once in each: the window's effect is the
    least-squares one with a level per session, the noise the residuals' over 2 df."""
    rows = [("s1", C, (100.0, 101.0, 99.0)), ("s1", "w", (110.0, 111.0, 109.0)),
            ("s1", C, (104.0, 103.0, 105.0)), ("s2", C, (90.0, 91.0, 89.0)),
            ("s2", "w", (97.0, 98.0, 96.0)), ("s2", C, (92.0, 91.0, 93.0))]
    f = fit(_boots(rows))
    x = np.array([[1, 0, 0], [1, 0, 1], [1, 0, 0], [0, 1, 0], [0, 1, 1], [0, 1, 0]], float)
    y = np.array([np.log(r).mean() for _, _, r in rows])
    beta, res, *_ = np.linalg.lstsq(x, y, rcond=None)
    assert f.noise.source == Source.MEASURED and f.noise.df == 3 and f.noise.sessions == 2
    assert f.noise.boot_mean == pytest.approx(float(res[0]) / 3)
    effect = f.effects["w"]
    assert effect.log_delta == pytest.approx(beta[2])
    assert effect.factor == pytest.approx(np.linalg.inv(x.T @ x)[2, 2])
    assert effect.boots == 2 and effect.sessions == 2 and effect.reps == 6
    w, df = within(_boots(rows))
    assert df == 12 and f.noise.within == pytest.approx(w)


def test_a_shift_between_sessions_is_not_noise() -> None:
    """Every boot of session 2 twice as fast: the fit's noise and the window's effect are those of
    the same run without the shift (a delta is taken within its session)."""
    rng = np.random.default_rng(3)
    rows = [(s, c, tuple(100 * np.exp(rng.normal(0, 0.03, 3)))) for s in ("s1", "s2", "s3")
            for c in (C, "a", "b", C)]
    shifted = [(s, c, tuple(x * (2.0 if s == "s2" else 1.0) for x in r)) for s, c, r in rows]
    plain, moved = fit(_boots(rows)), fit(_boots(shifted))
    assert moved.noise.boot_mean == pytest.approx(plain.noise.boot_mean)
    assert moved.effects["a"].log_delta == pytest.approx(plain.effects["a"].log_delta)


def test_a_server_that_moves_between_boots_is_measured_so_per_shape() -> None:
    """Simulated: boots moving by 5 % (sd of log), reps by 2 %; the control four times in each of
    10 sessions: the estimate lands near 5 % beside the reps' share."""
    rng = np.random.default_rng(7)
    rows = [(f"s{s}", C, tuple(100 * np.exp(b + rng.normal(0, 0.02, 3))))
            for s in range(10) for b in rng.normal(0, 0.05, 4)]
    n = fit(_boots(rows)).noise
    assert n.df == 30
    assert 0.035 < math.sqrt(n.between) < 0.065
    assert 0.015 < math.sqrt(n.within) < 0.025
    assert n.how().startswith("measured: 40 boots in 10 sessions, 30 df")


def test_heavy_tails_lower_the_reference_degrees_of_freedom_and_the_same_boots_agree() -> None:
    rows = [(s, c, (100.0 + i, 101.0 + i, 99.0 + i)) for i, (s, c) in enumerate(
        [(s, c) for s in ("s1", "s2") for c in (C, "a", "b", "c", C, "d", C)])]
    a, b = fit(_boots(rows)).noise, fit(_boots(rows)).noise
    assert 0 < a.nu < a.df and a.nu == b.nu
    assert "t df" in a.how()


def test_nothing_booted_twice_is_no_interval_unless_declared() -> None:
    rows = [("s1", C, (100.0, 101.0)), ("s1", "w", (90.0, 91.0))]
    none = fit(_boots(rows)).noise
    assert none.source == Source.NONE and not none.usable and "not measured" in none.how()
    said = fit(_boots(rows), declared_sd=0.05).noise
    assert said.source == Source.DECLARED and said.df == math.inf
    assert math.sqrt(said.between) == pytest.approx(math.log1p(0.05))
    assert said.how().startswith("declared 5.0 %") and "rests on that value" in said.how()
    assert declared(0.0).boot_mean == 0.0  # a declared zero is the campaign's own, written out


def test_an_earlier_runs_noise_stands_in_or_pools() -> None:
    rng = np.random.default_rng(11)
    earlier = fit(_boots([(f"s{s}", C, tuple(100 * np.exp(rng.normal(0, 0.03, 3))))
                          for s in range(4) for _ in range(3)])).noise
    alone = fit(_boots([("s1", C, (100.0, 101.0)), ("s1", "w", (90.0, 91.0))])).noise
    stood = alone.with_baseline(earlier, "2026-12-01-pilot")
    assert stood.source == Source.BASELINE and stood.df == earlier.df == 8
    assert stood.boot_mean == pytest.approx(earlier.boot_mean)
    assert "from the baseline run 2026-12-01-pilot (8 df)" in stood.how()
    mine = fit(_boots([("s1", C, (100.0, 101.0)), ("s1", C, (103.0, 104.0)),
                       ("s1", "w", (90.0, 91.0))])).noise
    pooled = mine.with_baseline(earlier, "pilot")
    assert pooled.df == 9
    assert pooled.boot_mean == pytest.approx((mine.boot_mean + 8 * earlier.boot_mean) / 9)


def test_a_window_never_beside_a_control_has_no_effect() -> None:
    """A session whose control is missing links its window to nothing: no effect is fitted."""
    rows = [("s1", C, (100.0, 101.0)), ("s1", "a", (90.0, 91.0)), ("s1", C, (99.0, 98.0)),
            ("s2", "b", (80.0, 81.0))]
    f = fit(_boots(rows))
    assert "a" in f.effects and "b" not in f.effects
