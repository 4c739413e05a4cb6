"""``fold(events) -> RunState``: the only way a run's state is derived (printer, console, resume).

A journal file's state: ``engine.record.snapshot.fold_journal`` (this fold, from a snapshot of it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engine.method.steady import WHOLE
from engine.record.eventcheck import mistyped
from engine.record.events import ENVELOPE, EventKind
from engine.record.journal import Damage, Event, JournalRead, excerpt
from engine.words import (
    COMPLETE_ROWS,
    COMPLETE_WINDOWS,
    CONTROL,
    UP_WINDOWS,
    Check,
    RowStatus,
    RunStatus,
    SessionStatus,
    Verdict,
    WindowStatus,
    is_control,
    load_label,
    row_key,
)


@dataclass
class WindowState:
    session: str
    window: str
    axis: str = ""
    status: str = WindowStatus.PENDING
    boot_s: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    diff: dict[str, Any] | None = None
    reason: str = ""
    errors: list[str] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)  # what was started: argv, env, image (window_started)
    log: str = ""
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # check -> verdict event
    stack: str = ""  # a window on another stack: its server; "" on the campaign's own
    # A window on another stack: class -> its parity with the control's (the parity event's)
    parity: dict[str, dict[str, Any]] = field(default_factory=dict)
    started_ts: float | None = None  # this boot's window_started (a rerun boots it again)
    ended_ts: float | None = None  # window_finished or window_rejected
    quality: bool = False  # between quality_started and quality_done
    queue: str = ""  # a queued batch job: the scheduler's reason it waits (Resources, Priority...)
    placed: str = ""  # the node the scheduler placed its batch job on (window_placed)
    stopping: bool = False  # its server's stop began and has not ended (server_stopping)
    simulated: str = ""  # how its server was told to simulate acceptance ("" : it measures its own)

    @property
    def key(self) -> str:
        return f"{self.session}-{self.window}"

    @property
    def ruler_suspect(self) -> bool:
        """The ruler check found a request knob inert: every figure of this window is suspect."""
        return self.verdicts.get(Check.KNOBS, {}).get("verdict") == Verdict.RULER_SUSPECT

    @property
    def node(self) -> str:
        """The node its batch job ran on: where it was placed, else the job's boot fact."""
        return self.placed or str(self.facts.get("node") or "")


@dataclass
class RowState:
    """One shape (class x load: a concurrency, or an open-loop rate) of one window, with every
    attempt's reps."""

    session: str
    window: str
    cls: str
    concurrency: int  # 0 for an open-loop row
    rate: float | None = None  # an open-loop row's arrival rate, requests per second
    attempt: int = 0
    status: str = RowStatus.PENDING
    reps: dict[int, dict[int, float]] = field(default_factory=dict)  # attempt -> rep -> tok/s
    whole: dict[int, dict[int, float]] = field(default_factory=dict)  # the same over the whole rep
    files: dict[int, dict[int, str]] = field(default_factory=dict)  # attempt -> rep -> receipt
    gpu: dict[int, dict[int, dict[str, Any]]] = field(default_factory=dict)  # ... -> power, clock
    suspects: set[tuple[int, int]] = field(default_factory=set)  # (attempt, rep)
    voids: list[str] = field(default_factory=list)
    row: dict[str, Any] = field(default_factory=dict)  # the final throughput.csv row

    @property
    def key(self) -> str:
        return row_key(self.session, self.window, self.cls, self.concurrency, self.rate)

    @property
    def load(self) -> str:
        return load_label(self.concurrency, self.rate)

    @property
    def complete(self) -> bool:
        """Finished for good: resume skips it (an aborted row is measured again)."""
        return self.status in COMPLETE_ROWS


