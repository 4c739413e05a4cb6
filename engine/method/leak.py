"""Leak or noise: what a row's spread is made of, and so whether the row is void or noisy.

The rule (``leak.spread`` is the threshold t): a row whose spread (max - min over the mean of its
reps' tok/s) is at most t is clean. A wider row is **leak-shaped** when its lowest rep stands
alone far below the others: it is below the median of the other reps by more than t, while the
other reps agree among themselves (their own spread) within t / 2, or within a third of the low
rep's gap below them. A leaked autotune pass or a throttled rep looks so: one slow rep against
reps that agree (the campaign notes' 135 / 700 / 700; on an H200, a server stalled for 1.5 s of a
4 s rep: 1193 against 2202 and 2000, 43 % below two reps 9.6 % apart). Every other wide row is
**noise**: reps scattered evenly (1046 / 1550 / 2472), or a rep far above the rest; rerunning it
spends the GPU for nothing, so it gets more reps instead (the campaign's precision) and is
reported noisy with its interval. The margins between "far" and "agree" keep every even spread
noise: three reps spread evenly put the lowest 3/4 of the spread below the others' median and
the others 1/2 of it apart, more than a third of 3/4 and, past the threshold, more than t / 2.

With two reps the other reps are one, which agrees with itself: a low rep below the other by
more than t is leak-shaped. Below ``leak.min_concurrency`` nothing is voided as a leak (the
notes see the leak at C >= 8): a wide row there is noisy whatever its shape.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Shape(StrEnum):
    CLEAN = ""  # within the threshold
    LEAK = "leak"
    NOISE = "noise"


@dataclass(frozen=True)
class Reading:
    shape: Shape
    why: str  # how the rule read the reps ("" for a clean row)
    rep: int | None = None  # a leak-shaped row's low rep, 0-based


def spread(values: Sequence[float]) -> float:
    """(max - min) / mean; 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if mean > 0 else float("inf")


def read(values: Sequence[float], threshold: float) -> Reading:
    """The shape of a row's reps under the rule above."""
    if spread(values) <= threshold:
        return Reading(Shape.CLEAN, "")
    low = min(range(len(values)), key=lambda i: values[i])
    others = [v for i, v in enumerate(values) if i != low]
    ref = statistics.median(others)
    below = 1 - values[low] / ref if ref > 0 else 0.0
    agree, margin = spread(others), max(threshold / 2, below / 3)
    tok = f"{values[low]:.1f} tok/s"
    if below > threshold and agree <= margin:
        return Reading(Shape.LEAK, f"leak-shaped: rep {low + 1} at {tok} is {below:.0%} below the "
                                   f"median of the others ({ref:.1f}), which agree within "
                                   f"{agree:.1%} <= {margin:.1%}", low)
    if below > threshold:
        return Reading(Shape.NOISE, f"noise: the reps other than the lowest ({tok}) spread "
                                    f"{agree:.1%} > {margin:.1%} among themselves")
    return Reading(Shape.NOISE, f"noise: the lowest rep ({tok}) is only {below:.1%} below the "
                                f"median of the others ({ref:.1f})")
