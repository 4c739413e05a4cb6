"""A window row against its control: the delta with an interval that counts the noise between
boots, and the campaign's call on it, with its error rates stated.

The delta is the difference of mean log tok/s: the window's boot against the mean of its session's
control boots (the control, and the control booted again at the session's end). Its variance:

- noise between boots *measured* (engine.method.boots): ``boot_mean · (1 + 1/K)`` for the window's
  boot and the K control boots, plus whatever the window's own reps spread beyond the pooled
  within-boot variance; degrees of freedom: the boot noise's (boots - 1 per configuration booted
  more than once). The boots, not the reps, set how sure a delta can be.
- *declared* (nothing booted twice): the declared between-boot variance, taken as known, plus each
  side's reps' variance of its mean; Welch-Satterthwaite degrees of freedom over the reps' parts.
  With reps taken to a precision (engine.method.precision) each side's variance and degrees of
  freedom are its first stage's (Stein: n0 - 1), the means every rep's.

The calls, over the whole campaign (the family: every window at every class and load that has an
interval; a window listed in several sessions is one question, its sessions' deltas pooled):
- **observable effect**: the two-sided t-test's p-value, adjusted by Holm (family-wise error rate)
  or Benjamini-Hochberg (false discovery rate) across the family, is below ``error_rate``;
- **no observable effect**: shown, not presumed: two one-sided tests (TOST) put the delta inside
  ``± margin`` at ``error_rate`` (the 1 - 2·error_rate interval inside the margin);
- **undetermined**: neither; the interval is given with the sessions it would take.

scipy gives the t distribution (engine.method.delta); the corrections are a few lines here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from engine.method.boots import BootNoise
from engine.method.delta import t_cdf, t_quantile, t_sf

CORRECTION_TEXT = {"holm": "Holm (family-wise error rate)", "bh": "Benjamini-Hochberg (false discovery rate)"}


@dataclass(frozen=True)
class Rule:
    """The campaign's verdict rules (``verdict:`` in the campaign)."""

    error_rate: float  # the family-wise error rate (holm) or false discovery rate (bh) kept
    correction: str  # holm | bh
    margin: float  # |delta| under which "no observable effect" may be shown
    boot_noise: float  # the noise between boots assumed where none was measured (relative sd)
    # Deltas across stacks whose prompts were not token-identical are given all the same.
    allow_different: bool = False

    def text(self) -> str:
        return (f"{CORRECTION_TEXT[self.correction]} at {self.error_rate:g} over the campaign's "
                f"windows at each class and load (a window's sessions pooled); no observable effect "
                f"when TOST puts the delta within ±{self.margin * 100:g} %")


class Call(StrEnum):
    EFFECT = "observable effect"
    NONE = "no observable effect"
    UNDETERMINED = "undetermined"


