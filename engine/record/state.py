"""A run's state: its windows, rows and sessions as the journal's fold leaves them
(engine.record.fold: ``fold(events) -> RunState``, the only way it is derived).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.record.journal import Damage, Event
from engine.words import (
    COMPLETE_ROWS,
    COMPLETE_WINDOWS,
    UP_WINDOWS,
    Check,
    RowStatus,
    RunStatus,
    SessionStatus,
    Verdict,
    WindowStatus,
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
        return self.row_of(e["session"], e["window"], e["class"], e["concurrency"], e.get("rate"))

    def row_of(self, session: str, window: str, cls: str, concurrency: int,
               rate: float | None = None) -> RowState:
        key = row_key(session, window, cls, concurrency, rate)
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = RowState(session, window, cls, concurrency, rate)
        return r

    def window(self, session: str, window: str) -> WindowState:
        key = f"{session}-{window}"
        ws = self.windows.get(key)
        if ws is None:
            ws = self.windows[key] = WindowState(session, window)
            self.order.append(key)
        return ws


def earlier_sessions(order: Sequence[str], places: Mapping[str, str], session: str) -> list[str]:
    """The sessions a session's control may be compared with, nearest first: those before it in
    the campaign's order and, when sessions run on places, only those begun on its place. A place
    runs its sessions one at a time, in that order, so each of them has ended before this one
    began; a session on another place may still be running, and taking its control would make a
    comparison depend on which thread got there first."""
    before = list(order[:list(order).index(session)]) if session in order else []
    place = places.get(session)
    return [s for s in reversed(before) if place is None or places.get(s) == place]


def capacity_key(session: str, window: str, cls: str) -> str:
    return f"{session}-{window}/{cls}"
