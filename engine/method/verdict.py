"""A window against its control: the delta with an interval that counts the noise between boots at
its shape, and the campaign's call, with its error rates stated.

The delta (engine.method.boots): at one shape, each boot's mean log tok/s fitted as its session's
level plus its configuration's effect; a window's effect is its fitted difference from the
control within sessions, the variance the noise between boots at that shape times the design's
factor (plus whatever the window's own reps spread beyond the pooled within-boot noise), the
reference Student's t with the noise's degrees of freedom lowered for heavy tails.

The family is the campaign's windows, each asked once: "does this window change tok/s at any of
its shapes?" Its rows are then called by the closed test built on two rules (Marcus, Peritz and
Gabriel's closure): across windows Bonferroni, within a window Simes. A row is an effect when every
intersection of questions that holds it is rejected, which comes to: the row's Simes test against
the window's other rows (with as many of the window's weakest rows as make it hardest) at the
campaign's level over the number of windows not yet shown to move everywhere. A window that moves
at every shape (flash attention off) has its rows tested at about error_rate / windows, not / (windows
x shapes); one that moves at a single shape pays for its other shapes as Bonferroni would. Simes
is valid for the positively dependent shapes of one boot; the family-wise error rate is kept over
every row of the campaign.

- **observable effect**: the row's closure-adjusted p-value is below ``error_rate``
  (``correction: bh``: Benjamini-Hochberg over every row instead, the false discovery rate);
- **no observable effect**: shown, not presumed: two one-sided tests (TOST) put the delta inside
  ``± margin`` at ``error_rate`` (the 1 - 2·error_rate interval inside the margin);
- **undetermined**: neither; with the sessions it would take, at the level it is actually tested
  at.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from engine.method.boots import BootNoise, Effect, Source
from engine.method.delta import ratio_bounds, t_cdf, t_quantile, t_sf

CORRECTION_TEXT = {"holm": "closed test: Bonferroni across windows, Simes across a window's shapes "
                           "(family-wise error rate)",
                   "bh": "Benjamini-Hochberg over every window row (false discovery rate)"}


@dataclass(frozen=True)
class Rule:
    """The campaign's verdict rules (``verdict:`` in the campaign)."""

    error_rate: float  # the family-wise error rate (holm) or false discovery rate (bh) kept
    correction: str  # holm | bh
    margin: float  # |delta| under which "no observable effect" may be shown
    boot_noise: float | None  # the noise between boots declared for where none was measured
    # Deltas across stacks whose prompts were not token-identical are given all the same.
    allow_different: bool = False
    # Boots of the undecided windows added until each is decided or the budget ends (the error
    # rate spent over the looks in proportion to the budget used: engine.record.looks).
    until_decided: bool = False
    max_boots: int | None = None
    max_minutes: float | None = None
    # The level of one look at the evidence: its share of error_rate (None: the whole of it).
    level: float | None = None

    @property
    def alpha(self) -> float:
        """The level the calls are made at now."""
        return self.error_rate if self.level is None else self.level

    def text(self) -> str:
        looks = ("; boots added until decided, the error rate spent over the looks in proportion "
                 "to the budget used" if self.until_decided else "")
        return (f"{CORRECTION_TEXT[self.correction]} at {self.error_rate:g}, each window asked once "
                f"over its shapes; no observable effect when TOST puts the delta within "
                f"±{self.margin * 100:g} %{looks}")


class Call(StrEnum):
    EFFECT = "observable effect"
    NONE = "no observable effect"
    UNDETERMINED = "undetermined"


