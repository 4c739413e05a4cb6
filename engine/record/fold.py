"""``fold(events) -> RunState``: the only way a run's state is derived (printer, console, resume):
one handler per event kind that changes the state (engine.record.state holds what they change).

A journal file's state: ``engine.record.snapshot.fold_journal`` (this fold, from a snapshot of it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from itertools import groupby
from operator import attrgetter
from typing import Any, TypeVar

import msgspec

from engine.record.eventcheck import EVENT_OF, TYPED, checked, decode_typed, mistyped
from engine.record.events import ENVELOPE, OPEN, EventKind
from engine.record.journal import BlockFold, Damage, Event, JournalRead, Reader, excerpt
from engine.record.state import RowState, RunState, WindowState, capacity_key
from engine.words import (
    CONTROL,
    WHOLE,
    RowStatus,
    RunStatus,
    WindowStatus,
    is_control,
)


def _w(state: RunState, e: Event) -> WindowState:
    return state.window(e["session"], e["window"])


_NO_TS = frozenset({"seq", "kind"})  # verdicts and commands keep their time


def _fields(e: Event, drop: frozenset[str] = ENVELOPE) -> dict[str, Any]:
    out = dict(e)  # copied in C, the few dropped after: a row_done has seventy fields
    for k in drop:
        out.pop(k, None)
    return out


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
    _rep(state.row(e), e["attempt"], e["rep"], e.get("steady_tok_s"), e["agg_tok_s"], e["file"],
         e.get("gpu"))


def _rep(r: RowState, attempt: int, rep: int, steady: float | None, agg: float, file: str,
         gpu: dict[str, Any] | None) -> None:
    """A rep landed: its headline over its steady window when it has one (a rep from before it:
    whole), its tok/s over the whole rep, its receipt and its GPU's figures."""
    r.reps.setdefault(attempt, {})[rep] = steady or agg
    r.whole.setdefault(attempt, {})[rep] = agg
    r.files.setdefault(attempt, {})[rep] = file
    if gpu:
        r.gpu.setdefault(attempt, {})[rep] = gpu


def _rep_done_typed(state: RunState, t: Any) -> bool:
    """:func:`_rep_done` of its Struct as decoded (a day-long journal's rep_done events, folded
    without a dict made of each): False, nothing folded, when a field it needs is absent (the
    event's dict, folded then, says which)."""
    need = (t.session, t.window, t.class_, t.concurrency, t.attempt, t.rep, t.agg_tok_s, t.file)
    if msgspec.UNSET in need:
        return False
    # An absent optional field is UNSET, which is falsy: as the dict's get gives None.
    _rep(state.row_of(t.session, t.window, t.class_, t.concurrency,
                      None if t.rate is msgspec.UNSET else t.rate),
         t.attempt, t.rep, t.steady_tok_s or None, t.agg_tok_s, t.file, t.gpu or None)
    return True


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
    except _UNUSABLE as ex:
        state.damage.append(_unusable(e, ex, line))
    return state


# What a handler raises on an event it cannot use (a field missing, a value it cannot take).
_UNUSABLE = (KeyError, TypeError, ValueError, AttributeError, ArithmeticError)


def _unusable(e: Event, ex: Exception, line: int | None) -> Damage:
    what = f"no {ex.args[0]!r}" if isinstance(ex, KeyError) else str(ex)
    return Damage(line, f"{e['kind']} event the fold cannot use ({what})", _excerpt(e))


def _excerpt(e: Event) -> str:
    return excerpt(json.dumps(e, separators=(",", ":"), default=str))


def fold(events: Iterable[Event], state: RunState | None = None) -> RunState:
    state = state or RunState()
    for e in events:
        apply(state, e)
    return state


def fold_read(read: JournalRead, state: RunState | None = None) -> RunState:
    """The lines read folded onto ``state``: a snapshot's fold of the lines before them, or none;
    the events already folded into it as they were read (read_journal's ``fold``: fold_lines) when
    ``read`` kept none. The damaged lines the read found join the fold's, in line order."""
    state = RunState() if state is None else state
    fold_lines(state, read.events)
    state.damage = sorted(read.damage + state.damage, key=lambda d: d.line or 0)
    return state


@functools.cache
def _known(kind: str) -> tuple[Callable[[Event], str | None], Handler | None] | None:
    """A kind this version knows: its fields' check and its handler (None: on record only)."""
    fields = checked(kind)
    return None if fields is None else (fields.why_not, HANDLERS.get(kind))


