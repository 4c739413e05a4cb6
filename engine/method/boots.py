"""The noise between boots, per shape, with the session as a block.

Within one boot a row's reps agree far better than two boots of the same server do (on an H200:
C8 reps within 3-14 % of each other, the C8 row 1146 tok/s one boot and 1352 the next), and the
noise differs by shape: on an H100 the prose C8 row moved 1.5 % across four control boots while
code C8 moved 25 %. A delta between a window and its control is a difference of boots, so its
interval counts the variance of a boot's mean at its own shape, never a pool over classes.

The boot is the unit. At one shape (a class at a load), each boot's mean log tok/s is fitted by
least squares as a session's level plus its configuration's effect (the control's is 0): a
two-way additive model whose blocks are the sessions. A shift between sessions is the block's,
not noise: every delta is taken within a session. The residuals measure the variance of a boot's
mean (``boot_mean``: the server moving between boots plus the reps' share of it) with the
residual degrees of freedom: each control boot beyond a session's first, and each session a
window is booted in beyond its first. ``within`` is the reps' own variance inside a boot, pooled.

Heavy tails: boot noise is not Gaussian (a boot now and then lands far off). A t statistic with
few degrees of freedom and a single window boot in its numerator over-calls at the small levels a
campaign's correction tests at. The reference distribution's degrees of freedom (``nu``) are
lowered, for the run's own design, until Student's t's 0.1 % two-sided tail holds the statistic
when boot noise is as heavy-tailed as a t with 3 degrees of freedom (simulated; seeded, so the
same boots always give the same answer).

Where a shape has no residual degrees of freedom (nothing booted twice in one session, no window
in two sessions), an earlier run's noise at the same shape (``--baseline``) stands in, and says
so; failing that the campaign's declared ``verdict.boot_noise`` if it declares one, and says so;
failing that there is no interval and nothing is called.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where a fit runs: the console starts without it
    import numpy as np

# The control's configuration name in a fit: every control boot of a session is one of them.
CONTROL_CONFIG = "control"
TAIL_DF = 3  # the heavy tail the reference holds: boot noise distributed as Student's t with 3 df
TAIL_LEVEL = 0.001  # two-sided: the level at which the reference matches the heavy tail
TAIL_DRAWS = 40_000
FULL_SIMULATION = 64  # boots at a shape past which the tail is simulated in its numerator alone
LARGE_TOP = 32  # ... its weights drawn one by one; the rest as one Gaussian


class Source(StrEnum):
    MEASURED = "measured"  # from this run's own boots
    BASELINE = "baseline"  # an earlier run's, at the same shape, pooled with this run's if any
    DECLARED = "declared"  # the campaign's verdict.boot_noise: nothing measured
    NONE = "none"  # nothing measured, nothing declared: no interval


@dataclass(frozen=True)
class Boot:
    """One boot's reps at one shape."""

    session: str  # the block: deltas are taken within one
    config: str  # what makes boots replicates: CONTROL_CONFIG for every control boot, else the window
    reps: tuple[float, ...]  # tok/s, each > 0


