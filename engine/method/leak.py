"""Leak or noise: whether a row's lowest rep is a leaked pass, judged against the run's own noise.

A leaked autotune pass or a throttled rep is one slow rep standing alone below the others (the
campaign notes' 135 / 700 / 700; on an H200, a server stalled for 1.5 s of a 4 s rep: 1193 against
2202 and 2000). Noise is reps scattered by the server's own variation. The rule tells them apart on
the log of each rep's tok/s:

- The **gap**: how far the lowest rep is below the next lowest (the nearest of the others). Against
  the nearest rather than the others' median, so a rep far *above* the rest does not condemn the
  lowest, and two slow reps are not one standing alone.
- The **noise**: the pooled standard deviation of log tok/s within rows, over the run's other rows
  at the same load (the caller's pool, at most ``POOL_ROWS``) and this row's reps other than the
  lowest, each row weighed by its degrees of freedom. A scale, not a range, so the rule's power
  grows with the reps instead of falling. Not a robust scale: the median of the rows' variances,
  held to the same false voids, catches fewer slow reps and voids no fewer, and the median absolute
  deviation of three reps wastes most of them. Nor the row's own noise shrunk toward the pool: with
  three reps the row has one degree of freedom of its own; counting the pool as 2 to 8 degrees of
  freedom cut a 4x-noisier row's false voids from 10.7 to 7-9 % and cost a half-speed rep's catch
  at 7 % noise (93 to 84-92 %).
- The **bar**: the gap that voids is the lesser of two. k noise-widths, k from a seeded simulation
  of exactly this statistic for this row's reps and the pool's degrees of freedom (:func:`critical`),
  the largest that ``WORLDS`` need: pure Gaussian noise in a row as noisy as the pool or ``RATIO``
  times noisier, and t3-tailed noise (Student's t, 3 degrees of freedom, at the same standard
  deviation) as noisy as the pool; each passed by at most ``1 - CEILING_SHARE`` of ``FALSE_VOID``
  of the rows. And the bar of a server as noisy as ``NOISE_MAX``, the noisiest the rule answers
  for (or as the pooled noise, when that is more), Gaussian or t3, passed by ``CEILING_SHARE`` of
  it. So at most 1 % of noise-only rows are voided in those worlds at any noise up to
  ``NOISE_MAX``, however little the pool holds; the second bar is what judges a row with no other
  row at its load (three reps alone give the noise one degree of freedom: k is over 100). The bar
  is never below ``leak.spread`` (the campaign's declared noise floor): a quiet server does not
  void a 3 % dip.

What it costs (bench/leak_sim.py, docs/campaign.md has the table): a rep at half the others is
caught at least 95 % of the time up to about 6 % noise (3 reps), not at 10 %; no rule can do both there
(with three reps, the best test with the pool's noise known, at 1 % false voids against a row twice
as noisy, catches 67 % at 10 % noise). A row t3-tailed *and* twice as noisy, or four times as
noisy, is voided more than 1 % of the time.

A row whose spread (max - min over the mean) is within ``leak.spread`` is clean; a wider row is
**leak-shaped** when its gap clears the bar, else **noise** (reported noisy with its interval;
rerunning it would spend the GPU for nothing). Below ``MIN_REPS`` the rule does not judge (two reps
beside a pool could be: ``bench/leak_sim.py --min-reps 2`` shows what it would cost). Below
``leak.min_concurrency`` nothing is voided as a leak (the notes see the leak at C >= 8): a wide row
there is noisy whatever its shape.

With few degrees of freedom the bar is wide: a row of three reps alone (no other row at its load
yet) is judged against ``NOISE_MAX`` (a rep more than about 48 % below the next lowest), or on its
two other reps when they nearly agree. Each row the run finishes at the load narrows the bar for
the next.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.words import plural

MIN_REPS = 3
FALSE_VOID = 0.01  # the share of pure-noise rows the rule voids, at most
CEILING_SHARE = 0.2  # of FALSE_VOID, the noisiest server's bar's share; the rest is the pooled bar's
NOISE_MAX = 0.10  # the sd of log tok/s of the noisiest server the rule holds its rate for
RATIO = 2.0  # the noisiest row, against the pool's noise, the rule holds its rate for
TAILS = 3  # the heavier-tailed noise it holds for: Student's t with 3 degrees of freedom
# The worlds the bar holds its rate in: (tails, the row's noise over the pool's); None: Gaussian.
WORLDS: tuple[tuple[int | None, float], ...] = ((None, 1.0), (None, RATIO), (TAILS, 1.0))
POOL_ROWS = 12  # the most recent other rows of the class at the load that the noise is pooled over
SIMS = 100_000  # draws behind each bar: its percentile to about 0.05 % of the rows
SEED = 34


class Shape(StrEnum):
    CLEAN = ""  # within the threshold
    LEAK = "leak"
    NOISE = "noise"


@dataclass(frozen=True)
class Reading:
    shape: Shape
    why: str  # how the rule read the reps ("" for a clean row)
    rep: int | None = None  # a leak-shaped row's low rep, 0-based
    below: float | None = None  # the lowest rep's drop below the next lowest (0.43: 43 % below)
    bar: float | None = None  # the drop that voids, as a share
    noise: float | None = None  # the pooled standard deviation of log tok/s


def spread(values: Sequence[float]) -> float:
    """(max - min) / mean; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else float("inf")


