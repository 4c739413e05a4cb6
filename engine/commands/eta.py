"""How long a campaign has run and how long it has left, and what each window measures (the load
plan: "rep 2/3", the ETA), from run_started's workload: ``ruler status`` and the console say the
same."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.campaign import defaults
from engine.record.state import RowState, RunState, WindowState
from engine.words import RowStatus, RunStatus, WindowStatus, row_key


@dataclass(frozen=True)
class LoadPlan:
    """What each window measures: its shapes (class x concurrency), reps per shape, and the work
    of one pass (requests x max_tokens at each concurrency), for "rep 2/3" and the ETA."""

    shapes: int | None = None
    reps: int | None = None
    classes: tuple[str, ...] = ()
    concurrency: tuple[int, ...] = ()
    requests: tuple[int, ...] = ()  # per pass, at each concurrency in order; () unknown
    max_tokens: int | None = None
    rates: tuple[float, ...] = ()  # open-loop rates, req/s: a pass lasts its arrivals, not tokens/rate

    @classmethod
    def of(cls, wl: dict[str, Any]) -> LoadPlan:
        """From run_started's workload, where reps left out are the spec's default and any other
        figure left out is unknown (the ETA then goes by spans)."""
        try:
            classes, conc = tuple(wl["classes"]), tuple(int(c) for c in wl.get("concurrency") or ())
            reps = int(wl.get("reps", defaults.REPS))
        except (KeyError, TypeError, ValueError):
            return cls()
        requests: tuple[int, ...] = ()
        try:
            if wl.get("requests"):
                requests = tuple(int(n) for n in wl["requests"])
            tokens = int(wl["max_tokens"]) if wl.get("max_tokens") else None
        except (TypeError, ValueError):
            requests, tokens = (), None
        if len(requests) != len(conc):
            requests = ()
        try:
            rates = tuple(float(r) for r in wl.get("rate") or ())
        except (TypeError, ValueError):
            rates = ()
        specs = wl["classes"] if isinstance(wl["classes"], dict) else {}

        def shapes(name: str) -> int:  # a trace's one row; a multi-turn class's closed loop only
            spec = specs.get(name)
            if isinstance(spec, dict) and spec.get("trace") is not None:
                return 1
            if isinstance(spec, dict) and spec.get("conversations") is not None:
                return len(conc)
            return len(conc) + len(rates)

        return cls(sum(shapes(c) for c in classes), reps, classes, conc, requests, tokens, rates)

    def pass_tokens(self, concurrency: int) -> int | None:
        """Tokens one pass asks for at ``concurrency`` (an upper bound: a reply may stop early)."""
        if not self.requests or not self.max_tokens or concurrency not in self.concurrency:
            return None
        return self.requests[self.concurrency.index(concurrency)] * self.max_tokens


def load_plan(state: RunState) -> LoadPlan:
    return LoadPlan.of(state.workload) if state.workload else LoadPlan()



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
    running at once on several places share the work left. A window booting is counted at its
    own stack's boots; unknown (None) while it boots with none to go by or past all of them.
    """
    if state.status != RunStatus.RUNNING:
        return 0.0
    if _boot_unknown(state, now):
        return None
    by_plan = _eta_from_plan(state, plan, now)
    return by_plan if by_plan is not None else _eta_from_spans(state, now)


# How far past the longest boot of its stack a boot may run before what is left of it is
# unknown: a window's axis can make its boot longer (a bigger cache), not ten times as long.
BOOT_SLACK_S = 30.0


def _boot_unknown(state: RunState, now: float) -> bool:
    """A window booting whose stack never booted before in this run (its boot's length is
    unknown: a vLLM window's is not llama.cpp's two seconds), or whose boot has run well past
    every boot of its stack (twice the longest, and BOOT_SLACK_S more): what is left of it is
    unknown, and so is the time left, rather than a count that stands still through the boot."""
    for ws in state.windows.values():
        if ws.status != WindowStatus.BOOTING or ws.started_ts is None:
            continue
        # A window booted again (a rerun) keeps its earlier boot_s until it is ready: that one
        # is of its stack too, and a fair estimate.
        mine = [w.boot_s for w in state.windows.values()
                if w.boot_s is not None and w.stack == ws.stack]
        if not mine or now - ws.started_ts > max(2 * max(mine), max(mine) + BOOT_SLACK_S):
            return True
    return False


def _rates(state: RunState) -> dict[int, float]:
    """Tok/s per concurrency over every rep so far, as a harmonic mean: the time a pass takes is
    tokens / rate, and the mean of those times is tokens / the harmonic mean of the rates (one slow
    rep costs more time than one fast rep saves; a median ignored both)."""
    import statistics  # here, not at the top: `ruler status` imports this module (5 ms)

    seen: dict[int, list[float]] = {}
    for r in state.rows.values():
        for reps in r.reps.values():
            seen.setdefault(r.concurrency, []).extend(v for v in reps.values() if v > 0)
    return {c: statistics.harmonic_mean(v) for c, v in seen.items() if v}


def _eta_from_plan(state: RunState, plan: LoadPlan, now: float) -> float | None:
    import statistics  # here, not at the top: `ruler status` imports this module (5 ms)

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
    # A server's boot is its stack's: a vLLM window's boot is not llama.cpp's two seconds.
    by_stack: dict[str, list[float]] = {}
    for w in state.windows.values():
        if w.boot_s is not None:
            by_stack.setdefault(w.stack, []).append(w.boot_s)
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
            mine = by_stack.get(ws.stack, [])
            left = max(0.0, statistics.fmean(mine) - age) + measuring_s(ws, True) + after
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
    import statistics  # here, not at the top: `ruler status` imports this module (5 ms)

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
