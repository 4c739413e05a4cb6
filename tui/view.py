"""What the console shows, derived from ``engine.record.state`` and the journal. No Textual here.

Everything is plain text plus a style tag (``error``, ``warning``, ``success``, ``accent``,
``muted``, ``bold`` or ``""``); ``tui.widgets`` maps tags to theme colours. Every colour is paired
with a glyph or a word ("!", "VOID", "≠") so a NO_COLOR terminal loses nothing.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from engine.record.deltas import Interval, observable, pair_delta, stage_of
from engine.record.events import (
    COMPLETE_WINDOWS,
    CONTROL,
    LIVE_ROWS,
    OVER_RUNS,
    UP_WINDOWS,
    USABLE_ROWS,
    Check,
    RowStatus,
    RunStatus,
    Verdict,
    WindowStatus,
)
from engine.record.state import RowState, RunState, WindowState, row_key
from engine.servers import BootFacts

Seg = tuple[str, str]  # (text, style tag)


@dataclass(frozen=True)
class Workload:
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
    def of(cls, wl: dict[str, Any]) -> Workload:
        """From run_started's workload or a frozen campaign.yaml's (where a default left out is
        unknown here: the console does not restate the spec's defaults)."""
        try:
            classes, conc = tuple(wl["classes"]), tuple(int(c) for c in wl.get("concurrency") or ())
            reps = int(wl.get("reps", 3))
        except (KeyError, TypeError, ValueError):
            return cls()
        requests: tuple[int, ...] = ()
        try:
            if wl.get("requests"):
                requests = tuple(int(n) for n in wl["requests"])
            elif wl.get("requests_per_rep"):
                requests = (int(wl["requests_per_rep"]),) * len(conc)
            tokens = int(wl["max_tokens"]) if wl.get("max_tokens") else None
        except (TypeError, ValueError):
            requests, tokens = (), None
        if len(requests) != len(conc):
            requests = ()
        try:
            rates = tuple(float(r) for r in wl.get("rate") or ())
        except (TypeError, ValueError):
            rates = ()
        return cls(len(classes) * (len(conc) + len(rates)), reps, classes, conc, requests, tokens,
                   rates)

    def pass_tokens(self, concurrency: int) -> int | None:
        """Tokens one pass asks for at ``concurrency`` (an upper bound: a reply may stop early)."""
        if not self.requests or not self.max_tokens or concurrency not in self.concurrency:
            return None
        return self.requests[self.concurrency.index(concurrency)] * self.max_tokens


def _frozen(campaign_yaml: Path) -> Any:
    """A run's frozen campaign.yaml as data. libyaml's parser where PyYAML has it: the console
    reads it as it opens, and the pure-Python one took 15 ms."""
    return yaml.load(campaign_yaml.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def frozen_workload(campaign_yaml: Path) -> Workload:
    """The run's frozen campaign.yaml: for journals written before run_started carried the workload."""
    try:
        wl = _frozen(campaign_yaml).get("workload", {})
    except (OSError, yaml.YAMLError, AttributeError):
        return Workload()
    return Workload.of(wl) if isinstance(wl, dict) else Workload()


def workload(state: RunState, fallback: Workload) -> Workload:
    return Workload.of(state.workload) if state.workload else fallback


# ------------------------------------------------------------------ formatting


def fmt_secs(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0, int(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def fmt_tok(v: Any) -> str:
    if v is None or v == "":
        return "-"
    v = float(v)
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.1f}"


def fmt_rps(v: Any) -> str:
    return "-" if v is None or v == "" else f"{float(v):.2f}"


def fmt_pct(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.1%}" if signed else f"{v:.1%}"


# ------------------------------------------------------------------ where the campaign stands


class RowsByWindow:
    """Each window's rows, kept up with a state's rows as they grow. The fold only ever adds a row
    (under a key that names its window), so the rows past the last count are the new ones: a
    window's rows cost its own, not a scan of a day-long campaign's thousands per window shown."""

    def __init__(self) -> None:
        self.rows: dict[str, RowState] | None = None  # held: its id cannot be another dict's
        self.seen = 0
        self.index: dict[str, list[RowState]] = {}

    def of(self, state: RunState, wkey: str) -> list[RowState]:
        if self.rows is not state.rows or len(state.rows) < self.seen:
            self.rows, self.seen, self.index = state.rows, 0, {}
        if len(state.rows) > self.seen:
            for r in itertools.islice(state.rows.values(), self.seen, None):
                self.index.setdefault(f"{r.session}-{r.window}", []).append(r)
            self.seen = len(state.rows)
        return list(self.index.get(wkey, ()))


window_rows = RowsByWindow().of


def live_row(state: RunState, wkey: str | None) -> RowState | None:
    if not wkey:
        return None
    live = [r for r in window_rows(state, wkey) if r.status in LIVE_ROWS]
    return live[-1] if live else None


def focus_window(state: RunState, shown: str | None = None) -> str | None:
    """The window worth showing when the operator has not picked one: the current one; between
    windows and after the campaign, the last one with rows (the last started one otherwise).

    With sessions on places several windows are live at once and the current one is whichever
    started last: the window on screen (``shown``) then follows its own place, to the window live
    there now, and stays put between that place's windows."""
    ws = state.windows.get(shown or "")
    place = state.session_places.get(ws.session) if ws else None
    if ws and place:
        return next((w.key for w in state.live if state.session_places.get(w.session) == place),
                    ws.key)
    if state.current:
        return state.current
    measured = {f"{r.session}-{r.window}" for r in state.rows.values()}
    started = [k for k in state.order if state.windows[k].status != WindowStatus.PENDING]
    with_rows = [k for k in started if k in measured]
    return (with_rows or started or state.order or [None])[-1]


def phase(state: RunState) -> Seg:
    if state.status == RunStatus.FINISHED:
        return "done", "success"
    if state.status in (RunStatus.ABORTED, RunStatus.ERROR):
        return state.status.upper(), "error"
    if state.status == RunStatus.NEW:
        return "starting", "muted"
    ws = state.windows.get(state.current or "")
    if ws is None:
        return "between windows", "muted"
    return window_phase(state, ws)


def window_phase(state: RunState, ws: WindowState) -> Seg:
    if ws.status == WindowStatus.QUEUED:
        return queued_text(ws), "warning"
    if ws.status == WindowStatus.BOOTING:
        return "booting", "accent"
    if ws.quality:
        return "quality", "accent"
    row = live_row(state, ws.key)
    if row:
        return ("warm", "accent") if row.status == RowStatus.WARM else ("measuring", "accent")
    return ws.status, "muted"


def shape_segs(row: RowState, wl: Workload) -> list[Seg]:
    """The shape in flight: its attempt, and the warm pass or the rep it is on."""
    done = len(row.reps.get(row.attempt, {}))
    of = f"/{wl.reps}" if wl.reps else ""
    what = ("warm pass" if row.status == RowStatus.WARM
            else f"rep {min(done + 1, wl.reps or done + 1)}{of}")
    return [(f"{row.cls} {row.load}", "bold"),
            (f"attempt {row.attempt}", "warning" if row.attempt > 1 else ""), (what, "")]


# ------------------------------------------------------------------ sessions on places


def on_places(state: RunState) -> bool:
    """Sessions run on places, several at once: the header gives each place a line and counts
    the sessions, and the window keys name the session they act on."""
    return bool(state.session_places) or len({w.session for w in state.live}) > 1


def session_phases(state: RunState) -> dict[str, str]:
    """Each session, in campaign order: ``done`` when every window of it is complete, ``queued``
    while it has not begun (no window started, not taken by a place), ``running`` in between."""
    windows: dict[str, list[WindowState]] = {}
    for k in state.order:
        windows.setdefault(state.windows[k].session, []).append(state.windows[k])
    out = {}
    for session, ws in windows.items():
        if all(w.status in COMPLETE_WINDOWS for w in ws):
            out[session] = "done"
        elif session in state.session_places or any(w.status != WindowStatus.PENDING for w in ws):
            out[session] = "running"
        else:
            out[session] = "queued"
    return out


def running_sessions(state: RunState) -> list[str]:
    return [s for s, p in session_phases(state).items() if p == "running"]


def keyed_session(state: RunState, shown: str | None) -> str | None:
    """The session the window keys (advance, rewarm, pause) act on: the one of the window under
    the cursor while it runs, else the only one running."""
    running = running_sessions(state)
    ws = state.windows.get(shown or "")
    if ws and ws.session in running:
        return ws.session
    return running[0] if len(running) == 1 else None


def session_args(state: RunState, shown: str | None) -> list[str] | None:
    """What a window key sends after its command: the session it acts on when sessions run on
    places (``advance s2``: the engine refuses a bare one while two run); nothing when sessions
    run one at a time, as before places. None: several run and the cursor is on none of them."""
    if not on_places(state):
        return []
    session = keyed_session(state, shown)
    if session:
        return [session]
    return None if len(running_sessions(state)) > 1 else []  # none runs: the engine says why


def session_paused(state: RunState, session: str | None) -> bool:
    """A pause was asked for in ``session`` (or in the one running, naming none)."""
    if not on_places(state) or session is None:
        return state.paused
    return bool(state.paused_sessions & {session, ""})


def pause_seg(state: RunState, session: str | None = None) -> list[Seg]:
    held = state.pause_held if session is None else session in state.held_sessions
    asked = state.paused if session is None else session_paused(state, session)
    if held:
        return [("PAUSED", "warning")]
    if asked:  # accepted, not in effect yet: the rep in flight runs to its end
        return [("pausing after this rep", "warning")]
    return []


def place_lines(state: RunState, wl: Workload, shown: str | None) -> list[list[Seg]]:
    """One line per place: the session on it now, its live window (the shape and rep in flight,
    else its phase) or why none; ``▸`` marks the one the window keys act on."""
    places: dict[str, str] = {}  # place -> the session begun on it last
    for session, place in state.session_places.items():
        places[place] = session
    keyed = keyed_session(state, shown)
    phases = session_phases(state)
    out = []
    for place, session in places.items():
        ws = next((w for w in state.live if state.session_places.get(w.session) == place), None)
        session = ws.session if ws else session  # a live window says who holds the place now
        line: list[Seg] = [("▸" if session == keyed else " ", "accent"), ("place", "muted"),
                           (place, "bold"), ("·", "muted")]
        if ws is None:
            word = phases.get(session, "")
            if word == "running":
                word = "between windows" if state.status == RunStatus.RUNNING else "stopped"
            line.append((f"{session} {word}", "muted"))
        else:
            row = live_row(state, ws.key)
            # A shape in flight says what it does (its warm pass or rep); else the window's phase.
            what = shape_segs(row, wl) if row and ws.status == WindowStatus.MEASURING \
                and not ws.quality else [window_phase(state, ws)]
            line += [(f"{ws.session} {ws.window}", "bold"), ("·", "muted"), *what]
        line += pause_seg(state, session)
        out.append(line)
    return out


def sessions_text(state: RunState) -> str:
    """Sessions running, queued and done; once the run is over, those begun and not done were
    stopped and those queued never began (each said only when there are some)."""
    phases = list(session_phases(state).values())
    if state.status == RunStatus.RUNNING:
        counts = [f"{phases.count(p)} {p}" for p in ("running", "queued", "done")]
    else:
        counts = [f"{phases.count(p)} {word}" for p, word in
                  (("running", "stopped"), ("queued", "not begun"), ("done", "done"))
                  if phases.count(p) or p == "done"]
    return "sessions " + ", ".join(counts)


def position(state: RunState, wkey: str | None) -> tuple[int, int]:
    m = len(state.order)
    return (state.order.index(wkey) + 1 if wkey in state.order else 0), m


def elapsed(state: RunState, now: float) -> float | None:
    if state.started_ts is None:
        return None
    return (state.finished_ts or now) - state.started_ts


def eta(state: RunState, wl: Workload, now: float) -> float | None:
    """Remaining time, from the workload as soon as one rep has landed, refined by every rep after.

    Each window still to run costs a boot (the mean boot so far), then per shape a warm pass and
    the reps, each pass ``requests x max_tokens`` tokens at the tok/s measured at its concurrency
    (every rep so far; a concurrency not measured yet takes the nearest one's), then
    what the finished windows spent beyond boot and passes (quality checks, stopping). Without a
    rep or the work of a pass, the old way: the mean span of the finished windows. Sessions
    running at once on several places share the work left.
    """
    if state.status != RunStatus.RUNNING:
        return 0.0
    by_workload = _eta_from_workload(state, wl, now)
    return by_workload if by_workload is not None else _eta_from_spans(state, now)


def _rates(state: RunState) -> dict[int, float]:
    """Tok/s per concurrency over every rep so far, as a harmonic mean: the time a pass takes is
    tokens / rate, and the mean of those times is tokens / the harmonic mean of the rates (one slow
    rep costs more time than one fast rep saves; a median ignored both)."""
    seen: dict[int, list[float]] = {}
    for r in state.rows.values():
        for reps in r.reps.values():
            seen.setdefault(r.concurrency, []).extend(v for v in reps.values() if v > 0)
    return {c: statistics.harmonic_mean(v) for c, v in seen.items() if v}


def _eta_from_workload(state: RunState, wl: Workload, now: float) -> float | None:
    rates = _rates(state)
    if not rates or not wl.classes or wl.rates or not all(wl.pass_tokens(c) for c in wl.concurrency):
        return None  # an open-loop pass lasts as its arrivals and the server's queue: by the spans

    def pass_s(c: int) -> float:
        rate = rates.get(c) or rates[min(rates, key=lambda m: (abs(m - c), -m))]
        return (wl.pass_tokens(c) or 0) / rate

    passes = 1 + (wl.reps or 0)  # the warm pass, then the reps

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
            for cls in wl.classes for c in wl.concurrency)

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


# ------------------------------------------------------------------ window vs control


def row_value(r: RowState | None) -> tuple[float, bool] | None:
    """(tok/s, provisional): the final median, or the running median of the attempt in flight."""
    if r is None:
        return None
    if r.status in USABLE_ROWS and r.row.get("agg_tok_s") is not None:
        return float(r.row["agg_tok_s"]), False
    if r.status in LIVE_ROWS:
        reps = list(r.reps.get(r.attempt, {}).values())
        if reps:
            return statistics.median(reps), True
    return None


def reference(state: RunState, wkey: str) -> WindowState | None:
    """What a window is compared with: its session's control; a control, the previous session's
    control (boot-to-boot drift, the reason the control is booted again every session)."""
    ws = state.windows.get(wkey)
    if ws is None:
        return None
    if ws.window != CONTROL:
        return state.windows.get(f"{ws.session}-{CONTROL}")
    controls = [k for k in state.order if state.windows[k].window == CONTROL]
    i = controls.index(wkey)
    return state.windows[controls[i - 1]] if i > 0 else None


def shape_pairs(state: RunState, wkey: str) -> list[tuple[str, float, float, bool]]:
    """(shape, window tok/s, reference tok/s, provisional) for shapes measured in both."""
    ref = reference(state, wkey)
    if ref is None:
        return []
    out = []
    for r in window_rows(state, wkey):
        here = row_value(r)
        there = row_value(state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate)))
        if here and there and there[0] > 0:
            out.append((f"{r.cls} {r.load}", here[0], there[0], here[1] or there[1]))
    return out