def spread_figure(values: Sequence[float]) -> float | None:
    """:func:`spread` as a recorded figure: None where reps that moved nothing make it infinite
    (no JSON file the engine writes holds a non-finite number)."""
    s = spread(values)
    return round(s, 4) if math.isfinite(s) else None


def spread_text(values: Sequence[float]) -> str:
    """:func:`spread` as a reason says it: a percentage, or why there is none (never "inf%")."""
    s = spread(values)
    return f"{s:.1%}" if math.isfinite(s) else "- (no rep moved a token)"


def pooled_noise(rows: Sequence[Sequence[float]]) -> tuple[float, int]:
    """The pooled standard deviation of log tok/s within rows (each about its own mean) and its
    degrees of freedom; rows of fewer than two reps, or with a rep at or below 0, add nothing."""
    squares, df = 0.0, 0
    for row in rows:
        if len(row) < 2 or min(row) <= 0:
            continue
        logs = [math.log(v) for v in row]
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    return (math.sqrt(squares / df) if df else 0.0), df


def _noise(rng: Any, tails: int | None, shape: tuple[int, ...]) -> Any:
    """Draws of unit standard deviation: Gaussian, or Student's t with ``tails`` degrees of freedom."""
    if tails is None:
        return rng.standard_normal(shape)
    return rng.standard_t(tails, shape) / math.sqrt(tails / (tails - 2))


def _pool_squares(rng: Any, tails: int | None, df: int) -> Any:
    """The pool's sum of squares within rows, for ``df`` degrees of freedom of unit noise: rows of
    three reps (and one of two for an odd ``df``); chi-squared when the noise is Gaussian."""
    import numpy as np

    if tails is None:
        return rng.chisquare(df, SIMS) if df else np.zeros(SIMS)
    squares = np.zeros(SIMS)
    rows, odd = divmod(df, 2)
    for shape in ((SIMS, rows, 3),) * bool(rows) + ((SIMS, 1, 2),) * odd:
        x = _noise(rng, tails, shape)
        squares += ((x - x.mean(axis=2, keepdims=True)) ** 2).sum(axis=(1, 2))
    return squares


