"""Reps to a precision: how many reps a row takes so that its delta against the control is known
to ``workload.precision`` (the half-width of its 95 % interval), at most ``workload.max_reps``.

The stopping rule is Stein's two-stage procedure (Stein 1945), on the interval of
engine.method.delta: the row's first ``workload.reps`` reps are its first stage; their variance
(on log tok/s) is the variance of every interval the row is judged by, the means are over all its
reps. Reps are added one at a time while the interval is wider than the precision; since the
variance is the first stage's, the half-width shrinks with the reps alone and the number taken
is fixed by the first stage, so the interval keeps its 95 % however many were added. (Stopping
the moment a half-width computed from every rep so far is narrow enough does not: it stops on a
lucky low variance, and one interval in eight missed the true delta in the A/A simulation at a
noise equal to the precision.)

- a window row: its delta against its session's control row of the same shape; added until the
  half-width is at most the precision (``reached``), the row has ``max_reps`` reps (``cap``), or
  no number of reps up to ``max_reps`` can reach it (``cannot``: the control's own noise, or the
  window's, is too wide for the cap; it stops at once rather than spend the GPU).
- a control row: its own mean, to the precision over the square root of two, so that a window
  as noisy as its control reaches the precision with as many reps.

``coverage`` runs the rule on A/A pairs of synthetic reps: the share of intervals missing the
true delta (0) stays at about 5 % (bench/precision_sim.py prints the table; tests check it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from engine.method.delta import LEVEL, Interval, relative_delta, t_quantile


class Progress(StrEnum):
    MORE = "more"  # another rep narrows the interval towards the precision
    REACHED = "reached"
    CAP = "cap"  # max_reps taken, the precision not reached
    CANNOT = "cannot"  # not reachable within max_reps: stopped before it
    OFF = ""  # no precision asked (or a row with no interval: a single rep)


@dataclass(frozen=True)
class Rule:
    precision: float  # the half-width wanted, a fraction of the control's tok/s
    max_reps: int
    stage: int  # the first stage: workload.reps

    def target(self, control: bool) -> float:
        return self.precision / math.sqrt(2) if control else self.precision


@dataclass(frozen=True)
class Step:
    progress: Progress
    half: float | None  # the half-width now
    needed: int | None  # the reps the rule projects it needs (None: none within max_reps)
    boot_half: float | None = None  # the noise between boots' part of the half-width, measured


def half_width(iv: Interval | None) -> float | None:
    """The interval's half-width on the log scale, as a fraction (``e^h - 1``): the rule stops on
    it, and it depends on the reps' variance and count alone, not on where the delta lies (the
    ratio scale's (hi - lo) / 2 is e^d sinh h: a large delta would need more reps)."""
    if iv is None or iv.lo is None or iv.hi is None:
        return None
    return math.expm1((math.log1p(iv.hi) - math.log1p(iv.lo)) / 2)


def self_half(values: Sequence[float], stage: int, level: float = LEVEL) -> float | None:
    """A control's own half-width: its mean log tok/s's interval on the first-stage variance,
    as a fraction (``e^h - 1`` of the half-width h in logs: the interval is ``e^(m ± h)``)."""
    first = [math.log(v) for v in values[:stage] if v > 0]
    if len(first) < 2 or len(first) < min(stage, len(values)):
        return None
    mean = sum(first) / len(first)
    var = sum((x - mean) ** 2 for x in first) / (len(first) - 1)
    h = t_quantile(1 - (1 - level) / 2, len(first) - 1) * math.sqrt(var / len(values))
    return math.expm1(h)


def _half(window: Sequence[float], control: Sequence[float] | None, stage: int) -> float | None:
    if control is None:
        return self_half(window, stage)
    return half_width(relative_delta(window, control, stage=stage))