def row_reps(r: RowState | None) -> tuple[list[float], bool] | None:
    """(each rep's tok/s, provisional): the final row's, or the attempt in flight's so far."""
    if r is None:
        return None
    if r.status in USABLE_ROWS and r.row.get("rep_tok_s"):
        return [float(x) for x in r.row["rep_tok_s"]], False
    if r.status in LIVE_ROWS and r.reps.get(r.attempt):
        return list(r.reps[r.attempt].values()), True
    return None


def shape_deltas(state: RunState, wkey: str) -> list[tuple[str, Interval, bool]]:
    """(shape, delta with its interval, provisional) against the reference, per shape measured
    in both: the same computation as throughput.csv's delta columns (engine.record.deltas)."""
    ref = reference(state, wkey)
    if ref is None:
        return []
    out = []
    for r in window_rows(state, wkey):
        here = row_reps(r)
        other = state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate))
        there = row_reps(other)
        stage = stage_of(r.row, other.row) if other else None  # reps to a precision: Stein's
        iv = pair_delta(tuple(here[0]), tuple(there[0]), stage) if here and there else None
        if here and there and iv is not None:
            out.append((f"{r.cls} {r.load}", iv, here[1] or there[1]))
    return out


def headline(state: RunState, wkey: str) -> tuple[Interval, bool] | None:
    """The median shape's delta and interval: shapes at different concurrency differ by
    multiples, so a delta per shape keeps one fast shape from deciding the headline. It is one
    shape's own, so that its interval goes with it: of an even count's two middle shapes, the one
    nearer 0 (the headline never overstates)."""
    deltas = sorted(shape_deltas(state, wkey), key=lambda d: d[1].delta)
    if not deltas:
        return None
    middle = deltas[(len(deltas) - 1) // 2: len(deltas) // 2 + 1]
    _, iv, _ = min(middle, key=lambda d: abs(d[1].delta))
    return iv, any(p for *_, p in deltas)


# ------------------------------------------------------------------ the windows list


def _ratio(check: str, part: str) -> Callable[[dict[str, Any]], str]:
    def text(v: dict[str, Any]) -> str:
        fig = v.get("figures") or {}
        return f"{check} {fig.get(part)}/{fig.get('n')}"
    return text


def _named(v: dict[str, Any]) -> str:
    return f"{v.get('check', '')} {v.get('verdict', '')}"


# Each verdict word the engine emits (engine.record.events.Verdict), in a few words and a colour.
VERDICT_SEGS: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    Verdict.ACTS: (lambda v: "knobs act", "success"),
    Verdict.RULER_SUSPECT: (lambda v: "ruler suspect", "error"),
    Verdict.IDENTICAL: (_ratio(Check.GREEDY, "identical"), "success"),
    Verdict.DIVERGED: (_ratio(Check.GREEDY, "identical"), "error"),
    Verdict.NO_REFERENCE: (_named, "muted"),
    Verdict.REFERENCE: (_named, "muted"),
    Verdict.EXACT: (lambda v: f"Δlogp {v['verdict']}", "success"),
    Verdict.CLOSE: (lambda v: f"Δlogp {v['verdict']}", ""),
    Verdict.DIFFERS: (lambda v: f"Δlogp {v['verdict']}", "warning"),
    Verdict.REPEAT_IDENTICAL: (lambda v: "self-score same", "muted"),  # the scoring repeats
    Verdict.REPEAT_DIFFERS: (lambda v: "self-score differs", "warning"),
    Verdict.ABOVE_FLOOR: (lambda v: f"KL {v['verdict']}", "warning"),
    Verdict.AT_FLOOR: (lambda v: f"KL {v['verdict']}", ""),
    Verdict.FLOOR: (lambda v: f"KL {v['verdict']}", ""),
    Verdict.NO_OBSERVABLE_EFFECT: (lambda v: "no effect", "warning"),
    Verdict.OBSERVABLE_EFFECT: (lambda v: "effect seen", "success"),
    Verdict.UNDETERMINED: (lambda v: "effect ?", "muted"),
    Verdict.OK: (_ratio("tools", "ok"), "success"),
    Verdict.FAILED: (_ratio("tools", "ok"), "error"),
    Verdict.WITHIN_SPREAD: (lambda v: "no drift", "muted"),
    Verdict.WITHIN_NOISE: (lambda v: "no drift", "muted"),
    Verdict.DRIFT: (lambda v: "drift", "warning"),
    Verdict.ERROR: (_named, "error"),
    Verdict.UNSUPPORTED: (_named, "muted"),
}