@dataclass(frozen=True)
class BootNoise:
    """The noise between boots at one shape, on the log scale (a variance of log tok/s)."""

    boot_mean: float  # the variance of one boot's mean: what a delta's interval counts per boot
    within: float  # the pooled variance of reps within a boot (0: none had two reps)
    df: float  # degrees of freedom of boot_mean (inf: declared, taken as known; 0: none)
    nu: float  # degrees of freedom of the reference t: df, lowered for heavy tails
    boots: int  # boots fitted
    sessions: int
    source: Source
    reps: float = 3.0  # a boot's reps (harmonic mean): the reps' share of boot_mean is within / reps
    baseline: str = ""  # the earlier run whose noise stands in or is pooled
    baseline_df: float = 0.0

    @property
    def measured(self) -> bool:
        return self.source in (Source.MEASURED, Source.BASELINE)

    @property
    def usable(self) -> bool:
        return self.source != Source.NONE and self.boot_mean >= 0

    @property
    def between(self) -> float:
        """Its part beyond the reps' own noise (>= 0): the server moving between boots."""
        return max(0.0, self.boot_mean - self.within / self.reps)

    @property
    def sd(self) -> float:
        """The variance of a boot's mean as a relative figure (0.05: a boot moves by about 5 %)."""
        return math.expm1(math.sqrt(max(self.boot_mean, 0.0)))

    def how(self) -> str:
        if self.source == Source.NONE:
            return ("not measured: nothing booted twice in one session and no window in two "
                    "sessions at this shape (a second control boot, a second session or --baseline "
                    "measures it)")
        if self.source == Source.DECLARED:
            return (f"declared {math.expm1(math.sqrt(self.between)) * 100:.1f} % (verdict.boot_noise): "
                    "nothing booted twice; "
                    "every call at this shape rests on that value")
        tails = f", t df {self.nu:.1f} for heavy tails" if self.nu < self.df else ""
        here = (f"{self.boots} boots in {self.sessions} session{'s' if self.sessions != 1 else ''}, "
                f"{self.df - self.baseline_df:g} df")
        if self.source == Source.BASELINE:
            there = f"{self.baseline} ({self.baseline_df:g} df)"
            mine = f"{here} here and " if self.df > self.baseline_df else ""
            return f"measured: {mine}from the baseline run {there}{tails}"
        return f"measured: {here}{tails}"

    def with_baseline(self, earlier: BootNoise | None, name: str) -> BootNoise:
        """This run's noise pooled with an earlier run's at the same shape (by their degrees of
        freedom); the earlier one alone where this run measured none."""
        if earlier is None or not earlier.measured or earlier.df <= 0 or not math.isfinite(earlier.df):
            return self
        mine = self.df if self.source == Source.MEASURED else 0.0
        df = mine + earlier.df
        pooled = ((self.boot_mean * mine if mine else 0.0) + earlier.boot_mean * earlier.df) / df
        nu = earlier.nu if mine == 0 else min(df, self.nu + earlier.nu)
        return BootNoise(pooled, self.within or earlier.within, df, nu, self.boots, self.sessions,
                         Source.BASELINE, self.reps, name, earlier.df)


@dataclass(frozen=True)
class Effect:
    """A configuration against the control at one shape: the fitted log delta and what its
    variance is made of."""

    log_delta: float
    factor: float  # Var(log_delta) = boot_mean * factor (+ extra)
    extra: float  # the configuration's reps' own variance beyond the pooled within, over its reps
    boots: int
    sessions: int
    reps: int  # every rep of its boots


@dataclass(frozen=True)
class Fit:
    """One shape's fit: its noise and each window's effect against the control."""

    noise: BootNoise
    effects: dict[str, Effect] = field(default_factory=dict)


def _log_means(boots: Sequence[Boot]) -> list[float]:
    return [sum(math.log(x) for x in b.reps) / len(b.reps) for b in boots]


def within(boots: Sequence[Boot]) -> tuple[float, float]:
    """The pooled within-boot variance of log tok/s and its degrees of freedom (0, 0 where no
    boot has two reps)."""
    num = den = 0.0
    for b in boots:
        if len(b.reps) >= 2:
            logs = [math.log(x) for x in b.reps]
            m = sum(logs) / len(logs)
            num += sum((x - m) ** 2 for x in logs)
            den += len(logs) - 1
    return (num / den, den) if den else (0.0, 0.0)


def _own_within(boots: Sequence[Boot]) -> float | None:
    v, df = within(boots)
    return v if df else None