@dataclass
class RunState:
    campaign: str = ""
    run: str = ""
    runtime: str = ""
    server: str = ""
    pid: int | None = None
    status: str = RunStatus.NEW
    windows: dict[str, WindowState] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    current: str | None = None
    last_seq: int = 0
    started_ts: float | None = None
    finished_ts: float | None = None
    error: str = ""
    rows: dict[str, RowState] = field(default_factory=dict)
    paused: bool = False  # a pause was asked for (the command was accepted)
    # Whose pause: the sessions named (`pause s2`, parallel places), "" for one naming none.
    paused_sessions: set[str] = field(default_factory=set)
    pause_held: bool = False  # the pause took effect: the engine waits between reps
    held_sessions: set[str] = field(default_factory=set)  # whose pause took effect (`paused`)
    workload: dict[str, Any] = field(default_factory=dict)  # run_started's (events.Workload)
    leak: dict[str, Any] = field(default_factory=dict)  # run_started's (events.LeakRecord)
    verdict: dict[str, Any] = field(default_factory=dict)  # run_started's (events.VerdictRecord)
    commands: list[dict[str, Any]] = field(default_factory=list)
    resumes: int = 0
    damage: list[Damage] = field(default_factory=list)  # journal lines that are not its next event
    session_places: dict[str, str] = field(default_factory=dict)  # session -> the place it began on
    capacity: dict[str, dict[str, Any]] = field(default_factory=dict)  # <session>-<window>/<class> -> answer
    sweeps: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_started's (events.Sweep)
    # Boots added until decided: each look (events.VerdictLook), each session added -> its order
    looks: list[dict[str, Any]] = field(default_factory=list)
    added: dict[str, list[str]] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)  # run_started's: an earlier run's noise
    # Rows an operator queued to rerun whose window has not booted again yet: row -> what the
    # rerun waits on, in words (rerun_waiting).
    reruns_waiting: dict[str, str] = field(default_factory=dict)

    @property
    def live(self) -> list[WindowState]:
        """Every window up now (queued, booting or measuring): one per place in a parallel run."""
        return [self.windows[k] for k in self.order if self.windows[k].status in UP_WINDOWS]

    @property
    def up_now(self) -> str | None:
        """The window in flight: ``current`` (the one started last) while it is up, else the one
        started last of those still up on other places, else none (between windows, or while a
        place waits on its host). ``current`` itself stays on an ended window, for the console."""
        ws = self.windows.get(self.current or "")
        if ws is not None and ws.status in UP_WINDOWS:
            return ws.key
        live = [w for w in self.live if w.started_ts is not None]
        return max(live, key=lambda w: w.started_ts or 0.0).key if live else None

    @property
    def measured(self) -> bool:
        """Some row has figures: the campaign produced a result (else exit code 4). A void row
        counts when its reps moved tokens (a leaked pass); one whose every request failed (an
        HTTP error, a stream that is not SSE, a failed cache flush: 0 tok/s) measured nothing."""
        return any(r.status in (RowStatus.OK, RowStatus.NOISY)
                   or (r.status == RowStatus.VOID and (r.row.get("agg_tok_s") or 0) > 0)
                   for r in self.rows.values())

    def nothing_measured(self) -> str:
        """Why no row has a figure, for the line beside exit code 4."""
        void = [r for r in self.rows.values() if r.status in (RowStatus.VOID, RowStatus.FAILED)]
        if void:
            first = void[0]
            why = first.row.get("reason") or (first.voids[-1] if first.voids else first.status)
            return (f"every row is void or failed, none moved a token ({len(void)} rows; "
                    f"{first.key}: {why})")
        ended = [w for w in self.windows.values() if w.status in (
            WindowStatus.REJECTED, WindowStatus.FAILED)]
        if ended:
            return (f"every window was rejected or failed ({len(ended)}; {ended[0].key}: "
                    f"{ended[0].reason or ended[0].status})")
        return "no row was measured"

    def session_status(self) -> dict[str, SessionStatus]:
        """Each session, in campaign order: done when every window of it is complete, queued
        while it has not begun (no window started, not taken by a place), running in between."""
        windows: dict[str, list[WindowState]] = {}
        for k in self.order:
            windows.setdefault(self.windows[k].session, []).append(self.windows[k])
        out = {}
        for session, ws in windows.items():
            if all(w.status in COMPLETE_WINDOWS for w in ws):
                out[session] = SessionStatus.DONE
            elif session in self.session_places or any(w.status != WindowStatus.PENDING for w in ws):
                out[session] = SessionStatus.RUNNING
            else:
                out[session] = SessionStatus.QUEUED
        return out

    def row(self, e: Event) -> RowState:
        key = row_key(e["session"], e["window"], e["class"], e["concurrency"], e.get("rate"))
        if key not in self.rows:
            self.rows[key] = RowState(e["session"], e["window"], e["class"], e["concurrency"],
                                      e.get("rate"))
        return self.rows[key]

    def window(self, session: str, window: str) -> WindowState:
        key = f"{session}-{window}"
        if key not in self.windows:
            self.windows[key] = WindowState(session, window)
            self.order.append(key)
        return self.windows[key]


def earlier_sessions(order: Sequence[str], places: Mapping[str, str], session: str) -> list[str]:
    """The sessions a session's control may be compared with, nearest first: those before it in
    the campaign's order and, when sessions run on places, only those begun on its place. A place
    runs its sessions one at a time, in that order, so each of them has ended before this one
    began; a session on another place may still be running, and taking its control would make a
    comparison depend on which thread got there first."""
    before = list(order[:list(order).index(session)]) if session in order else []
    place = places.get(session)
    return [s for s in reversed(before) if place is None or places.get(s) == place]


