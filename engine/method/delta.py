"""A window row against its control row: the relative delta of their reps, with a confidence
interval, and the one rule that says whether it is beyond the noise.

Method: Welch's t on the natural log of each rep's aggregate tok/s, at 95 %. The difference of the
two sides' mean logs is the log of the ratio of their geometric means; its interval is
``d ± t(0.975, ν) · se`` with ``se² = s_w²/n_w + s_c²/n_c`` and the Welch-Satterthwaite ``ν``;
both ends come back as ratios minus one. Logs, because a delta is a ratio (a window twice as fast
and one half as fast are equally far from the control) and tok/s is positive; Welch, because the
two sides' noise differs and three reps a side is too few for a bootstrap (a resample of three
values takes only ten distinct sets, and its percentile interval is far too narrow).

The rule (no observable effect, the console's Δ colour, ``ruler compare``): a delta shows an effect
when its interval excludes 0 and it is larger than the noise floor: the campaign's declared noise
(``leak.spread``; reps within one boot understate the noise between two boots), and for a
comparison across sessions or runs the control's own drift between them as well. With a single
rep on a side there is no interval, and the floor alone decides.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

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
    (engine.method.precision): each side's variance and degrees of freedom come from its first
    ``stage`` reps only, the means from all of them. The number of reps then depends on those
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
    nu = (vw + vc) ** 2 / (vw ** 2 / (len(sw) - 1) + vc ** 2 / (len(sc) - 1))
    half = t_quantile(1 - (1 - level) / 2, nu) * se
    return Interval(point, math.expm1(d - half), math.expm1(d + half))


@functools.lru_cache(maxsize=8192)
def pair_delta(window: tuple[float, ...], control: tuple[float, ...],
               stage: int | None = None) -> Interval | None:
    """:func:`relative_delta`, once per pair of rep tuples: the console redraws every window of a
    day-long campaign (800) on each batch, and its report shows each row against its control in
    two tables; a t quantile each time cost seconds. A pair's reps change only when a rep lands."""
    return relative_delta(window, control, stage=stage)


def stage_of(window: Mapping[str, Any], control: Mapping[str, Any]) -> int | None:
    """The first stage whose variance a pair's interval uses: the rows' ``stage_reps`` when both
    took reps to a precision (engine.method.precision), else None (every rep's variance)."""
    sw, sc = window.get("stage_reps"), control.get("stage_reps")
    return min(sw, sc) if isinstance(sw, int) and isinstance(sc, int) else None


def observable(iv: Interval, floor: float = 0.0) -> bool:
    """The rule: the interval excludes 0 (or there is none) and the delta exceeds the floor."""
    excludes_zero = iv.lo is None or iv.hi is None or iv.lo > 0 or iv.hi < 0
    return excludes_zero and abs(iv.delta) > floor


def noise_floor(declared: float, drifts: Iterable[Interval | None]) -> float:
    """The floor a comparison across sessions (or runs) must exceed: the declared noise, or the
    largest drift of the control between them, whichever is larger."""
    return max([declared] + [abs(d.delta) for d in drifts if d is not None])


def text(iv: Interval | None, floor: float = 0.0) -> str:
    """``+12.3 % [+8.1, +16.6]``, with ``(within noise)`` when the rule sees no effect."""
    if iv is None:
        return "n/a"
    out = f"{iv.delta * 100:+.1f} %"
    if iv.lo is not None and iv.hi is not None:
        out += f" [{iv.lo * 100:+.1f}, {iv.hi * 100:+.1f}]"
    return out + ("" if observable(iv, floor) else " (within noise)")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


# -- Student's t, for a fractional degree of freedom (numpy has no quantile of it) -------------


def t_cdf(t: float, nu: float) -> float:
    """P(T <= t) for Student's t with ``nu`` degrees of freedom (``nu`` > 0, not only whole)."""
    tail = 0.5 * _betainc(nu / 2, 0.5, nu / (nu + t * t))
    return 1 - tail if t > 0 else tail


def t_quantile(p: float, nu: float) -> float:
    """The t with P(T <= t) = p, for 0.5 <= p < 1, to 1e-10: Newton's steps on :func:`t_cdf` (its
    slope is the t density) from Hill's approximation, kept inside the bracket the steps have
    found (bisecting, or doubling while it has no upper end, where a step would leave it). Two
    evaluations of t_cdf where a start at the bracket's middle took nine: a day-long report has
    thousands of intervals."""
    log_c = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
    t = _hill(p, nu)
    lo, hi = 0.0, math.inf
    while True:
        f = t_cdf(t, nu) - p
        lo, hi = (t, hi) if f < 0 else (lo, t)
        step = f / math.exp(log_c - (nu + 1) / 2 * math.log1p(t * t / nu))
        if abs(step) <= 1e-12 * max(1.0, t) and lo <= t - step <= hi:
            return t - step
        if hi < math.inf and hi - lo <= 1e-10 * max(1.0, hi):
            return (lo + hi) / 2
        t = t - step if lo < t - step < hi else (lo + hi) / 2 if hi < math.inf else 2 * max(t, 1.0)


_NORMAL = NormalDist()


def _hill(p: float, nu: float) -> float:
    """Hill's approximation of the t quantile (CACM algorithm 396, 1970), within 1e-5 for the
    ν of three reps a side and 2e-3 at ν = 2: only a start, the Newton steps above decide the
    figure. 1 where it does not apply (ν <= 0.5)."""
    if nu <= 0.5:
        return 1.0
    p2 = 2 * (1 - p)  # the two-tailed probability
    a = 1 / (nu - 0.5)
    b = 48 / (a * a)
    c = ((20700 * a / b - 98) * a - 16) * a + 96.36
    d = ((94.5 / (b + c) - 3) / b + 1) * math.sqrt(a * math.pi / 2) * nu
    if d * p2 <= 0:  # ν just above 0.5
        return 1.0
    y = (d * p2) ** (2 / nu)
    if y > 0.05 + a:
        x = _NORMAL.inv_cdf(p2 / 2)
        y = x * x
        if nu < 5:
            c += 0.3 * (nu - 4.5) * (x + 0.6)
        c = (((0.05 * d * x - 5) * x - 7) * x - 2) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36) * y + 94.5) / c - y - 3) / b + 1) * x
        y = a * y * y
        y = math.expm1(y) if y > 0.002 else 0.5 * y * y + y
    elif y > 0:
        y = ((1 / (((nu + 6) / (nu * y) - 0.089 * d - 0.822) * (nu + 2) * 3)
              + 0.5 / (nu + 4)) * y - 1) * (nu + 1) / (nu + 2) + 1 / y
    t = math.sqrt(nu * y) if y > 0 else 0.0
    return t if 0 < t < math.inf else 1.0


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1 - front * _betacf(b, a, 1 - x) / b
    return front * _betacf(a, b, x) / a


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h