def verdict_seg(v: dict[str, Any]) -> Seg:
    """A verdict event in a few words for the windows list; a word this console does not know (a
    newer engine's) is shown as it stands, without a colour that would claim to judge it."""
    text, style = VERDICT_SEGS.get(str(v.get("verdict", "")), (_named, ""))
    return text(v), style


def verdict_word(ws: WindowState, check: Check) -> str:
    return str(ws.verdicts.get(check, {}).get("verdict", ""))


def queued_text(ws: WindowState) -> str:
    """A batch job waiting in Slurm's queue, with Slurm's reason (Resources, Priority...)."""
    return f"queued ({ws.queue})" if ws.queue else "queued"


def window_status(state: RunState, wkey: str) -> Seg:
    """One word per window, the most important first: rejected, ruler suspect, void rows, no effect."""
    ws = state.windows[wkey]
    voids = sum(r.status == RowStatus.VOID for r in window_rows(state, wkey))
    if ws.status in (WindowStatus.REJECTED, WindowStatus.FAILED):
        return ws.status.upper(), "error"
    if ws.ruler_suspect:
        return "ruler suspect", "error"
    if ws.status == WindowStatus.QUEUED:
        return queued_text(ws), "warning"
    if ws.status in UP_WINDOWS:
        return "quality" if ws.quality else ws.status, "accent"
    if voids:
        return f"{voids} void", "error"
    if ws.status in (WindowStatus.ABORTED, WindowStatus.ADVANCED):
        return ws.status, "warning"
    if verdict_word(ws, Check.NO_EFFECT) == Verdict.NO_OBSERVABLE_EFFECT:
        return "no effect", "warning"
    if ws.status == WindowStatus.DONE:
        return "done", "success"
    return ws.status, "muted"


