"""The noise between boots: how far the same server moves from one boot to the next.

Within one boot a row's reps agree far better than two boots of the same server do (seen on an
H200: C8 reps within 3-14 % of each other, the C8 row 1146 tok/s one boot and 1352 the next). A
delta between a window and its control is a difference of two boots, so its interval must count
the variance of a boot's mean, not only of its reps.

Measured where the same configuration was booted more than once on one place: the control and
the control booted again at the session's end (``control_position: both``), each session's
control, a window listed in several sessions. Per load, on the log of each rep's tok/s, a one-way
random-effects analysis by the method of moments: within a group (place, configuration, class)
the boots' means vary by ``boot_mean`` (between-boot variance plus the reps' share of it); pooled
over the groups with their degrees of freedom (boots - 1 each). Where nothing was booted twice
the campaign's declared value (``verdict.boot_noise``) stands in, and the figure says so: never
zero in silence.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Boot:
    """One boot's reps of one shape: ``group`` names what makes boots replicates of each other
    (the place, the configuration, the class)."""

    group: Hashable
    reps: tuple[float, ...]  # tok/s, each > 0


@dataclass(frozen=True)
class BootNoise:
    """The noise between boots at one load, on the log scale (a variance of log tok/s)."""

    boot_mean: float  # the variance of one boot's mean: what a delta's interval counts per boot
    between: float  # its part beyond the reps' own noise (>= 0): the server moving between boots
    within: float  # the pooled variance of reps within a boot (0: none had two reps)
    df: float  # degrees of freedom of boot_mean (inf: declared, taken as known)
    boots: int  # boots in the groups that were booted more than once
    groups: int
    measured: bool

    @property
    def sd(self) -> float:
        """The between-boot noise as a relative figure (0.05: a boot moves by about 5 %)."""
        return math.expm1(math.sqrt(self.between))

    def how(self) -> str:
        if not self.measured:
            return f"declared {self.sd * 100:.1f} % (verdict.boot_noise): no configuration booted twice"
        return (f"measured: {self.boots} boots in {self.groups} group{'s' if self.groups != 1 else ''} "
                f"(a configuration and class booted more than once), {self.df:g} df")


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def within(boots: Sequence[Boot]) -> float:
    """The pooled within-boot variance of log tok/s (0 where no boot has two reps)."""
    num = den = 0.0
    for b in boots:
        if len(b.reps) >= 2:
            logs = [math.log(x) for x in b.reps]
            num += (len(logs) - 1) * _var(logs)
            den += len(logs) - 1
    return num / den if den else 0.0


def measure(boots: Sequence[Boot], declared_sd: float) -> BootNoise:
    """The noise between boots from every boot of one load (any order, any groups)."""
    boots = [b for b in boots if b.reps and min(b.reps) > 0]
    w = within(boots)
    groups: dict[Hashable, list[Boot]] = {}
    for b in boots:
        groups.setdefault(b.group, []).append(b)
    twice = [g for g in groups.values() if len(g) >= 2]
    num = df = 0.0
    reps: list[int] = []
    for g in twice:
        means = [_mean([math.log(x) for x in b.reps]) for b in g]
        num += (len(g) - 1) * _var(means)
        df += len(g) - 1
        reps += [len(b.reps) for b in g]
    if not df:
        return declared(declared_sd, w, reps=3)
    boot_mean = num / df
    harmonic = len(reps) / sum(1 / n for n in reps)
    return BootNoise(boot_mean, max(0.0, boot_mean - w / harmonic), w, df,
                     sum(len(g) for g in twice), len(twice), True)


def declared(sd: float, w: float = 0.0, reps: int = 3) -> BootNoise:
    """The campaign's declared noise between boots (a relative sd), taken as known."""
    between = math.log1p(sd) ** 2
    return BootNoise(between + w / reps, between, w, math.inf, 0, 0, False)
