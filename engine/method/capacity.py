"""Capacity at an SLA: the highest load (an open-loop rate, or a concurrency) at which stated
percentiles hold, found by a bracketing search over probes that are ordinary rows with reps.

A probe is judged rep by rep: a rep *holds* when every criterion holds over its own requests
(TTFT, TPOT or ITL at a percentile at most so many ms; or a share of its requests within the
workload's SLO at least so much), and a failed request never holds. The probe *holds* when every
rep holds, *fails* when none does, and is *mixed* otherwise: the reps disagree, so the edge is
there within the noise and the probe says neither. The search keeps the band the probes have
shown: ``lo`` the highest load shown to hold below ``hi``, the lowest load shown to fail (a probe
that holds above one that fails is noise the band keeps inside it), and probes at the geometric
middle of the widest gap in the band (mixed probes split it) until the band is within the
resolution or the probes are spent. Its answer is the band: the capacity is ``lo`` (the highest
load shown to hold), and ``hi`` says how far above it the truth may be. No interpolation: vLLM's
spline to the SLA edge was cut back for its fragility under noise (vLLM PR #35306).

Pure functions of the probes' verdicts (engine.method.sla judges a probe from its reps' records;
this module imports no statistics, so the report reads an answer without them); engine.run.measure
runs the probes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class ProbeResult(StrEnum):
    """What one probe of the search (a row at one load) found: its SLA held in every rep, in none,
    in some; or nothing usable."""

    HOLDS = "holds"
    FAILS = "fails"
    MIXED = "mixed"  # its reps disagree: the edge is within the noise here
    VOID = "void"  # no usable rep (a void or failed row): says nothing


class Found(StrEnum):
    BRACKETED = "bracketed"  # the band is within the resolution
    BUDGET = "budget"  # the probes are spent before it was
    BELOW = "below range"  # the range's low end did not hold: the capacity is below it
    ABOVE = "above range"  # the high end held: the capacity is at least it
    NONE = "no answer"  # both ends void (every request failed, say): nothing is known of the edge


@dataclass(frozen=True)
class Search:
    """The search's settings: over ``rate`` or ``concurrency``, from the range ``low``..``high``."""

    over: str
    low: float
    high: float
    resolution: float = 0.1  # the band's top over its bottom, at most 1 + this
    max_probes: int = 8

    @property
    def whole(self) -> bool:
        return self.over == "concurrency"

    def tidy(self, load: float) -> float:
        """A load as a probe is run at: a whole concurrency, a rate to three significant digits
        (its row's label keeps six)."""
        if self.whole:
            return float(max(1, round(load)))
        return float(f"{load:.3g}")


@dataclass(frozen=True)
class Answer:
    found: Found | None  # None: not over yet (next says where to probe)
    lo: float | None  # the highest load shown to hold (below the lowest shown to fail)
    hi: float | None  # the lowest load shown to fail
    mixed: tuple[float, ...]  # loads whose reps disagreed, inside the band
    next: float | None  # the next probe, or None when the search is over
    probes: int  # probes judged (void ones included)

    @property
    def capacity(self) -> float | None:
        return self.lo

    def band_text(self) -> str:
        """``holds at 2, fails at 3``: the band as its two ends."""
        lo = "nothing held" if self.lo is None else f"holds at {self.lo:g}"
        return lo + ("" if self.hi is None else f", fails at {self.hi:g}")


def step(search: Search, probes: Mapping[float, ProbeResult]) -> Answer:
    """Where the search stands after ``probes`` (load -> verdict), and the next load to probe."""
    fails = sorted(x for x, v in probes.items() if v == ProbeResult.FAILS)
    hi = fails[0] if fails else None
    holds = sorted(x for x, v in probes.items() if v == ProbeResult.HOLDS and (hi is None or x < hi))
    lo = holds[-1] if holds else None
    mixed = tuple(sorted(x for x, v in probes.items() if v == ProbeResult.MIXED
                         and (lo is None or x > lo) and (hi is None or x < hi)))
    n = len(probes)

    def answer(found: Found | None, nxt: float | None = None) -> Answer:
        return Answer(found, lo, hi, mixed, nxt, n)

    low, high = search.tidy(search.low), search.tidy(search.high)
    if low not in probes:
        return answer(None, low) if n < search.max_probes else answer(Found.BUDGET)
    if lo is None and probes[low] != ProbeResult.VOID:
        return answer(Found.BELOW)  # the low end did not hold (failed, or mixed: the edge is there)
    if hi is None and high not in probes:
        return answer(None, high) if n < search.max_probes else answer(Found.BUDGET)
    if hi is None and not mixed and probes[high] == ProbeResult.HOLDS:
        return answer(Found.ABOVE)
    if lo is None and hi is None and not mixed and probes[low] == probes[high] == ProbeResult.VOID:
        return answer(Found.NONE)  # neither end says anything: the middle would not either
    # The band: from lo (or the low end) to hi (or the high end), split by the mixed probes.
    points = [lo if lo is not None else low, *mixed, hi if hi is not None else high]
    gaps = [(b / a, a, b) for a, b in zip(points, points[1:], strict=False) if a > 0]
    ratio, a, b = max(gaps)
    if hi is not None and lo is not None and hi / lo <= 1 + search.resolution:
        return answer(Found.BRACKETED)
    nxt = search.tidy(math.sqrt(a * b))
    if nxt in probes or nxt <= a or nxt >= b:  # a concurrency gap of one: nothing left between
        return answer(Found.BRACKETED if ratio <= 1 + search.resolution or search.whole else Found.BUDGET)
    return answer(None, nxt) if n < search.max_probes else answer(Found.BUDGET)


@dataclass(frozen=True)
class Versus:
    """A window's capacity against its control's: the ratio of the two capacities minus one, the
    range the two bands allow (window's lo over control's hi, window's hi over control's lo), and
    where the bands stand: above, below, or overlapping (no decision)."""

    delta: float | None
    lo: float | None
    hi: float | None
    call: str


def versus(window: Answer, control: Answer) -> Versus:
    if window.lo is None or control.lo is None:
        return Versus(None, None, None, "no capacity on one side")
    delta = window.lo / control.lo - 1
    lo = window.lo / control.hi - 1 if control.hi else None
    hi = window.hi / control.lo - 1 if window.hi else None
    if control.hi is not None and window.lo >= control.hi:
        call = "higher: its band is above the control's"
    elif window.hi is not None and window.hi <= control.lo:
        call = "lower: its band is below the control's"
    else:
        call = "no decision: the bands overlap"
    return Versus(delta, lo, hi, call)