def fit(boots: Sequence[Boot], declared_sd: float | None = None) -> Fit:
    """The two-way fit at one shape (any order of boots); a configuration whose effect the boots do
    not identify (never in a session with a control boot, or with a session that links to one)
    gets none."""
    boots = [b for b in boots if b.reps and min(b.reps) > 0]
    w, _ = within(boots)
    reps = [len(b.reps) for b in boots]
    harmonic = len(reps) / sum(1 / n for n in reps) if reps else 3.0
    sessions = sorted({b.session for b in boots})
    configs = sorted({b.config for b in boots if b.config != CONTROL_CONFIG})
    if not boots or not any(b.config == CONTROL_CONFIG for b in boots):
        return Fit(_unmeasured(w, harmonic, len(boots), len(sessions), declared_sd))
    import numpy as np

    x = np.zeros((len(boots), len(sessions) + len(configs)))
    for i, b in enumerate(boots):
        x[i, sessions.index(b.session)] = 1.0
        if b.config != CONTROL_CONFIG:
            x[i, len(sessions) + configs.index(b.config)] = 1.0
    y = np.array(_log_means(boots))
    pinv, rank, cov, identified = _design(x.tobytes(), x.shape)
    beta = pinv @ y
    df = len(boots) - rank
    resid = y - x @ beta
    if df > 0:
        noise = BootNoise(float(resid @ resid) / df, w, float(df), 0.0, len(boots), len(sessions),
                          Source.MEASURED, harmonic)
        noise = _with_tails(noise, x, len(sessions))
    else:
        noise = _unmeasured(w, harmonic, len(boots), len(sessions), declared_sd)
    effects: dict[str, Effect] = {}
    for i, config in enumerate(configs):
        j = len(sessions) + i
        if not identified[j]:
            continue
        mine = [b for b in boots if b.config == config]
        own = _own_within(mine)
        n = sum(len(b.reps) for b in mine)
        extra = max(0.0, own - w) / n if own is not None else 0.0
        effects[config] = Effect(float(beta[j]), float(cov[j]), extra, len(mine),
                                 len({b.session for b in mine}), n)
    return Fit(noise, effects)


@functools.lru_cache(maxsize=64)
def _design(data: bytes, shape: tuple[int, ...]) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """A design's pseudo-inverse, rank, the diagonal of (X'X)^+ (Var(beta) = boot_mean times it)
    and which of its effects the boots identify, from one SVD: a campaign's shapes mostly share
    one design, and a day-long run's has hundreds of boots."""
    import numpy as np

    x = np.frombuffer(data).reshape(shape)
    u, s, vt = np.linalg.svd(x, full_matrices=False)
    keep = s > s.max(initial=0.0) * max(shape) * np.finfo(float).eps
    inv = np.where(keep, 1 / np.where(keep, s, 1.0), 0.0)
    pinv = (vt.T * inv) @ u.T
    cov = ((vt.T * inv) ** 2).sum(axis=1)
    identified = np.abs(pinv @ x - np.eye(shape[1])).max(axis=0) < 1e-8
    return pinv, int(keep.sum()), cov, identified


def _unmeasured(w: float, reps: float, boots: int, sessions: int, declared_sd: float | None) -> BootNoise:
    if declared_sd is None:
        return unmeasured(w, reps, boots, sessions)
    return declared(declared_sd, w, reps, boots, sessions)


def unmeasured(w: float = 0.0, reps: float = 3.0, boots: int = 0, sessions: int = 0) -> BootNoise:
    """No noise between boots: nothing measured, nothing declared (no interval)."""
    return BootNoise(0.0, w, 0.0, 0.0, boots, sessions, Source.NONE, reps)


def declared(sd: float, w: float = 0.0, reps: float = 3.0, boots: int = 0, sessions: int = 0) -> BootNoise:
    """The campaign's declared noise between boots (a relative sd), taken as known."""
    between = math.log1p(sd) ** 2
    return BootNoise(between + w / reps, w, math.inf, math.inf, boots, sessions, Source.DECLARED, reps)


def _with_tails(noise: BootNoise, x: np.ndarray, blocks: int) -> BootNoise:
    nu = _tail_df(x.tobytes(), x.shape, blocks)
    return BootNoise(noise.boot_mean, noise.within, noise.df, min(noise.df, nu), noise.boots,
                     noise.sessions, noise.source, noise.reps)