def _w(state: RunState, e: Event) -> WindowState:
    return state.window(e["session"], e["window"])


_NO_TS = frozenset({"seq", "kind"})  # verdicts and commands keep their time


def _fields(e: Event, drop: frozenset[str] = ENVELOPE) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k not in drop}


# One handler per event kind that changes the state; every other kind is on record only.

def _run_started(state: RunState, e: Event) -> None:
    state.campaign, state.run = e["campaign"], e["run"]
    state.runtime, state.server, state.pid = e["runtime"], e["server"], e.get("pid")
    state.status = RunStatus.RUNNING
    state.started_ts = state.started_ts or e["ts"]
    state.workload = e.get("workload") or {}
    state.leak, state.verdict = e.get("leak") or {}, e.get("verdict") or {}
    state.sweeps = e.get("sweeps") or {}
    state.baseline = e.get("baseline") or {}
    for session, windows in e.get("sessions", {}).items():
        for w in windows:
            ws = state.window(session, w)
            ws.axis = CONTROL if is_control(w) else e.get("axes", {}).get(w, "")


def _session_added(state: RunState, e: Event) -> None:
    state.added[e["session"]] = list(e["windows"])
    for w in e["windows"]:
        ws = state.window(e["session"], w)
        ws.axis = CONTROL if is_control(w) else next(
            (o.axis for o in state.windows.values() if o.window == w and o.axis), ws.axis)


def _verdict_look(state: RunState, e: Event) -> None:
    state.looks.append(_fields(e))


def _session_started(state: RunState, e: Event) -> None:
    if e.get("place"):
        state.session_places.setdefault(e["session"], e["place"])


def _window_started(state: RunState, e: Event) -> None:
    ws = _w(state, e)
    ws.status, ws.axis, ws.log = WindowStatus.BOOTING, e.get("axis", ws.axis), e.get("log", "")
    ws.plan = e.get("plan") or {}
    ws.stack = e.get("stack", "")
    ws.simulated = e.get("simulated", "")
    ws.started_ts, ws.ended_ts, ws.quality, ws.queue = e["ts"], None, False, ""
    state.current = ws.key


def _server_started(state: RunState, e: Event) -> None:
    _w(state, e).server = _fields(e)


def _window_queued(state: RunState, e: Event) -> None:
    ws = _w(state, e)
    ws.status, ws.queue = WindowStatus.QUEUED, e["reason"]


def _window_placed(state: RunState, e: Event) -> None:
    ws = _w(state, e)
    ws.status, ws.queue, ws.placed = WindowStatus.BOOTING, "", e["node"]


def _boot_fact(state: RunState, e: Event) -> None:
    _w(state, e).facts[e["key"]] = e["value"]


def _window_ready(state: RunState, e: Event) -> None:
    ws = _w(state, e)
    ws.status, ws.boot_s, ws.diff = WindowStatus.MEASURING, e["boot_s"], e.get("diff")
    ws.facts.update(e.get("facts", {}))


def _window_rejected(state: RunState, e: Event) -> None:
    ws = _w(state, e)
    ws.status, ws.reason, ws.errors = WindowStatus.REJECTED, e["reason"], e.get("errors", [])
    ws.ended_ts, ws.quality = e["ts"], False


def _window_finished(state: RunState, e: Event) -> None:
    ws = _w(state, e)
    ws.status, ws.ended_ts, ws.quality = e.get("status", WindowStatus.DONE), e["ts"], False
    ws.reason = e.get("reason", "")  # a failed window says why (a dead server, the window timeout)
    # A pause held in a window ends with it (advanced while paused); asked still, it holds again
    # before the next window's first rep.
    state.held_sessions.discard(ws.session)
    state.pause_held = bool(state.held_sessions)


def _server_stopping(state: RunState, e: Event) -> None:
    _w(state, e).stopping = True


def _server_stopped(state: RunState, e: Event) -> None:
    _w(state, e).stopping = False


def _rerun_waiting(state: RunState, e: Event) -> None:
    state.reruns_waiting.update(dict.fromkeys(e["rows"], e["waiting"]))


def _window_reboot(state: RunState, e: Event) -> None:
    """The window boots again for its queued reruns: none of its rows waits any more."""
    prefix = f"{e['session']}-{e['window']}/"
    state.reruns_waiting = {k: v for k, v in state.reruns_waiting.items() if not k.startswith(prefix)}


def _quality_started(state: RunState, e: Event) -> None:
    _w(state, e).quality = True


