"""A rep's steady window: the part of it where the load is what the shape says, and its tok/s.

A rep's whole-rep tok/s weighs the ramp (workers starting, every prompt in prefill at once) and
the tail (the last requests running with fewer than C in flight) as much as the load it means to
measure. The steady window leaves both out, from the per-request records the receipt keeps:

- closed loop (C workers): from the moment every one of the C workers has its first token back
  to the moment the first worker ends its last request; in between all C requests are in flight
  (a worker sends its next request the moment its last one ends).
- open loop (arrivals at a rate): from one median request duration after the first arrival (the
  arrivals of those first inter-arrival times have filled the server to its level, Little's law's
  rate x duration) to the last arrival (after it the in-flight requests only drain).

Tokens are placed in time by their chunks: the first at the request's first token, the next ones
``gaps_ms`` apart, a request's tokens shared evenly over its chunks (a receipt without gaps: its
tokens evenly from first token to end). The window's tok/s is the tokens placed inside it over
its length. Ramp and tail are the seconds before and after it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def window(records: Sequence[Mapping[str, Any]], concurrency: int) -> Window | None:
    """The steady window of one rep, or None when it has none (fewer workers than C ever ran, or
    the ramp and the tail meet)."""
    timed = [r for r in records if r.get("start") is not None and r.get("end") is not None]
    if not timed:
        return None
    if concurrency:
        return _closed(timed, concurrency)
    return _open(timed)


def _closed(records: Sequence[Mapping[str, Any]], concurrency: int) -> Window | None:
    by_worker: dict[int, list[Mapping[str, Any]]] = {}
    for r in records:
        by_worker.setdefault(int(r.get("worker", -1)), []).append(r)
    by_worker.pop(-1, None)
    if len(by_worker) < concurrency:
        return None
    # A worker whose first request failed before a token: it was in flight until that end.
    started = max(min(r.get("first_token") or r["end"] for r in rs) for rs in by_worker.values())
    ended = min(max(r["end"] for r in rs) for rs in by_worker.values())
    return Window(started, ended) if ended > started else None


def _open(records: Sequence[Mapping[str, Any]]) -> Window | None:
    first = min(r["start"] for r in records)
    durations = [r["end"] - r["start"] for r in records if not r.get("error")]
    if not durations:
        return None
    started = first + statistics.median(durations)
    ended = max(r["start"] for r in records)
    return Window(started, ended) if ended > started else None


def token_times(r: Mapping[str, Any]) -> tuple[list[float], float]:
    """A finished request's chunk times and the tokens each carries."""
    n = int(r.get("completion_tokens") or 0)
    first = r.get("first_token")
    if not n or first is None:
        return [], 0.0
    gaps = r.get("gaps_ms")
    if gaps is None:  # an older receipt: its tokens evenly from first token to end
        k = n
        step = (r["end"] - first) / (k - 1) if k > 1 else 0.0
        return [first + i * step for i in range(k)], 1.0
    times, t = [first], first
    for g in gaps:
        t += g / 1000
        times.append(t)
    return times, n / len(times)


def tokens_in(records: Sequence[Mapping[str, Any]], w: Window) -> float:
    total = 0.0
    for r in records:
        if r.get("error"):
            continue
        times, each = token_times(r)
        total += each * sum(1 for t in times if w.start <= t <= w.end)
    return total


def figures(records: Sequence[Mapping[str, Any]], concurrency: int) -> dict[str, float | None]:
    """One rep's steady tok/s and its window's seconds, with the ramp's and the tail's (all None
    when the rep has no steady window)."""
    w = window(records, concurrency)
    if w is None:
        return {"steady_tok_s": None, "steady_s": None, "ramp_s": None, "tail_s": None}
    first = min(r["start"] for r in records if r.get("start") is not None)
    last = max(r["end"] for r in records if r.get("end") is not None)
    return {"steady_tok_s": round(tokens_in(records, w) / w.seconds, 3),
            "steady_s": round(w.seconds, 6), "ramp_s": round(w.start - first, 6),
            "tail_s": round(last - w.end, 6)}


def too_short(steady_s: float | None, ramp_s: float | None, tail_s: float | None) -> bool:
    """Whether a rep is too short for its steady window to carry the row: none at all, or one
    shorter than the ramp and the tail around it (most of the rep is then edges)."""
    return steady_s is None or steady_s <= 0 or steady_s < (ramp_s or 0.0) + (tail_s or 0.0)