def window_notes(state: RunState, wkey: str) -> list[Seg]:
    ws = state.windows[wkey]
    notes = [verdict_seg(v) for v in ws.verdicts.values()]
    voids = sum(r.status == RowStatus.VOID for r in window_rows(state, wkey))
    if voids and ws.status in UP_WINDOWS:
        notes.insert(0, (f"{voids} void", "error"))
    if ws.status in (WindowStatus.REJECTED, WindowStatus.FAILED) and ws.reason:
        notes.append((ws.reason, "error"))
    return notes


def delta_seg(state: RunState, wkey: str, noise: float = 0.0) -> Seg:
    """The headline delta, coloured only when it is beyond the noise (its interval excludes 0 and
    it exceeds ``noise``, the campaign's declared noise): the rule of the report and the no-effect
    check. Its interval is the next column (:func:`ci_seg`), shown where the screen has room."""
    return delta_cells(state, wkey, noise)[0]


def ci_seg(state: RunState, wkey: str) -> Seg:
    """The headline delta's 95 % interval, ``[+8,+17]`` (percent), or nothing."""
    return delta_cells(state, wkey)[1]


def delta_cells(state: RunState, wkey: str, noise: float = 0.0) -> tuple[Seg, Seg]:
    """:func:`delta_seg` and :func:`ci_seg` of one window from one headline: the windows list draws
    them for each of a day-long run's hundreds of windows at every batch."""
    ws = state.windows[wkey]
    if ws.window == CONTROL:
        return ("ctl", "muted"), ("", "")
    h = headline(state, wkey)
    if h is None:
        return no_delta(state, ws), ("", "")
    iv = h[0]
    ci: Seg = ("", "") if iv.lo is None or iv.hi is None else (
        f"[{iv.lo * 100:+.0f},{iv.hi * 100:+.0f}]", "muted")
    return interval_seg(*h, noise, with_ci=False), ci


