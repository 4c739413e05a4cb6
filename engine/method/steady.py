"""A rep's steady window: the part of it where the load is what the shape says, and its tok/s.

A rep's whole-rep tok/s weighs the ramp (workers starting, every prompt in prefill at once) and
the tail (the last requests running with fewer than C in flight) as much as the load it means to
measure. The steady window leaves both out, from the per-request records the receipt keeps:

- closed loop (C workers): from the first request a worker sends after its first one, once every
  worker has its first token back, to the last one sent before the first worker ends its last;
  in between all C requests are in flight and every request that ends is followed by another's
  prefill (a worker sends its next request the moment its last one ends). Both ends are sends, so
  the window holds whole request cycles, prefill and decode alike. A window cut at another moment
  weighs them unevenly, because the workers start together and their cycles stay in phase for a
  while: one from the last first token (the ramp's prefill just over, nobody yet ends) to the first
  worker's last end (no one sends any more) holds every worker's decode burst and misses their
  prefill stalls, and read 7 % high at C=8 and 22 % at C=64 with two requests per worker in
  bench/steady_sim.py (docs/campaign.md has its table).
- open loop (arrivals at a rate): from one median request duration after the first arrival (the
  arrivals of those first inter-arrival times have filled the server to its level, Little's law's
  rate x duration) to the last arrival (after it the in-flight requests only drain).

Tokens are placed in time by their chunks: the first at the request's first token, the next ones
``gaps_ms`` apart, a request's tokens shared evenly over its chunks (a receipt without gaps: its
tokens evenly from first token to end). The window's tok/s is the tokens placed inside it over
its length. Ramp and tail are the seconds before and after it.

A closed-loop window also counts its cycles: the requests sent inside it per worker. Under
``MIN_CYCLES`` the window is too short to carry the row (its figure strays 5 to 6 % from the
long run's in the simulation): the row is then over the whole reps (``stats.headline``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.words import WHOLE


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
    by_worker = _workers(records)
    if len(by_worker) < concurrency:
        return None
    # A worker whose first request failed before a token: it was in flight until that end.
    ready = max(rs[0].get("first_token") or rs[0]["end"] for rs in by_worker.values())
    busy = min(max(r["end"] for r in rs) for rs in by_worker.values())
    sends = _sends(by_worker)
    started = next((t for t in sends if t >= ready), None)
    ended = next((t for t in reversed(sends) if t <= busy), None)
    if started is None or ended is None or ended <= started:
        return None
    return Window(started, ended)


def _workers(records: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """A closed loop's records by worker, each worker's in the order it sent them."""
    by_worker: dict[int, list[Mapping[str, Any]]] = {}
    for r in sorted(records, key=lambda r: r["start"]):
        by_worker.setdefault(int(r.get("worker", -1)), []).append(r)
    by_worker.pop(-1, None)
    return by_worker


def _sends(by_worker: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[float]:
    """The times a worker sent a request the moment its previous one ended, in order."""
    return sorted(r["start"] for rs in by_worker.values() for r in rs[1:])


def cycles(records: Sequence[Mapping[str, Any]], concurrency: int, w: Window) -> float:
    """The request cycles a closed-loop window holds per worker: the sends inside it (its start
    one of them, its end the next cycle's) over C."""
    timed = [r for r in records if r.get("start") is not None and r.get("end") is not None]
    sends = _sends(_workers(timed))
    return sum(1 for t in sends if w.start <= t < w.end) / concurrency


def _open(records: Sequence[Mapping[str, Any]]) -> Window | None:
    first = min(r["start"] for r in records)
    durations = [r["end"] - r["start"] for r in records if not r.get("error")]
    if not durations:
        return None
    import statistics  # here, not at the top: the fold reads this module's words

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
    """The tokens placed after the window's start and by its end: a closed-loop window from one
    send to another holds whole requests (a send is the moment the worker's last token came)."""
    total = 0.0
    for r in records:
        if r.get("error"):
            continue
        times, each = token_times(r)
        total += each * sum(1 for t in times if w.start < t <= w.end)
    return total


def figures(records: Sequence[Mapping[str, Any]], concurrency: int) -> dict[str, float | None]:
    """One rep's steady tok/s and its window's seconds, with the ramp's and the tail's, and (closed
    loop) its cycles per worker (all None when the rep has no steady window)."""
    w = window(records, concurrency)
    if w is None:
        return {"steady_tok_s": None, "steady_s": None, "ramp_s": None, "tail_s": None,
                "steady_cycles": None}
    first = min(r["start"] for r in records if r.get("start") is not None)
    last = max(r["end"] for r in records if r.get("end") is not None)
    return {"steady_tok_s": round(tokens_in(records, w) / w.seconds, 3),
            "steady_s": round(w.seconds, 6), "ramp_s": round(w.start - first, 6),
            "tail_s": round(last - w.end, 6),
            "steady_cycles": round(cycles(records, concurrency, w), 3) if concurrency else None}


# Request cycles per worker a closed-loop window needs to carry its row: with 2 (four requests per
# worker, the default) bench/steady_sim.py's windows stray at most 2 % from the long run; with
# about 1 (two requests per worker) up to 6 %.
MIN_CYCLES = 2.0


def too_short(steady_s: float | None, ramp_s: float | None, tail_s: float | None,
              cycles: float | None = None) -> bool:
    """Whether a rep is too short for its steady window to carry the row: none at all, a
    closed-loop one (``cycles`` known) under ``MIN_CYCLES`` request cycles per worker, an
    open-loop one shorter than the ramp and the tail around it (most of the rep is then edges)."""
    return bool(why_short(steady_s, ramp_s, tail_s, cycles))


def why_short(steady_s: float | None, ramp_s: float | None, tail_s: float | None,
              cycles: float | None = None) -> str:
    """What :func:`too_short` finds, in words ("" when the window is long enough)."""
    if steady_s is None or steady_s <= 0:
        return "no steady window"
    if cycles is not None:
        if cycles >= MIN_CYCLES:
            return ""
        return (f"a steady window of {cycles:g} request cycles per worker, under the "
                f"{MIN_CYCLES:g} that keep its bias under 4 %")
    edges = (ramp_s or 0.0) + (tail_s or 0.0)
    if steady_s >= edges:
        return ""
    return f"a steady window of {steady_s:.2f} s, shorter than its ramp and tail ({edges:.2f} s)"


def same_basis(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """Why two rows' figures cannot make a delta, or None when they can: each row's tok/s is over
    its ``basis`` (``steady`` windows or ``whole`` reps, "" or absent for a row from before the
    steady window: whole reps), and a steady figure against a whole one reads the ramp and the
    tail as the change. Nor do a row whose acceptance was simulated and one whose was measured
    (engine.method.acceptance.unlike)."""
    # Here, not at the top: the fold reads this module's words and would load the statistics.
    from engine.method import acceptance

    basis_a, basis_b = a.get("basis") or WHOLE, b.get("basis") or WHOLE
    if basis_a == basis_b:
        return acceptance.unlike(a, b)  # nor does a simulated acceptance against a measured one
    return (f"the rows are on different bases ({basis_a} against {basis_b}): a steady window's "
            "tok/s against a whole rep's is no delta")
