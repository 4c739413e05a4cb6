"""``fold(events) -> RunState``: the only way a run's state is derived (printer, console, resume)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.record.journal import Event

QUALITY_STARTED = "quality_started"  # engine/quality/phase.py: a window's quality checks begin


@dataclass
class WindowState:
    session: str
    window: str
    axis: str = ""
    status: str = "pending"  # pending booting measuring done rejected failed aborted
    boot_s: float | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    diff: dict[str, Any] | None = None
    reason: str = ""
    errors: list[str] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)
    log: str = ""
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)  # check -> verdict event
    started_ts: float | None = None  # this boot's window_started (a rerun boots it again)
    ended_ts: float | None = None  # window_finished or window_rejected
    quality: bool = False  # between quality_started and quality_done

    @property
    def key(self) -> str:
        return f"{self.session}-{self.window}"


@dataclass
class RowState:
    """One shape (class x concurrency) of one window, with every attempt's reps."""

    session: str
    window: str
    cls: str
    concurrency: int
    attempt: int = 0
    status: str = "pending"  # pending warm measuring ok noisy void failed aborted
    reps: dict[int, dict[int, float]] = field(default_factory=dict)  # attempt -> rep -> tok/s
    files: dict[int, dict[int, str]] = field(default_factory=dict)  # attempt -> rep -> receipt
    suspects: set[tuple[int, int]] = field(default_factory=set)  # (attempt, rep)
    voids: list[str] = field(default_factory=list)
    row: dict[str, Any] = field(default_factory=dict)  # the final throughput.csv row

    @property
    def key(self) -> str:
        return row_key(self.session, self.window, self.cls, self.concurrency)

    @property
    def complete(self) -> bool:
        """Finished for good: resume skips it (an aborted row is measured again)."""
        return self.status in ("ok", "noisy", "void", "failed")


def row_key(session: str, window: str, cls: str, concurrency: int) -> str:
    return f"{session}-{window}/{cls}/c{concurrency}"


@dataclass
class RunState:
    campaign: str = ""
    run: str = ""
    runtime: str = ""
    server: str = ""
    pid: int | None = None
    status: str = "new"  # new running finished aborted error
    windows: dict[str, WindowState] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    current: str | None = None
    last_seq: int = 0
    started_ts: float | None = None
    finished_ts: float | None = None
    error: str = ""
    rows: dict[str, RowState] = field(default_factory=dict)
    paused: bool = False  # a pause was asked for (the command was accepted)
    pause_held: bool = False  # the pause took effect: the engine waits between reps
    workload: dict[str, Any] = field(default_factory=dict)  # classes, concurrency, reps
    commands: list[dict[str, Any]] = field(default_factory=list)
    resumes: int = 0

    def row(self, e: Event) -> RowState:
        key = row_key(e["session"], e["window"], e["class"], e["concurrency"])
        if key not in self.rows:
            self.rows[key] = RowState(e["session"], e["window"], e["class"], e["concurrency"])
        return self.rows[key]

    def window(self, session: str, window: str) -> WindowState:
        key = f"{session}-{window}"
        if key not in self.windows:
            self.windows[key] = WindowState(session, window)
            self.order.append(key)
        return self.windows[key]


def _w(state: RunState, e: Event) -> WindowState:
    return state.window(e["session"], e["window"])


def apply(state: RunState, e: Event) -> RunState:
    kind = e["kind"]
    state.last_seq = e["seq"]
    if kind == "run_started":
        state.campaign, state.run = e["campaign"], e["run"]
        state.runtime, state.server, state.pid = e["runtime"], e["server"], e.get("pid")
        state.status = "running"
        state.started_ts = state.started_ts or e["ts"]
        state.workload = e.get("workload") or {}
        for session, windows in e.get("sessions", {}).items():
            for w in windows:
                ws = state.window(session, w)
                ws.axis = "control" if w == "control" else e.get("axes", {}).get(w, "")
    elif kind == "window_started":
        ws = _w(state, e)
        ws.status, ws.axis, ws.log = "booting", e.get("axis", ws.axis), e.get("log", "")
        ws.started_ts, ws.ended_ts, ws.quality = e["ts"], None, False
        state.current = ws.key
    elif kind == "server_started":
        _w(state, e).server = {k: v for k, v in e.items() if k not in ("seq", "ts", "kind")}
    elif kind == "boot_fact":
        _w(state, e).facts[e["key"]] = e["value"]
    elif kind == "window_ready":
        ws = _w(state, e)
        ws.status, ws.boot_s, ws.diff = "measuring", e["boot_s"], e.get("diff")
        ws.facts.update(e.get("facts", {}))
    elif kind == "window_rejected":
        ws = _w(state, e)
        ws.status, ws.reason, ws.errors = "rejected", e["reason"], e.get("errors", [])
        ws.ended_ts, ws.quality = e["ts"], False
    elif kind == "window_finished":
        ws = _w(state, e)
        ws.status, ws.ended_ts, ws.quality = e.get("status", "done"), e["ts"], False
    elif kind == QUALITY_STARTED:
        _w(state, e).quality = True
    elif kind == "quality_done":
        _w(state, e).quality = False
    elif kind == "shape_started":
        r = state.row(e)
        r.attempt, r.status = e["attempt"], "warm"
        r.reps.setdefault(e["attempt"], {})
    elif kind == "warm_done":
        state.row(e).status = "measuring"
    elif kind == "rep_done":
        r = state.row(e)
        r.reps.setdefault(e["attempt"], {})[e["rep"]] = e["agg_tok_s"]
        r.files.setdefault(e["attempt"], {})[e["rep"]] = e["file"]
    elif kind == "leak_suspected":
        state.row(e).suspects.add((e["attempt"], e["rep"]))
    elif kind == "rerun_aborted":
        r = state.row(e)
        r.status = r.row.get("status", "pending")  # the row as it stood before the rerun
    elif kind == "row_void":
        state.row(e).voids.append(e["reason"])
    elif kind == "row_done":
        r = state.row(e)
        r.status = e["status"]
        r.row = {k: v for k, v in e.items() if k not in ("seq", "ts", "kind")}
    elif kind == "verdict":
        _w(state, e).verdicts[e["check"]] = {k: v for k, v in e.items() if k not in ("seq", "kind")}
    elif kind == "command":
        state.commands.append({k: v for k, v in e.items() if k not in ("seq", "kind")})
        if e["cmd"] in ("pause", "resume"):
            state.paused = e["cmd"] == "pause"
            state.pause_held = state.pause_held and state.paused
    elif kind == "paused":
        state.pause_held = True
    elif kind == "run_resumed":
        state.status, state.pid, state.resumes = "running", e.get("pid"), state.resumes + 1
        state.paused = state.pause_held = False
    elif kind == "engine_error":
        state.error = e["error"]
    elif kind == "run_finished":
        state.status, state.finished_ts, state.current = e["status"], e["ts"], None
        state.pause_held = False
    return state


def fold(events: Iterable[Event], state: RunState | None = None) -> RunState:
    state = state or RunState()
    for e in events:
        apply(state, e)
    return state