def interval_seg(iv: Interval, provisional: bool, noise: float, beyond: str = "",
                 with_ci: bool = True) -> Seg:
    """A delta (and its interval); coloured (``beyond``, else by its sign) only past the noise."""
    text = ("~" if provisional else "") + fmt_pct(iv.delta, signed=True)
    if with_ci and iv.lo is not None and iv.hi is not None:
        text += f" [{iv.lo * 100:+.0f},{iv.hi * 100:+.0f}]"
    if not observable(iv, noise):
        return text, ""
    return text, beyond or ("success" if iv.delta > 0 else "error")


def frozen_noise(campaign_yaml: Path) -> float:
    """The campaign's declared noise (``leak.spread``, default 0.10) from its frozen copy."""
    try:
        leak = (_frozen(campaign_yaml) or {}).get("leak") or {}
        return float(leak.get("spread", 0.10))
    except (OSError, yaml.YAMLError, AttributeError, TypeError, ValueError):
        return 0.10


def no_delta(state: RunState, ws: WindowState) -> Seg:
    """Why a window with figures has no Δ: its control has none to compare with (void rows, or a
    control that never served). Blank while there is simply nothing to compare yet."""
    ref = reference(state, ws.key)
    if ref is None:
        return "", ""
    if ref.status in (WindowStatus.REJECTED, WindowStatus.FAILED):
        return f"control {ref.status}", "warning"
    mine = [r for r in window_rows(state, ws.key) if row_value(r) is not None]
    theirs = [state.rows.get(row_key(ref.session, ref.window, r.cls, r.concurrency, r.rate)) for r in mine]
    words = {t.status for t in theirs if t is not None}
    if mine and None not in theirs and words and words <= {RowStatus.VOID, RowStatus.FAILED,
                                                           RowStatus.ABORTED}:
        return "control " + (words.pop() if len(words) == 1 else "unusable"), "warning"
    return "", ""


# ------------------------------------------------------------------ fitting the tables


@dataclass(frozen=True)
class Col:
    """A table column: ``rank`` 0 is always shown, then 1, 2, ... while they fit; a column with
    ``cut`` may be cut down to that many cells (an ellipsis says so) rather than dropped."""

    name: str
    rank: int
    cut: int = 0