@dataclass(frozen=True)
class Versus:
    """One window row against its session's control boots, on the log scale."""

    log_delta: float
    se: float | None  # None: no variance on either side and none between boots
    df: float
    noise: BootNoise
    reps: int  # the window's reps
    controls: int  # control boots in its session (all sessions', pooled)
    stage: int | None = None
    sessions: int = 1  # pooled over a window's sessions (:func:`pool`)

    @property
    def delta(self) -> float:
        return math.expm1(self.log_delta)

    def interval(self, level: float = 0.95) -> tuple[float, float] | None:
        if self.se is None:
            return None
        if self.se == 0:
            return self.delta, self.delta
        half = t_quantile(0.5 + level / 2, self.df) * self.se
        return math.expm1(self.log_delta - half), math.expm1(self.log_delta + half)

    def p(self) -> float | None:
        """The two-sided p-value of "no difference"."""
        if self.se is None:
            return None
        if self.se == 0:
            return 0.0 if self.log_delta else 1.0
        return 2 * t_sf(abs(self.log_delta) / self.se, self.df)

    def p_equivalent(self, margin: float) -> float | None:
        """TOST's p-value of "the delta is outside ± margin" (small: shown inside)."""
        if self.se is None:
            return None
        lo, hi = math.log1p(-margin), math.log1p(margin)
        if self.se == 0:
            return 0.0 if lo < self.log_delta < hi else 1.0
        return max(t_sf((self.log_delta - lo) / self.se, self.df),
                   t_cdf((self.log_delta - hi) / self.se, self.df))

    def sessions_needed(self, rule: Rule) -> int | None:
        """About how many sessions of this window (each with its control boots) would settle it:
        the interval narrowing as one over the root of the boots, until it excludes 0 (an
        effect) or fits inside the margin (none). None: no interval, or the delta sits on the
        margin's edge."""
        if self.se is None or self.se == 0:
            return None
        gaps = [(abs(self.log_delta), t_quantile(1 - rule.error_rate / 2, self.df))]
        edge = math.log1p(rule.margin) - abs(self.log_delta)
        if edge > 0:
            gaps.append((edge, t_quantile(1 - rule.error_rate, self.df)))
        need = [math.ceil((q * self.se / gap) ** 2) for gap, q in gaps if gap > 1e-9]
        return max(2, min(need)) if need and min(need) < 10_000 else None

    def method(self) -> str:
        where = (f"the window's boot against {self.controls} control boot"
                 f"{'s' if self.controls != 1 else ''}" if self.sessions == 1 else
                 f"the mean of {self.sessions} sessions' deltas, each the window's boot against "
                 f"its session's control boots ({self.controls} in all)")
        if self.noise.measured:
            return f"log tok/s, {where}, noise between boots measured ({self.df:g} df)"
        stein = f", Stein's first {self.stage} reps" if self.stage else ""
        return (f"log tok/s, {where}; Welch over the reps plus a declared noise between boots of "
                f"{self.noise.sd * 100:.1f} %{stein} ({self.df:.1f} df)")


def _logs(xs: Sequence[float]) -> list[float]:
    return [math.log(x) for x in xs]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def versus(window: Sequence[float], controls: Sequence[Sequence[float]], noise: BootNoise,
           stage: int | None = None) -> Versus | None:
    """The window's reps against its session's control boots' reps; None when a side has no rep
    or a rep that is not a positive rate."""
    controls = [c for c in controls if c]
    if not window or not controls or min(*window, *(x for c in controls for x in c)) <= 0:
        return None
    lw = _logs(window)
    lcs = [_logs(c) for c in controls]
    k = len(lcs)
    d = _mean(lw) - _mean([_mean(c) for c in lcs])
    first = lw[:stage] if stage else lw
    if noise.measured:
        extra = max(0.0, _var(first) - noise.within) / len(lw) if len(first) >= 2 else 0.0
        var = noise.boot_mean * (1 + 1 / k) + extra
        return Versus(d, math.sqrt(var), noise.df, noise, len(lw), k, stage)
    # Declared: the between-boot part taken as known; the reps' parts with their own df.
    parts: list[tuple[float, float]] = []
    for logs, weight, n in [(first, 1.0, len(lw))] + [
            (c[:stage] if stage else c, 1 / k ** 2, len(c)) for c in lcs]:
        if len(logs) >= 2:
            parts.append((_var(logs) * weight / n, len(logs) - 1))
        elif noise.within > 0:  # one rep: the pooled within-boot variance stands in
            parts.append((noise.within * weight / n, math.inf))
        else:
            return Versus(d, None, math.inf, noise, len(lw), k, stage)
    between = noise.between * (1 + 1 / k)
    var = between + sum(v for v, _ in parts)
    finite = sum(v * v / df for v, df in parts if df < math.inf)
    df = var * var / finite if finite > 0 else math.inf
    if stage:  # Stein: the first stage's n0 - 1, not Welch's df over it
        df = min(df, stage - 1.0)
    return Versus(d, math.sqrt(var), df, noise, len(lw), k, stage)


