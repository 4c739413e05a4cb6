"""A row against another from their reps alone: the relative delta with Welch's interval on log
tok/s, the figure the precision rule (engine.method.precision) sizes a row's reps by.

Logs, because a delta is a ratio (a window twice as fast and one half as fast are equally far from
the control) and tok/s is positive; Welch, because the two sides' noise differs and three reps a
side is too few for a bootstrap. This interval counts the reps of one boot each; a window's verdict
against its control also counts the noise between boots (engine.method.verdict).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

LOG_MAX = math.log(sys.float_info.max)  # the largest log-ratio whose ratio is a float

LEVEL = 0.95
METHOD = "Welch's t on log tok/s of the reps, 95 %"


@dataclass(frozen=True)
class Interval:
    """(window / control) - 1 from the reps, with its interval (None ends: fewer than two reps on
    a side, so no variance)."""

    delta: float
    lo: float | None
    hi: float | None

    def rounded(self, digits: int = 4) -> Interval:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, digits)
        return Interval(round(self.delta, digits), r(self.lo), r(self.hi))


def relative_delta(window: Sequence[float], control: Sequence[float],
                   level: float = LEVEL, stage: int | None = None) -> Interval | None:
    """The window's reps against the control's; None when either side has no rep or a rep that
    is not a positive rate (no log).

    ``stage``: Stein's two-stage interval, for rows whose reps were added until a precision
    (engine.method.precision): each side's variance comes from its first ``stage`` reps only, the
    means from all of them, and the degrees of freedom are the first stage's, n0 - 1 (Stein's;
    Welch's over the first stage would overstate them). The number of reps then depends on those
    first reps alone, and the interval keeps its level however many were added."""
    if not window or not control or min(*window, *control) <= 0:
        return None
    lw, lc = [math.log(x) for x in window], [math.log(x) for x in control]
    d = _mean(lw) - _mean(lc)
    point = math.expm1(d)
    sw, sc = (lw[:stage], lc[:stage]) if stage else (lw, lc)
    if len(sw) < 2 or len(sc) < 2:
        return Interval(point, None, None)
    vw, vc = _var(sw) / len(lw), _var(sc) / len(lc)
    se = math.sqrt(vw + vc)
    if se == 0:  # every rep alike on both sides: nothing to widen the point by
        return Interval(point, point, point)
    nu = (min(len(sw), len(sc)) - 1 if stage else
          (vw + vc) ** 2 / (vw ** 2 / (len(sw) - 1) + vc ** 2 / (len(sc) - 1)))
    half = t_quantile(1 - (1 - level) / 2, nu) * se
    return Interval(point, *ratio_bounds(d, half))


def ratio_bounds(log_delta: float, half: float) -> tuple[float, float]:
    """(window / control) - 1 at both ends of a log-ratio interval. A t of a fraction of a degree
    of freedom at a small share of the error rate puts the upper end past the float range: it is
    as far as a float goes, the interval unbounded."""
    return math.expm1(log_delta - half), math.expm1(min(log_delta + half, LOG_MAX))


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def t_cdf(t: float, nu: float) -> float:
    """P(T <= t) for Student's t with ``nu`` degrees of freedom (scipy.special's, as scipy.stats'
    without its argument checks: a verdict over a campaign asks thousands)."""
    from scipy import special  # lazy: the console starts without scipy's import time
    return float(special.stdtr(nu, t))


def t_sf(t: float, nu: float) -> float:
    """P(T > t)."""
    return t_cdf(-t, nu)


def t_quantile(p: float, nu: float) -> float:
    """The t with P(T <= t) = p."""
    from scipy import special
    return float(special.stdtrit(nu, p))