@dataclass(frozen=True)
class Versus:
    """A window against its control at one shape, on the log scale."""

    log_delta: float
    se: float | None  # None: no noise between boots measured or declared
    df: float  # of the reference t (heavy tails counted)
    noise: BootNoise
    reps: int  # the window's reps
    controls: int  # control boots it is against
    sessions: int = 1

    @property
    def delta(self) -> float:
        return math.expm1(self.log_delta)

    def interval(self, level: float = 0.95) -> tuple[float, float] | None:
        if self.se is None:
            return None
        if self.se == 0:
            return self.delta, self.delta
        half = t_quantile(0.5 + level / 2, self.df) * self.se
        return ratio_bounds(self.log_delta, half)

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

    def sessions_needed(self, level: float, margin: float, equivalence: float) -> int | None:
        """About how many sessions of this window (each with its control boots) would settle it:
        the interval narrowing as one over the root of the sessions until the delta is called at
        ``level`` (the level the row is actually tested at) or shown within the margin at
        ``equivalence``. None: no interval, or the delta sits on the margin's edge."""
        if self.se is None or self.se == 0 or not 0 < level < 1 or not 0 < equivalence < 1:
            return None
        gaps = [(abs(self.log_delta), t_quantile(1 - level / 2, self.df))]
        edge = math.log1p(margin) - abs(self.log_delta)
        if edge > 0:
            gaps.append((edge, t_quantile(1 - equivalence, self.df)))
        need = [math.ceil(self.sessions * (q * self.se / gap) ** 2) for gap, q in gaps
                if gap > 1e-9 and math.isfinite(q) and (q * self.se / gap) ** 2 < 10_000]
        return max(self.sessions + 1, min(need)) if need and min(need) < 10_000 else None

    def method(self) -> str:
        where = (f"the window's boot against {self.controls} control boot"
                 f"{'s' if self.controls != 1 else ''} of its session" if self.sessions == 1 else
                 f"the window's boots in {self.sessions} sessions, each against its session's control "
                 f"boots ({self.controls} in all), fitted with the session as a block")
        return f"log tok/s, {where}; noise between boots {self.noise.how()}"


def from_effect(effect: Effect, noise: BootNoise, controls: int) -> Versus:
    """A window's fitted effect at one shape as a delta with its variance."""
    if not noise.usable:
        return Versus(effect.log_delta, None, math.inf, noise, effect.reps, controls, effect.sessions)
    var = noise.boot_mean * effect.factor + effect.extra
    return Versus(effect.log_delta, math.sqrt(max(var, 0.0)), noise.nu, noise, effect.reps, controls,
                  effect.sessions)


def _logs(xs: Sequence[float]) -> list[float]:
    return [math.log(x) for x in xs]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def versus(window: Sequence[float], controls: Sequence[Sequence[float]], noise: BootNoise) -> Versus | None:
    """One boot of a window against control boots (each a boot's reps) under a given noise between
    boots: a row's own delta in its session, a comparison across runs, a control against an
    earlier one. None when a side has no rep or a rep that is not a positive rate."""
    controls = [c for c in controls if c]
    if not window or not controls or min(*window, *(x for c in controls for x in c)) <= 0:
        return None
    lw = _logs(window)
    k = len(controls)
    d = _mean(lw) - _mean([_mean(_logs(c)) for c in controls])
    if not noise.usable:
        return Versus(d, None, math.inf, noise, len(lw), k)
    extra = max(0.0, _var(lw) - noise.within) / len(lw) if len(lw) >= 2 else 0.0
    var = noise.boot_mean * (1 + 1 / k) + extra
    return Versus(d, math.sqrt(var), noise.nu, noise, len(lw), k)


