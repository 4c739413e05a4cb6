"""Operator commands from the control socket: what each does now, or why it does not apply.

Commands only set flags on a place's controls; that place's thread acts on them between steps
(abort also cancels the requests in flight). When sessions run in parallel, ``advance``, ``rewarm``,
``pause`` and ``resume`` name a session (``advance s2``) unless only one runs; ``abort`` ends them
all; ``rerun ROW`` goes to the row's session's place. Every accepted command is journaled with who
sent it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.context import Controls, RunContext
from engine.control import CommandRefused
from engine.record.events import EventKind
from engine.record.state import RunState
from engine.words import RERUNNABLE_ROWS, UP_WINDOWS, RowStatus, RunStatus, WindowStatus, stop_keeps

SESSION_COMMANDS = ("advance", "rewarm", "pause", "resume")  # act on one session's window
WORDLESS = ("abort", "status", *SESSION_COMMANDS)  # nothing after the session a command names


def handle(run: RunContext, cmd: str, args: list[str], who: dict[str, Any],
           live: Mapping[str, Controls] | None = None) -> str:
    """One control-socket command; raises CommandRefused saying why when it does not apply.
    ``live``: the controls of each session running now (absent: the run's own, one at a time)."""
    st, ctl = run.state, run.controls
    current = st.windows.get(st.current or "")
    said = list(args)  # journaled as given: the session a command named stays on record
    if cmd in SESSION_COMMANDS and live is not None and (live or args):  # one named must be running
        session, args = _session_of(cmd, args, live) if len(live) > 1 or args else (next(iter(live)), args)
        ctl = live[session]
        current = next((w for w in st.live if w.session == session), None)
    if cmd in WORDLESS and args:  # `advance s1 w2` ended s1's window, whatever w2 meant
        takes = (f"only the session it acts on, as in `{cmd} s1`" if cmd in SESSION_COMMANDS
                 else "no argument")
        raise CommandRefused(f"not understood: {' '.join(map(repr, args))} ({cmd} takes {takes}); "
                             "nothing done")
    if cmd == "status":
        return status_line(run)
    if st.status != RunStatus.RUNNING:
        raise CommandRefused(f"the campaign is {st.status}; nothing to {cmd}")
    if cmd == "abort":
        ctl.abort.set()
        keeps = stop_keeps(st.runtime)
        reply = (f"aborting: the current server is stopped{f' ({keeps})' if keeps else ''}; "
                 "rows in flight become aborted")
    elif cmd == "advance":
        if not current or current.status not in UP_WINDOWS:
            raise CommandRefused("no window is up to advance from")
        ctl.advance.set()
        reply = f"ending window {current.session}/{current.window}; the campaign goes on with the next"
        if ctl.paused.is_set():  # the pause stays: the operator asked to end a window, not to resume
            reply += (", still paused: the next window boots, then holds before its first rep "
                      "(resume to go on)")
    elif cmd == "rewarm":
        if not current or current.status != WindowStatus.MEASURING:
            raise CommandRefused("no window is measuring: a warm pass needs a live server")
        ctl.rewarm.set()
        reply = "a warm pass runs before the next rep"
    elif cmd in ("pause", "resume"):
        if (cmd == "pause") == ctl.paused.is_set():
            raise CommandRefused(f"already {'paused' if ctl.paused.is_set() else 'running'}")
        (ctl.paused.set if cmd == "pause" else ctl.paused.clear)()
        reply = "pausing before the next rep" if cmd == "pause" else "resuming"
    elif cmd == "rerun":
        reply = _queue_rerun(run, args)
    else:
        raise CommandRefused(f"unknown command {cmd!r}; known: abort, advance, rewarm, pause, "
                             "resume, rerun ROW, status")
    run.emit(EventKind.COMMAND, cmd=cmd, args=said, who=who, reply=reply)
    return reply

def _session_of(cmd: str, args: list[str], live: Mapping[str, Controls]) -> tuple[str, list[str]]:
    """The session a command names (its first argument), which must be running now."""
    if not args:
        raise CommandRefused(f"sessions {', '.join(sorted(live))} run in parallel: "
                             f"say which ({cmd} {sorted(live)[0]})")
    if args[0] not in live:
        raise CommandRefused(f"session {args[0]!r} is not running; running: "
                             f"{', '.join(sorted(live)) or 'none'}")
    return args[0], args[1:]


def _queue_rerun(run: RunContext, args: list[str]) -> str:
    """A void or failed row queued to be measured again, or every such row of a window; each is
    journaled as the operator's rerun when its window boots again."""
    if len(args) != 1:
        raise CommandRefused("usage: rerun ROW|WINDOW (e.g. s1-control/prose/c4, or s1-ngram for "
                             "its void and failed rows)")
    key, st = args[0], run.state
    if key in st.windows and key not in st.rows:
        keys = [r.key for r in st.rows.values() if f"{r.session}-{r.window}" == key
                and r.status in RERUNNABLE_ROWS and r.key not in run.controls.reruns]
        if not keys:
            ws = st.windows[key]
            raise CommandRefused(f"window {key} is {ws.status} and has no void or failed row to "
                                 "rerun" + (" (none queued yet)" if ws.status == WindowStatus.FAILED
                                            else ""))
    else:
        row = st.rows.get(key)
        if row is None:
            void = [k for k, r in st.rows.items() if r.status in RERUNNABLE_ROWS]
            raise CommandRefused(f"no row or window {key!r}; void and failed rows: "
                                 f"{', '.join(void) or 'none'}")
        if row.status not in RERUNNABLE_ROWS:
            raise CommandRefused(f"row {key} is {row.status}, not void or failed")
        if key in run.controls.reruns:
            raise CommandRefused(f"row {key} is already queued")
        keys = [key]
    run.controls.reruns.extend(keys)
    first = st.rows[keys[0]]
    what = keys[0] if len(keys) == 1 else f"{len(keys)} rows of {key} ({', '.join(keys)})"
    wait = rerun_wait(st, first.session, first.window)
    if wait is None:
        return f"queued {what}: runs after this window's shapes"
    say_waiting(run, first.session, first.window, keys, wait.waiting)
    return f"queued {what}: its window will be booted again once {wait.once}"


@dataclass(frozen=True)
class Wait:
    """What a queued rerun waits on before its window boots again, said two ways: as the journal
    says it (``waiting``: "the server of s1-w to stop") and as a reply ends (``once``: "... has
    stopped")."""

    waiting: str
    once: str


def stopping_wait(key: str) -> Wait:
    return Wait(f"the server of {key} to stop", f"the server of {key} has stopped")


def rerun_wait(st: RunState, session: str, window: str) -> Wait | None:
    """What a rerun of a row of ``session``'s ``window`` waits on now; None when its window is up
    and still measuring, which runs the rerun after its shapes. Its place runs one window at a
    time: the one up there (or a server stopping there) goes first."""
    place = st.session_places.get(session, "")
    here = [w for k in st.order if st.session_places.get((w := st.windows[k]).session, "") == place]
    mine = st.windows.get(f"{session}-{window}")
    if mine is not None and mine.status in UP_WINDOWS and not mine.quality:
        return None
    stopping = next((w for w in here if w.stopping), None)
    if stopping is not None:
        return stopping_wait(stopping.key)
    up = next((w for w in here if w.status in UP_WINDOWS), None)
    if up is not None:
        return Wait(f"window {up.key} to end", f"window {up.key} has ended")
    return Wait("its window to boot again", "the place it ran on is free")


def say_waiting(run: RunContext, session: str, window: str, keys: list[str], waiting: str) -> None:
    """Journal what a queued rerun of ``keys`` waits on, when that has changed."""
    keys = [k for k in keys if run.state.reruns_waiting.get(k) != waiting]
    if keys:
        run.emit(EventKind.RERUN_WAITING, session=session, window=window, rows=keys, waiting=waiting)


def status_line(run: RunContext) -> str:
    st = run.state
    rows = list(st.rows.values())
    done = sum(r.complete for r in rows)
    void = sum(r.status == RowStatus.VOID for r in rows)
    return (f"{st.campaign} {st.status}{' (paused)' if st.paused else ''}: "
            f"window {st.up_now or '-'}, rows done {done}, void {void}")