def _quality_done(state: RunState, e: Event) -> None:
    _w(state, e).quality = False


def _shape_started(state: RunState, e: Event) -> None:
    r = state.row(e)
    state.reruns_waiting.pop(r.key, None)  # a rerun measured in its window, still up
    r.attempt, r.status = e["attempt"], RowStatus.WARM
    r.reps.setdefault(e["attempt"], {})
    # The reps a rerun keeps (only the condemned ones are measured again) are the new attempt's
    # first, numbered from 1: the same figures and receipts as where they were measured.
    for n, (attempt, rep) in enumerate(e.get("carried", []), 1):
        _carry(r.reps, attempt, rep, e["attempt"], n)
        _carry(r.whole, attempt, rep, e["attempt"], n)
        _carry(r.files, attempt, rep, e["attempt"], n)
        _carry(r.gpu, attempt, rep, e["attempt"], n)


T = TypeVar("T")


def _carry(table: dict[int, dict[int, T]], attempt: int, rep: int, to: int, n: int) -> None:
    if rep in table.get(attempt, {}):
        table.setdefault(to, {})[n] = table[attempt][rep]


def _warm_done(state: RunState, e: Event) -> None:
    state.row(e).status = RowStatus.MEASURING


def _rep_done(state: RunState, e: Event) -> None:
    r = state.row(e)
    # A rep's headline: over its steady window when it has one (a rep from before it: whole).
    r.reps.setdefault(e["attempt"], {})[e["rep"]] = e.get("steady_tok_s") or e["agg_tok_s"]
    r.whole.setdefault(e["attempt"], {})[e["rep"]] = e["agg_tok_s"]
    r.files.setdefault(e["attempt"], {})[e["rep"]] = e["file"]
    if e.get("gpu"):
        r.gpu.setdefault(e["attempt"], {})[e["rep"]] = e["gpu"]


def _leak_suspected(state: RunState, e: Event) -> None:
    state.row(e).suspects.add((e["attempt"], e["rep"]))


def _rerun_aborted(state: RunState, e: Event) -> None:
    r = state.row(e)
    r.status = r.row.get("status", RowStatus.PENDING)  # the row as it stood before the rerun


def _row_void(state: RunState, e: Event) -> None:
    state.row(e).voids.append(e["reason"])


def _row_done(state: RunState, e: Event) -> None:
    r = state.row(e)
    r.status = e["status"]
    r.row = _fields(e)
    # Each rep landed with its steady window's tok/s; a row over the whole reps (a rep's window
    # too short to carry it) lists its reps as its median is over them.
    if e.get("basis") == WHOLE and r.attempt in r.whole:
        r.reps[r.attempt] = dict(r.whole[r.attempt])


def capacity_key(session: str, window: str, cls: str) -> str:
    return f"{session}-{window}/{cls}"


def _capacity(state: RunState, e: Event) -> None:
    state.capacity[capacity_key(e["session"], e["window"], e["class"])] = _fields(e)


def _parity(state: RunState, e: Event) -> None:
    _w(state, e).parity = dict(e["classes"])


def _verdict(state: RunState, e: Event) -> None:
    _w(state, e).verdicts[e["check"]] = _fields(e, _NO_TS)


def _command(state: RunState, e: Event) -> None:
    cmd = e["cmd"]  # read first: a command without one is damage, never in state.commands
    state.commands.append(_fields(e, _NO_TS))
    if cmd in ("pause", "resume"):
        who = e["args"][0] if e.get("args") else ""
        if cmd == "pause":
            state.paused_sessions.add(who)
        elif who:
            state.paused_sessions.discard(who)
        else:
            state.paused_sessions.clear()
        if cmd == "resume" and who:
            state.held_sessions.discard(who)
        elif cmd == "resume":
            state.held_sessions.clear()
        state.paused = bool(state.paused_sessions)
        state.pause_held = bool(state.held_sessions)


def _paused(state: RunState, e: Event) -> None:
    if "" in state.paused_sessions:  # the pause that named no session was this one's
        state.paused_sessions.discard("")
        state.paused_sessions.add(e["session"])
    state.held_sessions.add(e["session"])
    state.pause_held = True


def _run_resumed(state: RunState, e: Event) -> None:
    state.status, state.pid, state.resumes = RunStatus.RUNNING, e.get("pid"), state.resumes + 1
    state.paused = state.pause_held = False
    state.paused_sessions.clear()
    state.held_sessions.clear()
    # The engine before this one held the queued reruns and stopped its servers (or left them to
    # this one's stray stop): nothing of that waits any more.
    state.reruns_waiting.clear()
    for ws in state.windows.values():
        ws.stopping = False