@dataclass(frozen=True)
class Judged:
    """A row's call within the campaign's family."""

    versus: Versus | None
    call: Call
    p_adjusted: float | None
    windows: int  # the family's size: windows asked
    rule: Rule
    level: float | None = None  # the level this row is tested at now (its step of the closure)
    decided: tuple[int, str] | None = None  # boots added until decided: (the look, its words)

    def why(self) -> str:
        if self.decided is not None:
            return f"decided at look {self.decided[0]}: {self.decided[1]}"
        v = self.versus
        if v is None or v.se is None:
            return ("no interval: " + v.noise.how()) if v is not None else "no interval"
        a = self.rule.alpha
        at = (f"{a:.3g} (this look's share of {self.rule.error_rate:g})" if self.rule.level is not None
              else f"{a:g}")
        lo, hi = v.interval(1 - 2 * a) or (v.delta, v.delta)
        over = f" over {v.sessions} sessions" if v.sessions > 1 else ""
        adj = (f"p {v.p():.3g}{over}, adjusted {self.p_adjusted:.3g} over {self.windows} "
               f"window{'s' if self.windows != 1 else ''}")
        declared = "; rests on the declared noise between boots" if v.noise.source == Source.DECLARED else ""
        if self.call == Call.EFFECT:
            return f"{adj} <= {at}{declared}"
        if self.call == Call.NONE:
            return (f"{(1 - 2 * a) * 100:.3g} % interval [{lo * 100:+.1f}, {hi * 100:+.1f}] % inside "
                    f"±{self.rule.margin * 100:g} % (TOST at {at}){declared}")
        ci = v.interval()
        excludes = ci is not None and (ci[0] > 0 or ci[1] < 0)
        head = (f"not called: {adj} > {at}" if excludes else
                f"{adj}; not shown within ±{self.rule.margin * 100:g} %")
        more = v.sessions_needed(self.level or a, self.rule.margin, a)
        take = f"; about {more} sessions of this window would settle it" if more else ""
        return f"{head}{take}{declared}"


@dataclass(frozen=True)
class WindowJudged:
    """A window's one question: does it change tok/s at any of its shapes?"""

    call: Call  # effect: the question rejected; none: every row shown within the margin
    p_adjusted: float | None
    rows: int  # its rows with an interval
    effects: int  # of them called an effect
    none: int  # of them shown within the margin
    decided: int | None = None  # boots added until decided: the look that decided it

    def text(self) -> str:
        if self.call == Call.EFFECT:
            where = (f"at {self.effects} of {self.rows} shapes" if self.effects else
                     f"somewhere among its {self.rows} shapes, none alone")
            return f"observable effect {where} (adjusted p {self.p_adjusted:.3g})"
        if self.call == Call.NONE:
            return f"no observable effect at any of its {self.rows} shapes"
        return (f"undetermined ({self.none} of {self.rows} shapes shown within the margin)"
                if self.rows else "undetermined (no shape with an interval)")


S = TypeVar("S", bound=Hashable)  # a shape's key


@dataclass(frozen=True)
class Verdicts(Generic[S]):
    rows: dict[tuple[str, S], Judged]
    windows: dict[str, WindowJudged]


def simes(ps: Sequence[float]) -> float:
    """Simes' combined p-value of a set of p-values."""
    s = sorted(ps)
    return min(1.0, min(len(s) * p / (i + 1) for i, p in enumerate(s)))


def _hardest(p: float, others: Sequence[float]) -> float:
    """The largest Simes p-value of a set that holds ``p`` and any of ``others`` (the closure's
    hardest intersection within the window: the row with the window's weakest rows)."""
    rest = sorted(others, reverse=True)
    return max(simes([p, *rest[:t]]) for t in range(len(rest) + 1))


