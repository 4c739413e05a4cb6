"""Operator commands from the control socket: what each does now, or why it does not apply.

Commands only set flags on ``run.controls``; the run's thread acts on them between steps
(abort also cancels the requests in flight). Every accepted command is journaled with who sent it.
"""

from __future__ import annotations

from typing import Any

from engine.record.events import UP_WINDOWS, EventKind, RowStatus, RunStatus, WindowStatus
from engine.run.context import RunContext
from engine.run.control import CommandRefused


def handle(run: RunContext, cmd: str, args: list[str], who: dict[str, Any]) -> str:
    """One control-socket command; raises CommandRefused saying why when it does not apply."""
    st, ctl = run.state, run.controls
    current = st.windows.get(st.current or "")
    if cmd == "status":
        return status_line(run)
    if st.status != RunStatus.RUNNING:
        raise CommandRefused(f"the campaign is {st.status}; nothing to {cmd}")
    if cmd == "abort":
        ctl.abort.set()
        reply = ("aborting: the current server is stopped (a container is kept); "
                 "rows in flight become aborted")
    elif cmd == "advance":
        if not current or current.status not in UP_WINDOWS:
            raise CommandRefused("no window is up to advance from")
        ctl.advance.set()
        reply = f"ending window {current.session}/{current.window}; the campaign goes on with the next"
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
    run.emit(EventKind.COMMAND, cmd=cmd, args=args, who=who, reply=reply)
    return reply

def _queue_rerun(run: RunContext, args: list[str]) -> str:
    if len(args) != 1:
        raise CommandRefused("usage: rerun ROW (e.g. s1-control/prose/c4)")
    key = args[0]
    row = run.state.rows.get(key)
    if row is None:
        void = [k for k, r in run.state.rows.items() if r.status == RowStatus.VOID]
        raise CommandRefused(f"no row {key!r}; void rows: {', '.join(void) or 'none'}")
    if row.status != RowStatus.VOID:
        raise CommandRefused(f"row {key} is {row.status}, not void")
    if key in run.controls.reruns:
        raise CommandRefused(f"row {key} is already queued")
    run.controls.reruns.append(key)
    up = run.state.current == f"{row.session}-{row.window}"
    return f"queued {key}: " + ("runs after this window's shapes" if up else
                                 "its window will be booted again after the current one")

def status_line(run: RunContext) -> str:
    st = run.state
    rows = list(st.rows.values())
    done = sum(r.complete for r in rows)
    void = sum(r.status == RowStatus.VOID for r in rows)
    return (f"{st.campaign} {st.status}{' (paused)' if st.paused else ''}: "
            f"window {st.current or '-'}, rows done {done}, void {void}")