def fit_columns(cols: list[Col], widths: dict[str, int], room: int) -> dict[str, int]:
    """The columns shown in ``room`` cells and each one's width, in display order: never wider
    than the room (columns never overlap) as long as the always-shown ones fit at their cut.

    The always-shown columns come first; when they do not fit, the cuttable ones give up cells,
    the rightmost first.
    The others then come in rank order, each when it fits (a narrower column of a lower rank may
    still fit where a wider one did not): at full width, or a cuttable one at ``cut`` cells. Cells
    left over then go back to the cut columns, in rank order: a long reason does not push out
    every column after it, nor is it cut where there is room.
    """
    core = [c for c in cols if c.rank == 0]
    out = {c.name: widths[c.name] for c in core}
    over = sum(out.values()) - room
    for c in reversed(core):  # the rightmost gives first: a long status before the window's name
        if over <= 0:
            break
        if c.cut and out[c.name] > c.cut:
            give = min(over, out[c.name] - c.cut)
            out[c.name] -= give
            over -= give
    left = room - sum(out.values())
    ranked = sorted((c for c in cols if c.rank > 0), key=lambda c: c.rank)
    for c in ranked:
        w = min(widths[c.name], c.cut) if c.cut else widths[c.name]
        if w > left:
            continue
        out[c.name] = w
        left -= out[c.name]
    for c in ranked:
        if c.name in out and out[c.name] < widths[c.name]:
            grow = min(left, widths[c.name] - out[c.name])
            out[c.name] += grow
            left -= grow
    return {c.name: out[c.name] for c in cols if c.name in out}