@functools.lru_cache(maxsize=256)
def critical(reps: int, pool_df: int | None) -> float:
    """k: the gap / noise that at most ``1 - CEILING_SHARE`` of ``FALSE_VOID`` of the rows pass in
    every one of ``WORLDS``, for a row of ``reps`` reps beside a pool of ``pool_df`` degrees of
    freedom (its rows drawn as rows of three reps). ``pool_df`` None: the row's noise known, the
    noisiest server's bar, at most ``CEILING_SHARE`` of ``FALSE_VOID`` in Gaussian or t3-tailed
    noise. Seeded, so a row reads the same whenever it is recomputed."""
    import numpy as np  # lazy: the console reads a row's spread from here without numpy's import

    rng = np.random.default_rng(SEED)
    known = pool_df is None
    share = FALSE_VOID * (CEILING_SHARE if known else 1 - CEILING_SHARE)
    worlds = sorted({(tails, 1.0) for tails, _ in WORLDS}, key=str) if known else WORLDS
    worst = 0.0
    for tails, ratio in worlds:
        x = np.sort(ratio * _noise(rng, tails, (SIMS, reps)), axis=1)
        gap = x[:, 1] - x[:, 0]
        if pool_df is not None:
            others = x[:, 1:]
            squares = ((others - others.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
            gap = gap / np.sqrt((squares + _pool_squares(rng, tails, pool_df)) / (reps - 2 + pool_df))
        worst = max(worst, float(np.quantile(gap, 1 - share)))
    return worst


def read(values: Sequence[float], floor: float,
         pool: Sequence[Sequence[float]] = ()) -> Reading:
    """The shape of a row's reps under the rule above; ``floor`` is ``leak.spread`` and ``pool``
    the run's other rows of its class at this load (their reps' tok/s), the most recent last."""
    if spread(values) <= floor:
        return Reading(Shape.CLEAN, "")
    n = len(values)
    if n < MIN_REPS:
        return Reading(Shape.NOISE, f"noise: {n} reps are too few to tell a leak from noise (the "
                                    f"leak rule needs {MIN_REPS})")
    low = min(range(n), key=lambda i: values[i])
    others = [v for i, v in enumerate(values) if i != low]
    nearest, tok = min(others), f"{values[low]:.1f} tok/s"
    if nearest <= 0:
        return Reading(Shape.NOISE, f"noise: another rep is at {nearest:.1f} tok/s too, so the "
                                    f"lowest ({tok}) does not stand alone")
    rows = [r for r in pool[-POOL_ROWS:] if len(r) >= 2 and min(r) > 0]
    noise, df = pooled_noise([*rows, others])
    # The noisiest server's bar, or the noise the reps show when they show more: a bar only ever
    # raised by it, so the rate below NOISE_MAX holds. No degrees of freedom (two reps alone):
    # that bar alone.
    ceiling = critical(n, None) * max(NOISE_MAX, noise)
    k = critical(n, df - (n - 2)) if df else math.inf
    bar_log = max(-math.log1p(-floor), min(k * noise, ceiling) if df else ceiling)
    bar = -math.expm1(-bar_log)
    below = 1 - values[low] / nearest
    gap = math.log(nearest / values[low]) if values[low] > 0 else math.inf
    noisiest = f"{-math.expm1(-ceiling):.1%} at {max(NOISE_MAX, noise):.0%} noise"
    lesser = (f"the lesser of {k:.1f} x the noise {noise:.1%} pooled over "
              f"{plural(len(rows), 'other row')} of its class at this load and the row's other reps, "
              f"and {noisiest}"
              if df else f"no noise to pool: {noisiest}")
    against = f"the bar {bar:.1%} ({lesser}; at least leak.spread {floor * 100:g}%)"
    if gap > bar_log:
        return Reading(Shape.LEAK, f"leak-shaped: rep {low + 1} at {tok} is {below:.1%} below the "
                                   f"next lowest ({nearest:.1f}), past {against}", low, below, bar, noise)
    return Reading(Shape.NOISE, f"noise: the lowest rep ({tok}) is {below:.1%} below the next "
                                f"lowest ({nearest:.1f}), within {against}", None, below, bar, noise)
