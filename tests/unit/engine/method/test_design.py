"""The design arithmetic (engine.method.design): where a session's control boots go, the sessions
a question needs, the reps a boot, the error rate's share at each look."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.method.design import (
    INTERIM,
    best_reps,
    control_boots,
    final_level,
    interim_level,
    interleave,
    residual_df,
    sessions_needed,
)


def test_interleaved_controls_are_about_the_root_of_the_windows_first_last_and_between() -> None:
    assert [control_boots(w, "interleaved") for w in (1, 4, 6, 9, 10, 16)] == [2, 2, 3, 3, 4, 4]
    order = interleave([f"w{i}" for i in range(6)], 3)
    assert order == ["control", "w0", "w1", "w2", "control-2", "w3", "w4", "w5", "control-again"]
    assert control_boots(6, "both") == 2 and control_boots(6, "first") == 1


def test_sessions_needed_by_simulation_of_the_design() -> None:
    """The sessions said for a 10 % effect at 80 % power: a simulation of that design's t test at
    that many sessions calls it at least about 75 % of the time, and at one fewer less often."""
    from scipy import stats

    boot, windows, controls, level = 0.03 ** 2, 4, 2, 0.05 / 4
    s = sessions_needed(boot, windows, controls, level, -0.10, 0.8)
    assert s is not None and s >= 2
    rng = np.random.default_rng(5)

    def power(sessions: int) -> float:
        df = residual_df(sessions, windows, controls)
        se = math.sqrt(boot * (1 + 1 / controls) / sessions)
        d = rng.normal(math.log(0.9), se, 4000)
        s_hat = se * np.sqrt(rng.chisquare(df, 4000) / df)
        return float(np.mean(np.abs(d / s_hat) > stats.t.ppf(1 - level / 2, df)))

    assert power(s) >= 0.75 and power(s - 1) < power(s)


def test_noisier_shapes_want_more_sessions_and_a_margin_too_tight_none() -> None:
    quiet = sessions_needed(0.01 ** 2, 4, 2, 0.0125, 0.05, 0.8)
    loud = sessions_needed(0.05 ** 2, 4, 2, 0.0125, 0.05, 0.8)
    assert quiet is not None and loud is not None and quiet < loud
    assert sessions_needed(0.30 ** 2, 4, 2, 0.05, 0.05, 0.8, equivalence=True) is None


def test_reps_a_boot_follow_the_costs_and_the_variances() -> None:
    """More reps where a boot costs much against a rep and reps are noisy against boots."""
    assert best_reps(0.02 ** 2, 0.02 ** 2, 60, 15) == 2
    assert best_reps(0.005 ** 2, 0.04 ** 2, 60, 15) == 10
    assert best_reps(0.05 ** 2, 0.01 ** 2, 60, 15) == 1


def test_the_looks_spend_at_most_the_error_rate() -> None:
    spent, before = 0.0, 0.0
    for fraction in (0.3, 0.5, 0.7, 0.9):
        spent += interim_level(0.05, fraction, before)
        before = fraction
    assert spent == pytest.approx(0.05 * INTERIM * 0.9)
    assert spent + final_level(0.05, before) == pytest.approx(0.05)