def _engine_error(state: RunState, e: Event) -> None:
    state.error = e["error"]


def _run_finished(state: RunState, e: Event) -> None:
    state.status, state.finished_ts, state.current = e["status"], e["ts"], None
    state.reruns_waiting.clear()  # the run ended: a rerun still queued never boots
    state.paused = state.pause_held = False  # a pause ends with the run (an abort while paused)
    state.paused_sessions.clear()
    state.held_sessions.clear()


Handler = Callable[[RunState, Event], None]
HANDLERS: dict[str, Handler] = {
    EventKind.RUN_STARTED: _run_started,
    EventKind.SESSION_STARTED: _session_started,
    EventKind.SESSION_ADDED: _session_added,
    EventKind.VERDICT_LOOK: _verdict_look,
    EventKind.WINDOW_STARTED: _window_started,
    EventKind.SERVER_STARTED: _server_started,
    EventKind.WINDOW_QUEUED: _window_queued,
    EventKind.WINDOW_PLACED: _window_placed,
    EventKind.BOOT_FACT: _boot_fact,
    EventKind.WINDOW_READY: _window_ready,
    EventKind.WINDOW_REJECTED: _window_rejected,
    EventKind.WINDOW_FINISHED: _window_finished,
    EventKind.SERVER_STOPPING: _server_stopping,
    EventKind.SERVER_STOPPED: _server_stopped,
    EventKind.RERUN_WAITING: _rerun_waiting,
    EventKind.WINDOW_REBOOT: _window_reboot,
    EventKind.QUALITY_STARTED: _quality_started,
    EventKind.QUALITY_DONE: _quality_done,
    EventKind.SHAPE_STARTED: _shape_started,
    EventKind.WARM_DONE: _warm_done,
    EventKind.REP_DONE: _rep_done,
    EventKind.LEAK_SUSPECTED: _leak_suspected,
    EventKind.RERUN_ABORTED: _rerun_aborted,
    EventKind.ROW_VOID: _row_void,
    EventKind.ROW_DONE: _row_done,
    EventKind.CAPACITY: _capacity,
    EventKind.VERDICT: _verdict,
    EventKind.PARITY: _parity,
    EventKind.COMMAND: _command,
    EventKind.PAUSED: _paused,
    EventKind.RUN_RESUMED: _run_resumed,
    EventKind.ENGINE_ERROR: _engine_error,
    EventKind.RUN_FINISHED: _run_finished,
}


def apply(state: RunState, e: Event, line: int | None = None) -> RunState:
    """Fold one event in. Each event's seq is the one before plus 1: an event that repeats or goes
    back is recorded as damage and left out; one after a gap is recorded and folded in."""
    seq, last = e["seq"], state.last_seq
    if seq <= last:
        why = f"duplicate seq {seq}" if seq == last else f"seq {seq} out of order (after {last})"
        state.damage.append(Damage(line, why, _excerpt(e)))
        return state
    if seq != last + 1:
        state.damage.append(Damage(line, f"seq {seq} after seq {last}: {seq - last - 1} events "
                                         f"missing", _excerpt(e)))
    state.last_seq = seq
    # A hand-edited or foreign line: a known kind with a field of another type (checked before
    # it is folded: a value folded in would fail whoever reads the state), or without a field
    # it carries, or with a value no handler can use (an integer too wide for a rate).
    wrong = mistyped(e)
    if wrong is not None:
        state.damage.append(Damage(line, f"{e['kind']} event the fold cannot use ({wrong})",
                                   _excerpt(e)))
        return state
    handler = HANDLERS.get(e["kind"])  # a kind this version does not fold (a newer engine's) is skipped
    if handler is None:
        return state
    try:
        handler(state, e)
    except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError) as ex:
        what = f"no {ex.args[0]!r}" if isinstance(ex, KeyError) else str(ex)
        state.damage.append(Damage(line, f"{e['kind']} event the fold cannot use ({what})",
                                   _excerpt(e)))
    return state


def _excerpt(e: Event) -> str:
    return excerpt(json.dumps(e, separators=(",", ":"), default=str))


def fold(events: Iterable[Event], state: RunState | None = None) -> RunState:
    state = state or RunState()
    for e in events:
        apply(state, e)
    return state


def fold_read(read: JournalRead, state: RunState | None = None) -> RunState:
    """The lines read folded onto ``state``: a snapshot's fold of the lines before them, or none."""
    state = RunState() if state is None else state
    for line, e in read.events:
        apply(state, e, line)
    state.damage = sorted(read.damage + state.damage, key=lambda d: d.line or 0)
    return state
