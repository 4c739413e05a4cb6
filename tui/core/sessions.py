"""Sessions on places: which run, which the window keys act on, whose pause, a line per place."""

from __future__ import annotations

from engine.commands.eta import LoadPlan
from engine.record.state import RunState
from engine.words import RunStatus, SessionStatus, WindowStatus
from tui.core.fmt import Seg
from tui.core.windows import live_row, shape_segs, window_phase


def on_places(state: RunState) -> bool:
    """Sessions run on places, several at once: the header gives each place a line and counts
    the sessions, and the window keys name the session they act on."""
    return bool(state.session_places) or len({w.session for w in state.live}) > 1


def running_sessions(state: RunState) -> list[str]:
    return [s for s, p in state.session_status().items() if p == SessionStatus.RUNNING]


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


def which_session(state: RunState, cmd: str) -> list[Seg]:
    """A window command while several sessions run and the cursor is on none of them."""
    running = ", ".join(running_sessions(state))
    return [(f"{cmd}:", "bold"), (f"sessions {running} run at once: put the cursor on a window of the "
                                  "one to act on", "warning")]


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


def place_lines(state: RunState, plan: LoadPlan, shown: str | None) -> list[list[Seg]]:
    """One line per place: the session on it now, its live window (the shape and rep in flight,
    else its phase) or why none; ``▸`` marks the one the window keys act on."""
    places: dict[str, str] = {}  # place -> the session begun on it last
    for session, place in state.session_places.items():
        places[place] = session
    keyed = keyed_session(state, shown)
    statuses = state.session_status()
    out = []
    for place, session in places.items():
        ws = next((w for w in state.live if state.session_places.get(w.session) == place), None)
        session = ws.session if ws else session  # a live window says who holds the place now
        line: list[Seg] = [("▸" if session == keyed else " ", "accent"), ("place", "muted"),
                           (place, "bold"), ("·", "muted")]
        if ws is None:
            word = statuses.get(session, "")
            if word == SessionStatus.RUNNING:
                word = "between windows" if state.status == RunStatus.RUNNING else "stopped"
            line.append((f"{session} {word}", "muted"))
        else:
            row = live_row(state, ws.key)
            # A shape in flight says what it does (its warm pass or rep); else the window's phase.
            what = shape_segs(row, plan) if row and ws.status == WindowStatus.MEASURING \
                and not ws.quality else [window_phase(state, ws)]
            line += [(f"{ws.session} {ws.window}", "bold"), ("·", "muted"), *what]
        line += pause_seg(state, session)
        out.append(line)
    return out


def sessions_text(state: RunState) -> str:
    """Sessions running, queued and done; once the run is over, those begun and not done were
    stopped and those queued never began (each said only when there are some)."""
    statuses = list(state.session_status().values())
    if state.status == RunStatus.RUNNING:
        counts = [f"{statuses.count(s)} {s}" for s in
                  (SessionStatus.RUNNING, SessionStatus.QUEUED, SessionStatus.DONE)]
    else:
        counts = [f"{statuses.count(s)} {word}" for s, word in
                  ((SessionStatus.RUNNING, "stopped"), (SessionStatus.QUEUED, "not begun"),
                   (SessionStatus.DONE, "done"))
                  if statuses.count(s) or s == SessionStatus.DONE]
    return "sessions " + ", ".join(counts)