def pool(sessions: Sequence[Versus]) -> Versus:
    """One window's deltas in several sessions (each against its own session's control boots)
    as one: their mean, its variance the sum of theirs over the count squared. A measured noise
    between boots is one estimate for all of them: its degrees of freedom stand; declared,
    Welch-Satterthwaite over the sessions' parts."""
    if len(sessions) == 1:
        return sessions[0]
    n = len(sessions)
    first = sessions[0]
    d = sum(v.log_delta for v in sessions) / n
    if any(v.se is None for v in sessions):
        se, df = None, math.inf
    else:
        parts = [(v.se or 0.0) ** 2 / n ** 2 for v in sessions]
        var = sum(parts)
        se = math.sqrt(var)
        finite = sum(p * p / v.df for p, v in zip(parts, sessions, strict=True) if v.df < math.inf)
        df = first.df if first.noise.measured else (var * var / finite if finite > 0 else math.inf)
    return Versus(d, se, df, first.noise, sum(v.reps for v in sessions),
                  sum(v.controls for v in sessions), first.stage, n)


@dataclass(frozen=True)
class Judged:
    """A row's call within its family."""

    versus: Versus | None
    call: Call
    p_adjusted: float | None
    tests: int  # the family's size
    rule: Rule

    def why(self) -> str:
        v = self.versus
        if v is None or v.se is None:
            return "no interval (a side without reps' variance and no noise between boots)"
        lo, hi = v.interval(1 - 2 * self.rule.error_rate) or (v.delta, v.delta)
        over = f" over {v.sessions} sessions" if v.sessions > 1 else ""
        adj = (f"p {v.p():.3g}{over}, {self.rule.correction}-adjusted {self.p_adjusted:.3g} over "
               f"{self.tests}")
        if self.call == Call.EFFECT:
            return f"{adj} < {self.rule.error_rate:g}"
        if self.call == Call.NONE:
            return (f"{(1 - 2 * self.rule.error_rate) * 100:g} % interval [{lo * 100:+.1f}, "
                    f"{hi * 100:+.1f}] % inside ±{self.rule.margin * 100:g} % (TOST); {adj}")
        more = v.sessions_needed(self.rule)
        take = (f"; about {more * v.sessions} sessions of this window would settle it" if more else "")
        return f"{adj}; not shown within ±{self.rule.margin * 100:g} %{take}"


def adjust(ps: Sequence[float], correction: str) -> list[float]:
    """The p-values adjusted over the family, in their order: Holm's step-down (each, in rising
    order, times the tests not yet passed, never below the one before) or Benjamini-Hochberg's
    step-up (each times m over its rank, never above the one after); at most 1."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out = [0.0] * m
    if correction == "holm":
        running = 0.0
        for rank, i in enumerate(order):
            running = max(running, min(1.0, (m - rank) * ps[i]))
            out[i] = running
    else:
        running = 1.0
        for rank in range(m - 1, -1, -1):
            i = order[rank]
            running = min(running, m / (rank + 1) * ps[i])
            out[i] = running
    return out


def judge(family: Sequence[Versus | None], rule: Rule) -> list[Judged]:
    """Each row's call, its p-value adjusted over the family (the rows with an interval)."""
    ps = [v.p() if v is not None else None for v in family]
    tested = [i for i, p in enumerate(ps) if p is not None]
    adjusted: dict[int, float] = {}
    if tested:
        corrected = adjust([p for p in ps if p is not None], rule.correction)
        adjusted = dict(zip(tested, corrected, strict=True))
    out = []
    for i, v in enumerate(family):
        p_adj = adjusted.get(i)
        if p_adj is not None and p_adj < rule.error_rate:
            call = Call.EFFECT
        elif v is not None and (pe := v.p_equivalent(rule.margin)) is not None \
                and pe < rule.error_rate:
            call = Call.NONE
        else:
            call = Call.UNDETERMINED
        out.append(Judged(v, call, p_adj, len(tested), rule))
    return out
