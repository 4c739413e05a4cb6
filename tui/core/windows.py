"""Where the campaign stands, window by window: each window's rows, the one worth showing, its
phase, and the windows list's status word and notes."""

from __future__ import annotations

import itertools

from engine.commands.eta import LoadPlan
from engine.record.state import RowState, RunState, WindowState
from engine.words import LIVE_ROWS, UP_WINDOWS, Check, RowStatus, RunStatus, Verdict, WindowStatus
from tui.core.columns import Col
from tui.core.fmt import Seg
from tui.core.verdicts import verdict_seg, verdict_word


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
    keys = with_rows or started or state.order
    return keys[-1] if keys else None


def position(state: RunState, wkey: str | None) -> tuple[int, int]:
    m = len(state.order)
    return (state.order.index(wkey) + 1 if wkey in state.order else 0), m


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
    if ws.stopping:  # a server may take seconds to go (a dying one, fifteen): said, not a frozen rep
        return "stopping its server", "warning"
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


def queued_text(ws: WindowState) -> str:
    """A batch job waiting in Slurm's queue, with Slurm's reason (Resources, Priority...)."""
    return f"queued ({ws.queue})" if ws.queue else "queued"


def shape_segs(row: RowState, plan: LoadPlan) -> list[Seg]:
    """The shape in flight: its attempt, and the warm pass or the rep it is on."""
    done = len(row.reps.get(row.attempt, {}))
    of = f"/{plan.reps}" if plan.reps else ""
    what = ("warm pass" if row.status == RowStatus.WARM
            else f"rep {min(done + 1, plan.reps or done + 1)}{of}")
    return [(f"{row.cls} {row.load}", "bold"),
            (f"attempt {row.attempt}", "warning" if row.attempt > 1 else ""), (what, "")]


def window_status(state: RunState, wkey: str) -> Seg:
    """One word per window, the most important first: rejected, ruler suspect, void rows, no effect."""
    ws = state.windows[wkey]
    voids = sum(r.status == RowStatus.VOID for r in window_rows(state, wkey))
    if ws.status in (WindowStatus.REJECTED, WindowStatus.FAILED):
        return ws.status.upper(), "error"
    if ws.stopping:
        return "stopping", "warning"
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
    if ws.stopping:
        notes.insert(0, ("server stopping", "warning"))
    waits = reruns_waiting(state, wkey)
    if waits:
        notes.insert(0, (waits, "warning"))
    if ws.simulated:  # every acceptance figure of it was set, not measured
        notes.append(("simulated acceptance", "warning"))
    return notes


def reruns_waiting(state: RunState, wkey: str) -> str:
    """What the operator's reruns of a window's rows wait on, in words ("" when none waits)."""
    waiting = [w for k, w in state.reruns_waiting.items() if k.startswith(f"{wkey}/")]
    if not waiting:
        return ""
    n = len(waiting)
    return f"{n} rerun{'s' if n > 1 else ''} queued, waiting on " + " and ".join(dict.fromkeys(waiting))


def campaign_summary(state: RunState) -> str:
    windows = [w.status for w in state.windows.values()]
    rows = [r.status for r in state.rows.values()]
    w = ", ".join(f"{windows.count(s)} {s}" for s in dict.fromkeys(windows))
    r = ", ".join(f"{rows.count(s)} {s}" for s in dict.fromkeys(rows))
    return f"campaign {state.status}: windows {w or 'none'}; rows {r or 'none'}"


# The delta and its interval always; a queued window's status carries Slurm's reason, which can be
# long: it may be cut, like a name. The window's call first of what the screen's width leaves (it
# is what the run is read by; cut, the detail view has it whole), then the notes and the axis.
WINDOW_COLS = [Col("window", 0, cut=10), Col("status", 0, cut=10), Col("Δ ctl", 0),
               Col("95% CI", 0), Col("call", 1, cut=12), Col("notes", 2, cut=8), Col("axis", 3, cut=8)]
WINDOW_COLUMNS = [c.name for c in WINDOW_COLS]