class _Closure:
    """Bonferroni across windows (their weakest rows: a window hides an intersection at level a
    when one of its rows is above a), Simes within."""

    def __init__(self, weakest: Mapping[str, float]) -> None:
        self.weakest = weakest
        self.sorted = sorted(weakest.values())
        self.windows = len(weakest)
        # Where step() can change: a window stops hiding at level alpha / m when alpha = m * its p.
        self.jumps = sorted({m * p for p in self.sorted for m in range(1, self.windows + 1)
                             if m * p <= 1.0})

    def hiding(self, window: str, level: float) -> int:
        """The windows other than ``window`` that hide at ``level``."""
        n = len(self.sorted) - bisect.bisect_right(self.sorted, level)
        return n - (self.weakest[window] > level)

    def step(self, window: str, alpha: float) -> int:
        """The most windows an intersection with this window's rows can span unrejected at alpha."""
        for m in range(self.windows, 0, -1):
            if self.hiding(window, alpha / m) >= m - 1:
                return m
        return 1

    def rejects(self, window: str, h: float, alpha: float) -> bool:
        """A statistic h (a Simes p of the window's rows) rejected at alpha."""
        return h * self.step(window, alpha) <= alpha

    def adjusted(self, window: str, h: float) -> float:
        """The least alpha at which h is rejected (its adjusted p-value; 1 at most). Rejection is
        monotone in alpha, and the least alpha is h times a step or a point where step() changes."""
        best = 1.0
        for candidates in ([h * m for m in range(1, self.windows + 1) if h * m <= 1.0], self.jumps):
            lo, hi = 0, len(candidates)
            while lo < hi:  # the first candidate that rejects
                mid = (lo + hi) // 2
                if self.rejects(window, h, candidates[mid]):
                    hi = mid
                else:
                    lo = mid + 1
            if lo < len(candidates):
                best = min(best, candidates[lo])
        return best


def judge(family: Mapping[str, Mapping[S, Versus | None]], rule: Rule) -> Verdicts[S]:
    """Each window's question and each of its rows' calls (``family``: window -> shape -> its
    delta, None where it has none)."""
    ps = {w: {s: p for s, v in shapes.items() if v is not None and (p := v.p()) is not None}
          for w, shapes in family.items()}
    asked = {w: p for w, p in ps.items() if p}
    adjusted: dict[tuple[str, S], float] = {}
    window_p: dict[str, float] = {}
    levels: dict[str, float] = {}
    if rule.correction == "bh":
        keys = [(w, s) for w, rows in asked.items() for s in rows]
        for key, p in zip(keys, adjust([asked[w][s] for w, s in keys], "bh"), strict=True):
            adjusted[key] = p
        for w, rows in asked.items():
            window_p[w] = min(adjusted[(w, s)] for s in rows)
            levels[w] = rule.alpha
    else:
        closure = _Closure({w: max(rows.values()) for w, rows in asked.items()})
        for w, rows in asked.items():
            window_p[w] = closure.adjusted(w, simes(list(rows.values())))
            levels[w] = rule.alpha / closure.step(w, rule.alpha)
            for s, p in rows.items():
                others = [q for t, q in rows.items() if t != s]
                adjusted[(w, s)] = max(window_p[w], closure.adjusted(w, _hardest(p, others)))
    out: dict[tuple[str, S], Judged] = {}
    windows: dict[str, WindowJudged] = {}
    for w, shapes in family.items():
        effects = none = tested = 0
        for s, v in shapes.items():
            p_adj = adjusted.get((w, s))
            if p_adj is not None and p_adj <= rule.alpha:
                call = Call.EFFECT
            elif v is not None and (pe := v.p_equivalent(rule.margin)) is not None \
                    and pe < rule.alpha:
                call = Call.NONE
            else:
                call = Call.UNDETERMINED
            tested += p_adj is not None
            effects += call == Call.EFFECT
            none += call == Call.NONE
            out[(w, s)] = Judged(v, call, p_adj, len(asked), rule, levels.get(w))
        wp = window_p.get(w)
        wcall = (Call.EFFECT if wp is not None and wp <= rule.alpha else
                 Call.NONE if tested and none == len(shapes) else Call.UNDETERMINED)
        windows[w] = WindowJudged(wcall, wp, tested, effects, none)
    return Verdicts(out, windows)


def judge_one(v: Versus | None, rule: Rule) -> Judged:
    """One comparison on its own (no family): a run's row against another run's, a control against
    an earlier session's."""
    return judge({"": {"": v}}, rule).rows[("", "")]


def adjust(ps: Sequence[float], correction: str) -> list[float]:
    """The p-values adjusted over a flat family, in their order: Holm's step-down (each, in rising
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