def step(window: Sequence[float], control: Sequence[float] | None, rule: Rule,
         between: float = 0.0) -> Step:
    """What the rule says after a row's reps so far: ``control`` None for a control row (or a
    window whose control row has no figure: then its own mean, as a control's).

    ``between``: the noise between boots measured at the row's shape (a variance of log tok/s).
    A delta is two boots apart, so its interval is never narrower than the boots make it: where
    that part alone is past the precision no number of reps reaches it (more boots would), and
    the reps are held to what the precision leaves beside it."""
    target = rule.target(control is None)
    half = _half(window, control, rule.stage)
    if half is None:
        return Step(Progress.OFF, None, None)
    boots = 1.96 * math.sqrt(between * (1 if control is None else 2)) if between > 0 else 0.0
    boot_half = math.expm1(boots) if boots else None
    if boots and boots >= math.log1p(target):
        return Step(Progress.CANNOT, half, None, boot_half)
    if boots:
        target = math.expm1(math.sqrt(math.log1p(target) ** 2 - boots ** 2))
    if half <= target:
        return Step(Progress.REACHED, half, len(window), boot_half)
    # More reps leave the first stage's variance and (projected) the mean as they are.
    mean = math.exp(sum(math.log(v) for v in window) / len(window))
    needed = next((n for n in range(len(window) + 1, rule.max_reps + 1)
                   if (h := _half([*window, *[mean] * (n - len(window))], control, rule.stage))
                   is not None and h <= target), None)
    if len(window) >= rule.max_reps:
        return Step(Progress.CAP, half, needed, boot_half)
    return Step(Progress.MORE if needed else Progress.CANNOT, half, needed, boot_half)


def reps_needed(sigma_window: float, sigma_control: float, rule: Rule) -> tuple[int | None, int | None]:
    """The reps a control row and a window row of this noise (standard deviations of log tok/s,
    as an earlier run measured them) take under the rule: None where max_reps cannot reach it
    (then the row stops at its first stage, or at the cap)."""
    def first(sigma: float) -> list[float]:  # a first stage whose sd is exactly ``sigma``
        n = rule.stage
        ramp = [i - (n - 1) / 2 for i in range(n)]
        sd = math.sqrt(sum(x * x for x in ramp) / (n - 1))
        return [math.exp(sigma * x / sd) for x in ramp]

    def taken(s: Step) -> int | None:
        return s.needed if s.progress in (Progress.REACHED, Progress.MORE) else None

    control = first(sigma_control)
    nc = taken(step(control, None, rule))
    control += [1.0] * ((nc or rule.stage) - len(control))  # its mean: the geometric mean, 1
    return nc, taken(step(first(sigma_window), control, rule))


def coverage(sigma: float, rule: Rule, trials: int, seed: int = 1,
             sequential: bool = True) -> tuple[float, float, float]:
    """The rule on ``trials`` A/A pairs (a control row and a window row whose reps are drawn
    alike: log-normal, sd ``sigma``; the true delta is 0): the share of their intervals that
    miss 0, the window rows' mean reps, and the share that reached the precision.

    ``sequential`` False: every row keeps its first stage (fixed reps, the plain interval)."""
    rng = random.Random(f"{seed}:{sigma!r}")
    missed = reps = reached = 0

    def grow(row: list[float], control: list[float] | None) -> None:
        while sequential and step(row, control, rule).progress == Progress.MORE:
            row.append(math.exp(rng.gauss(0, sigma)))

    for _ in range(trials):
        control = [math.exp(rng.gauss(0, sigma)) for _ in range(rule.stage)]
        grow(control, None)
        window = [math.exp(rng.gauss(0, sigma)) for _ in range(rule.stage)]
        grow(window, control)
        iv = relative_delta(window, control, stage=rule.stage if sequential else None)
        assert iv is not None and iv.lo is not None and iv.hi is not None
        missed += not iv.lo <= 0 <= iv.hi
        reps += len(window)
        half = half_width(iv)
        reached += half is not None and half <= rule.precision
    return missed / trials, reps / trials, reached / trials