@functools.lru_cache(maxsize=256)
def _tail_df(data: bytes, shape: tuple[int, ...], blocks: int) -> float:
    """The degrees of freedom of the Student's t whose TAIL_LEVEL two-sided quantile is the
    heaviest of the design's window statistics under t3 boot noise (a design: its matrix, its
    first ``blocks`` columns the sessions')."""
    import numpy as np

    x = np.frombuffer(data).reshape(shape)
    pinv, rank, cov, _ = _design(data, shape)
    df = shape[0] - rank
    if shape[0] > FULL_SIMULATION:
        return _tail_df_large(pinv, df, blocks)
    e = np.stack([_tail_draws(i) for i in range(shape[0])])
    beta = pinv @ e
    resid = e - x @ beta
    s2 = np.maximum((resid * resid).sum(axis=0) / df, 1e-300)
    k = int((1 - TAIL_LEVEL) * TAIL_DRAWS)
    worst = math.inf
    for j in range(blocks, shape[1]):
        if cov[j] <= 1e-12:
            continue
        q = float(np.partition(np.abs(beta[j]) / np.sqrt(s2 * cov[j]), k)[k])
        worst = min(worst, _df_for(q, df))
    return worst if math.isfinite(worst) else float(df)


def _tail_df_large(pinv: np.ndarray, df: int, blocks: int) -> float:
    """A large design (a day-long run: hundreds of boots at a shape), where simulating every
    boot's draw costs seconds: its noise's estimate is near exact at so many degrees of freedom,
    so the window statistic's heavy tail is its numerator's, a weighted sum of t3 draws. The most
    concentrated window's largest weights are drawn as t3 and the rest as one Gaussian of their
    variance; the estimate's own spread is the t's of the design's degrees of freedom, applied as
    a factor. Its quantile gives the degrees of freedom as for a small design."""
    import numpy as np
    from scipy import special

    rows = pinv[blocks:]
    norms = np.sqrt((rows * rows).sum(axis=1))
    ok = norms > 1e-9
    if not ok.any():
        return float(df)
    conc = np.where(ok, np.abs(rows).max(axis=1) / np.where(ok, norms, 1.0), 0.0)
    w = rows[int(np.argmax(conc))] / norms[int(np.argmax(conc))]
    order = np.argsort(-np.abs(w))
    top, rest = w[order[:LARGE_TOP]], w[order[LARGE_TOP:]]
    # t3 over the root of 3: each draw's sd is one, as the Gaussian rest's
    draws = np.stack([_tail_draws(i) for i in range(len(top))]) / math.sqrt(TAIL_DF)
    rng = np.random.default_rng((20261207, 1 << 20))
    z = top @ draws + rng.standard_normal(TAIL_DRAWS) * math.sqrt(float(rest @ rest))
    k = int((1 - TAIL_LEVEL) * TAIL_DRAWS)
    q = float(np.partition(np.abs(z), k)[k])
    p = 1 - TAIL_LEVEL / 2
    q *= float(special.stdtrit(df, p)) / float(special.ndtri(p))  # the estimate's spread
    return min(float(df), _df_for(q, df))


@functools.lru_cache(maxsize=FULL_SIMULATION)
def _tail_draws(row: int) -> np.ndarray:
    """One boot's t3 draws, seeded by its row alone: every design reads the same draws for its
    i-th boot, whatever else was simulated before it."""
    import numpy as np

    return np.random.default_rng((20261207, row)).standard_t(TAIL_DF, size=TAIL_DRAWS)


def _df_for(q: float, df: float) -> float:
    """The degrees of freedom (at most df) at which Student's t's TAIL_LEVEL quantile is q."""
    from scipy import special  # lazy: the console starts without scipy's import time

    p = 1 - TAIL_LEVEL / 2
    if float(special.stdtrit(df, p)) >= q:
        return df
    lo, hi = 0.2, df
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(special.stdtrit(mid, p)) > q else (lo, mid)
    return (lo + hi) / 2