def windows_width(total: int, core: int, full: int, reps_core: int) -> int:
    """The windows list's share of ``total`` columns: what its always-shown columns need, up to
    two fifths of a wide screen when its notes and axes want it; the reps keep their own
    always-shown columns (``reps_core``) either way."""
    want = core if total < 120 else max(core, min(full, total * 2 // 5))
    return max(min(want, total - reps_core), 20)


# A queued window's status carries Slurm's reason, which can be long: it may be cut, like a name.
WINDOW_COLS = [Col("window", 0, cut=10), Col("status", 0, cut=10), Col("Δ ctl", 0),
               Col("95% CI", 2), Col("notes", 1, cut=8), Col("axis", 3, cut=8)]


# ------------------------------------------------------------------ the reps table


REP_COLUMNS = ["shape", "reps tok/s", "median", "spread", "status", "att", "user", "acc len",
               "acc rate", "req/s", "good/s", "ttft ms", "why"]
# Always the shape, its reps (with their leak marks) and its status; then the median and spread,
# the attempt, a void row's reason (its start: the figure against the limit), acceptance (what
# speculative windows differ in), the rest; the finished request rate and goodput last: what a
# rate sweep is read by, where a closed-loop row's req/s says little its tok/s does not.
_REP_RANKS = {"shape": 0, "reps tok/s": 0, "status": 0, "median": 1, "spread": 2, "att": 3, "why": 4,
              "acc rate": 5, "acc len": 6, "user": 7, "ttft ms": 8, "req/s": 9, "good/s": 10}
REP_COLS = [Col(name, _REP_RANKS[name], cut=16 if name == "why" else 0) for name in REP_COLUMNS]

STATUS_WORD: dict[str, Seg] = {
    RowStatus.OK: ("ok", "success"), RowStatus.NOISY: ("noisy", "warning"),
    RowStatus.VOID: ("VOID", "error"), RowStatus.WARM: ("warm", "accent"),
    RowStatus.MEASURING: ("meas", "accent"), RowStatus.PENDING: ("pending", "muted"),
    RowStatus.FAILED: ("FAILED", "error"), RowStatus.ABORTED: ("aborted", "warning")}


def rep_segs(r: RowState, expected: int | None) -> list[Seg]:
    """The attempt's reps as they land; a suspected leak carries "!" on its rep."""
    reps, gpus = r.reps.get(r.attempt, {}), r.gpu.get(r.attempt, {})
    segs: list[Seg] = []
    for rep in sorted(reps):
        suspect = (r.attempt, rep) in r.suspects
        segs.append((fmt_tok(reps[rep]) + ("!" if suspect else "") + gpu_text(gpus.get(rep)),
                     "warning" if suspect or (gpus.get(rep) or {}).get("throttle") else ""))
    if r.status in LIVE_ROWS and (expected is None or len(reps) < expected):
        segs.append(("…", "muted"))
    return segs


def gpu_text(g: dict[str, Any] | None) -> str:
    """A rep's mean power and lowest SM clock beside its tok/s (nothing without telemetry)."""
    if not g or g.get("power_w") is None:
        return ""
    clock = f"/{g['sm_mhz_min']:.0f}MHz" if g.get("sm_mhz_min") is not None else ""
    return f" {g['power_w']:.0f}W{clock}"


def row_cells(r: RowState, expected_reps: int | None) -> dict[str, list[Seg]]:
    """Cells per column, each a list of segments; a void row is all error colour."""
    final = r.row
    live_reps = list(r.reps.get(r.attempt, {}).values())
    if final:
        med, sp, prov = final.get("agg_tok_s"), final.get("spread"), False
    else:
        med = statistics.median(live_reps) if live_reps else None
        from engine.method import stats  # numpy: a quarter of a second of the console's start

        sp, prov = (stats.spread(live_reps) if len(live_reps) > 1 else None), True
    word, style = STATUS_WORD.get(r.status, (r.status, ""))
    why = str(final.get("reason") or "")
    if r.status == RowStatus.NOISY and final.get("spread_why"):  # noise, not a leak: why, first
        why = "; ".join(x for x in (str(final["spread_why"]), why) if x)
    earlier = [f"a{i + 1} void: {v}" for i, v in enumerate(r.voids)]
    if not why and earlier:
        why = "; ".join(earlier)
    rate = final.get("accept_rate")
    cells: dict[str, list[Seg]] = {
        "shape": [(f"{r.cls} {r.load}", "bold")],
        "reps tok/s": rep_segs(r, expected_reps),
        "median": [(("~" if prov and med is not None else "") + fmt_tok(med), "muted" if prov else "")],
        "spread": [(fmt_pct(sp) if sp is not None else "-", "muted" if prov else "")],
        "status": [(word, style)],
        "att": [(str(r.attempt or "-"), "warning" if r.attempt > 1 else "")],
        "user": [(fmt_tok(final.get("per_user_tok_s")), "")],
        "acc len": [(f"{final['accept_len']:.2f}" if final.get("accept_len") else "-", "")],
        "acc rate": [(fmt_pct(rate) if rate is not None and rate != "" else "-", "")],
        # Two places, as the report gives them: a sweep's low rates are fractions of a request.
        "req/s": [(fmt_rps(final.get("achieved_rps")), "")],
        "good/s": [(fmt_rps(final.get("goodput_rps")), "")],  # "-": no SLO set, or an older row
        "ttft ms": [(fmt_tok(final.get("ttft_ms")), "")],
        "why": [(why, "error" if r.status == RowStatus.VOID else "muted")],
    }
    if r.status == RowStatus.VOID:
        cells = {k: [(t, "error" if s in ("", "muted", "bold") else s) for t, s in v]
                 for k, v in cells.items()}
    return cells


# ------------------------------------------------------------------ boot facts


KEY_FACT_PREFIXES = ("kv.", "ctx.", "weights.", "compute.", "spec.", "slots.")


def facts_lines(state: RunState, wkey: str | None) -> list[Seg]:
    ws = state.windows.get(wkey or "")
    if ws is None:
        return [("no window yet", "muted")]
    if ws.status == WindowStatus.PENDING:
        return [(f"{ws.key}: not booted yet", "muted")]
    out: list[Seg] = []
    if ws.status == WindowStatus.REJECTED:
        out.append((f"REJECTED: {ws.reason}", "error"))
        out += [(e, "error") for e in ws.errors[:4]]
    boot = (f"ready in {ws.boot_s:.1f} s" if ws.boot_s is not None else
            queued_text(ws) if ws.status == WindowStatus.QUEUED else ws.status)
    out.append((f"{boot} · {len(ws.facts)} facts", "bold"))
    if ws.server.get("job") or ws.node:  # a Slurm job: which one, and the node it runs on
        out.append((f"Slurm job {ws.server.get('job', '?')} · node {ws.node or '-'}", "muted"))
    control = state.windows.get(f"{ws.session}-{CONTROL}")
    if ws.window == CONTROL:
        keys = [k for k in ws.facts if k.startswith(KEY_FACT_PREFIXES)][:12]
        out += [(f"  {k} {_short(ws.facts[k])}", "") for k in keys]
        return out
    diff = ws.diff if ws.diff is not None else _provisional_diff(ws, control)
    if diff is None:
        out.append(("no control facts to compare with", "muted"))
        return out
    provisional = " (so far)" if ws.diff is None else ""
    changed = diff.get("changed", {})
    out.append((f"vs control{provisional}: {len(changed)} changed", "bold"))
    for k, (here, there) in changed.items():
        out.append((f"≠ {k} {_short(here)} ← {_short(there)}", "warning"))
    for k, v in diff.get("only_here", {}).items():
        out.append((f"+ {k} {_short(v)}", "accent"))
    for k, v in diff.get("only_there", {}).items():
        out.append((f"- {k} {_short(v)}", "muted"))
    out.append((f"= {len(diff.get('equal', []))} equal", "muted"))
    return out


def _short(v: Any, n: int = 24) -> str:
    s = str(v)
    return s if len(s) <= n else "…" + s[-(n - 1):]


def _provisional_diff(ws: WindowState, control: WindowState | None) -> dict[str, Any] | None:
    """The engine's diff (``BootFacts.diff``) of the facts so far, while the window boots."""
    if control is None or not control.facts:
        return None
    diff = BootFacts.of(ws.facts).diff(BootFacts.of(control.facts))
    return {**diff, "only_here": {}, "only_there": {}}  # still booting: absence means nothing yet


# ------------------------------------------------------------------ the chart


EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(frac: float, width: int) -> str:
    cells = max(0.0, min(1.0, frac)) * width
    full = int(cells)
    part = EIGHTHS[int((cells - full) * 8)] if full < width else ""
    return ("█" * full + part).ljust(width)


def bars_lines(state: RunState, wkey: str | None, width: int = 10,
               noise: float = 0.0) -> list[list[Seg]]:
    """Window-versus-control bars: the headline first, then one pair of bars per shape."""
    ws = state.windows.get(wkey or "")
    if ws is None:
        return []
    ref = reference(state, ws.key)
    if ref is None:
        return [[(f"{ws.key}: the reference of session {ws.session}", "muted")]]
    what = f"drift vs {ref.session} control" if ws.window == CONTROL else "vs control"
    pairs = shape_pairs(state, ws.key)
    h = headline(state, ws.key)
    if h is None:
        return [[(f"{what}: no shape measured in both yet", "muted")]]
    # A control's delta is drift: past the noise it is a warning, not good or bad news.
    out = [[(f"{what} ", "bold"), interval_seg(*h, noise, "warning" if ws.window == CONTROL else ""),
            (f" (median of {len(pairs)} shapes, [95 % interval]; this │ ref)", "muted")]]
    for shape, here, there, _ in pairs:
        top = max(here, there)
        out.append([(f"{shape:<9} ", ""), (bar(here / top, width), "accent"), (f" {fmt_tok(here):>6}", ""),
                    (" │ ", "muted"), (bar(there / top, width), "muted"), (f" {fmt_tok(there):>6}", "")])
    return out


def rep_series(r: RowState | None) -> list[float]:
    """Every rep of every attempt in landing order: a void attempt then its rerun, side by side."""
    if r is None:
        return []
    return [r.reps[a][n] for a in sorted(r.reps) for n in sorted(r.reps[a])]


def window_series(state: RunState, wkey: str | None) -> list[float]:
    """Every rep of a window in landing order, each as a fraction of its own shape's median.

    Shapes differ by orders of magnitude (C1 against C8), so raw tok/s side by side would hide a
    leak in the small ones; against its own shape's median every sound rep stands near 1 and a
    leaked one is a stub.
    """
    out: list[float] = []
    for r in window_rows(state, wkey) if wkey else []:
        reps = rep_series(r)
        mid = statistics.median(reps) if reps else 0.0
        out += [v / mid if mid > 0 else 0.0 for v in reps]
    return out


def campaign_summary(state: RunState) -> str:
    windows = [w.status for w in state.windows.values()]
    rows = [r.status for r in state.rows.values()]
    w = ", ".join(f"{windows.count(s)} {s}" for s in dict.fromkeys(windows))
    r = ", ".join(f"{rows.count(s)} {s}" for s in dict.fromkeys(rows))
    return f"campaign {state.status}: windows {w or 'none'}; rows {r or 'none'}"


# ------------------------------------------------------------------ the header


def damage_text(state: RunState) -> str:
    """The first damaged journal line, by position, and how many more (``ruler status`` lists them)."""
    first = min(state.damage, key=lambda d: d.line or 0)
    more = f" (+{len(state.damage) - 1} more)" if len(state.damage) > 1 else ""
    return f"journal.jsonl damaged, {first}{more}"


def header_lines(state: RunState, wl: Workload, shown: str | None, link: tuple[bool, str] | None,
                 now: float) -> list[list[Seg]]:
    """Two lines: where the campaign stands; then the engine link (first, so it is never cut
    off on a narrow terminal), the axis and the shape in flight. With sessions on places the
    first counts the sessions and a line per place follows (:func:`place_lines`)."""
    places = on_places(state)
    cur = None if places else state.windows.get(state.current or "")
    where = cur or state.windows.get(shown or "")
    line1: list[Seg] = [(state.campaign or "(waiting for the journal)", "bold")]
    if places:
        line1 += [("·", "muted"), (sessions_text(state), "")]
        if state.status != RunStatus.RUNNING:
            line1 += [("·", "muted"), phase(state)]
    else:
        if where:
            n, m = position(state, where.key)
            line1 += [("·", "muted"), (f"{where.session} {n}/{m}", ""), (where.window, "bold")]
        line1 += [("·", "muted"), phase(state), *pause_seg(state)]
    line1 += [("·", "muted"), (fmt_secs(elapsed(state, now)), "")]
    if state.status == RunStatus.RUNNING:
        line1.append(("~" + fmt_secs(eta(state, wl, now)) + " left", "muted"))
    line2: list[Seg] = [*link_segs(state, link)]
    row = live_row(state, cur.key if cur else None)
    if row:
        line2 += [("·", "muted"), *shape_segs(row, wl)]
    if state.error:
        line2 += [("·", "muted"), (f"engine error: {state.error}", "error")]
    if state.damage:
        line2 += [("·", "muted"), (damage_text(state), "error")]
    if where:
        line2 += [("·", "muted"), ("axis:", "muted"), (where.axis or "-", "")]
    return [line1, line2, *(place_lines(state, wl, shown) if places else [])]


def link_segs(state: RunState, link: tuple[bool, str] | None) -> list[Seg]:
    if link is None:
        return [("engine ?", "muted")]
    connected, _detail = link
    if connected:
        return [("● engine connected", "success")]
    if state.status in OVER_RUNS:
        return [("○ engine exited", "muted")]
    return [("○ engine DISCONNECTED (retrying)", "error")]
