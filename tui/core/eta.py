"""How long the campaign has run and how long it has left."""

from __future__ import annotations

import statistics

from engine.record.state import RowState, RunState, WindowState
from engine.words import RowStatus, RunStatus, WindowStatus, row_key
from tui.core.plan import LoadPlan


def elapsed(state: RunState, now: float) -> float | None:
    if state.started_ts is None:
        return None
    return (state.finished_ts or now) - state.started_ts


def eta(state: RunState, plan: LoadPlan, now: float) -> float | None:
    """Remaining time, from the workload as soon as one rep has landed, refined by every rep after.

    Each window still to run costs a boot (the mean boot so far), then per shape a warm pass and
    the reps, each pass ``requests x max_tokens`` tokens at the tok/s measured at its concurrency
    (every rep so far; a concurrency not measured yet takes the nearest one's), then
    what the finished windows spent beyond boot and passes (quality checks, stopping). Without a
    rep or the work of a pass: the mean span of the finished windows. Sessions
    running at once on several places share the work left.
    """
    if state.status != RunStatus.RUNNING:
        return 0.0
    by_plan = _eta_from_plan(state, plan, now)
    return by_plan if by_plan is not None else _eta_from_spans(state, now)


def _rates(state: RunState) -> dict[int, float]:
    """Tok/s per concurrency over every rep so far, as a harmonic mean: the time a pass takes is
    tokens / rate, and the mean of those times is tokens / the harmonic mean of the rates (one slow
    rep costs more time than one fast rep saves; a median ignored both)."""
    seen: dict[int, list[float]] = {}
    for r in state.rows.values():
        for reps in r.reps.values():
            seen.setdefault(r.concurrency, []).extend(v for v in reps.values() if v > 0)
    return {c: statistics.harmonic_mean(v) for c, v in seen.items() if v}


def _eta_from_plan(state: RunState, plan: LoadPlan, now: float) -> float | None:
    rates = _rates(state)
    if not rates or not plan.classes or plan.rates or not all(plan.pass_tokens(c) for c in plan.concurrency):
        return None  # an open-loop pass lasts as its arrivals and the server's queue: by the spans

    def pass_s(c: int) -> float:
        rate = rates.get(c) or rates[min(rates, key=lambda m: (abs(m - c), -m))]
        return (plan.pass_tokens(c) or 0) / rate

    passes = 1 + (plan.reps or 0)  # the warm pass, then the reps

    def passes_left(r: RowState | None) -> int:
        if r is None or r.status == RowStatus.PENDING:
            return passes
        if r.status == RowStatus.WARM:
            return passes
        if r.status == RowStatus.MEASURING:
            return max(0, passes - 1 - len(r.reps.get(r.attempt, {})))
        return 0

    def measuring_s(ws: WindowState, fresh: bool) -> float:
        return sum(pass_s(c) * (passes if fresh else passes_left(
            state.rows.get(row_key(ws.session, ws.window, cls, c))))
            for cls in plan.classes for c in plan.concurrency)

    boots = [w.boot_s for w in state.windows.values() if w.boot_s is not None]
    boot = statistics.fmean(boots) if boots else 0.0
    rest = [max(0.0, w.ended_ts - w.started_ts - (w.boot_s or 0.0) - measuring_s(w, True))
            for w in state.windows.values() if w.status == WindowStatus.DONE
            and w.started_ts is not None and w.ended_ts is not None]
    after = statistics.fmean(rest) if rest else 0.0
    sessions: dict[str, float] = {}
    for ws in state.windows.values():
        if ws.status in (WindowStatus.PENDING, WindowStatus.QUEUED):  # a queue's wait: unknown
            left = boot + measuring_s(ws, True) + after
        elif ws.status == WindowStatus.BOOTING:
            age = now - ws.started_ts if ws.started_ts is not None else 0.0
            left = max(0.0, boot - age) + measuring_s(ws, True) + after
        elif ws.status == WindowStatus.MEASURING:
            left = measuring_s(ws, False) + after
        else:
            continue
        sessions[ws.session] = sessions.get(ws.session, 0.0) + left
    # Sessions on places run at once, each on one place from start to end: the work left shared
    # by the places busy now, but never less than the longest session still to finish.
    lanes = max(1, len({ws.session for ws in state.live}))
    return max(sum(sessions.values()) / lanes, max(sessions.values(), default=0.0))


def _eta_from_spans(state: RunState, now: float) -> float | None:
    """The mean measured window times the windows left, minus the current one's age."""
    spans = [w.ended_ts - w.started_ts for w in state.windows.values()
             if w.status in (WindowStatus.DONE, WindowStatus.ADVANCED)
             and w.started_ts is not None and w.ended_ts is not None]
    if not spans:
        return None
    per_window = statistics.fmean(spans)
    pending = sum(w.status in (WindowStatus.PENDING, WindowStatus.QUEUED) for w in state.windows.values())
    cur = state.windows.get(state.current or "")
    began = cur.started_ts if cur else None
    current_left = max(0.0, per_window - (now - began)) if began is not None else 0.0
    return per_window * pending + current_left