def fold_lines(state: RunState, events: Iterable[tuple[int, Event]]) -> None:
    """:func:`apply` over a journal's lines, its common case in one loop: the next seq, a kind
    this version knows, its fields of their types (a day-long journal's hundred thousand events,
    where each call and lookup apply makes costs tens of milliseconds). Any other event is
    apply's, which says what is wrong with it."""
    known = _known
    for line, e in events:
        taken = known(e["kind"])
        if taken is None or e["seq"] != state.last_seq + 1 or taken[0](e) is not None:
            apply(state, e, line)
            continue
        state.last_seq = e["seq"]
        if taken[1] is not None:
            try:
                taken[1](state, e)
            except _UNUSABLE as ex:
                state.damage.append(_unusable(e, ex, line))


# The kinds whose handler keeps the event itself (_fields): it is folded as read, its keys in the
# order the line has them and, of an open kind, the fields its Struct leaves out (fold_typed).
AS_READ = frozenset({EventKind.SERVER_STARTED, EventKind.VERDICT, EventKind.ROW_DONE,
                     EventKind.CAPACITY, EventKind.COMMAND, EventKind.VERDICT_LOOK}) | OPEN
# The kinds folded from their Struct itself where it has every field they need (a third of a
# day-long journal's events that are not boot facts): each its handler's twin on the Struct.
TypedHandler = Callable[[RunState, Any], bool]
_ON_STRUCT: dict[str, TypedHandler] = {EventKind.REP_DONE: _rep_done_typed}
# Each kind's Struct: its handler, whether its event is folded as the reader reads it, whether
# the Struct checked its fields, its event as a dict, and its handler on the Struct, if any.
_TYPED: dict[type, tuple[Handler | None, bool, bool, Callable[[Any], Event], TypedHandler | None]] = {
    cls: (HANDLERS.get(kind), not strict or kind in AS_READ, strict, EVENT_OF[cls],
          _ON_STRUCT.get(kind) if strict else None)
    for cls, (kind, strict) in TYPED.items()}
_SEQ_OF = attrgetter("seq")
_as_read = msgspec.json.Decoder().decode
_FACT = next(cls for cls, (kind, strict) in TYPED.items() if kind == EventKind.BOOT_FACT and strict)


def _boot_facts(state: RunState, run: list[Any]) -> bool:
    """A run of boot facts (three in four events of a day-long journal) folded as
    :func:`_boot_fact` folds each, at once: True when they are of one window and none lacks a
    field (else they are folded one by one)."""
    unset = msgspec.UNSET  # a field absent (a JSON value is never it)
    session, window = run[0].session, run[0].window
    if session is unset or window is unset:
        return False
    for t in run:
        if t.session != session or t.window != window or t.key is unset or t.value is unset:
            return False
    facts = state.window(session, window).facts
    for t in run:
        facts[t.key] = t.value
    state.last_seq = run[-1].seq
    return True


def fold_typed(state: RunState, lines: list[bytes], reader: Reader) -> bool:
    """A block of a journal's lines folded onto ``state`` when each is an event of a kind this
    version knows, of its fields' types (engine.record.eventcheck.decode_typed, in C), and their
    seqs follow the state's: a day-long journal's common block, folded here with no check a line
    in Python. False, nothing folded, when some line is not: the reader reads them, and
    :func:`fold_lines` says what is wrong with which."""
    try:
        typed = list(map(decode_typed, lines))
    except (msgspec.DecodeError, RecursionError):  # RecursionError: nested past the parser's depth
        return False
    first = state.last_seq + 1
    if list(map(_SEQ_OF, typed)) != list(range(first, first + len(typed))):
        return False
    plan, n = _TYPED, reader.line
    at = n + 1  # the number of the block's first line
    for cls, group in groupby(typed, type):
        run = list(group)
        if cls is _FACT and _boot_facts(state, run):
            n += len(run)
            continue
        handler, as_read, checked, event, on_struct = plan[cls]
        for t in run:
            n += 1
            if on_struct is not None and on_struct(state, t):
                state.last_seq = t.seq
                continue
            if as_read and not checked:  # read and checked as the journal's reader does
                e = reader.one(lines[n - at], n)
                if e is not None:
                    fold_lines(state, [(n, e)])
                continue
            # Its Struct took the line: it reads as the standard parser reads it (wide integers
            # exact), the last of a repeated key kept.
            e = _as_read(lines[n - at]) if as_read else None
            state.last_seq = t.seq
            if handler is not None:
                try:
                    handler(state, event(t) if e is None else e)
                except _UNUSABLE as ex:  # said of the event as read (its excerpt: the line's order)
                    state.damage.append(_unusable(_as_read(lines[n - at]), ex, n))
    reader.line = n
    return True


class Folding(BlockFold):
    """The fold of a journal file's lines onto ``state`` (read_journal's ``fold``): each block by
    :func:`fold_typed` where it takes it, else as read, by :func:`fold_lines`."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    def __call__(self, events: list[tuple[int, Event]]) -> None:
        fold_lines(self.state, events)

    def block(self, lines: list[bytes], reader: Reader) -> bool:
        return fold_typed(self.state, lines, reader)
