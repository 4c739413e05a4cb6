"""The console's words outside the screen: what the terminal says once it is closed, and the plain
progress lines when there is no terminal (a pipe, a log file)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from engine.commands.invocation import ruler_command
from engine.record.events import EventKind
from engine.record.state import RunState
from engine.words import RunStatus
from tui.core.ending import earlier_run, next_commands
from tui.core.follow import Batch, Follower, engine_pid, pid_alive


def farewell(run_dir: Path, state: RunState) -> str:
    """What the terminal says once the console is closed: the engine is never stopped by it."""
    pid = engine_pid(run_dir, state.pid)
    if state.status == RunStatus.RUNNING and pid_alive(pid):
        return f"engine still running (pid {pid}); reattach with: {ruler_command()} attach {run_dir}"
    if state.status == RunStatus.RUNNING:
        return (f"the engine is not running and the campaign is not finished; "
                f"resume it with: {ruler_command()} run --resume {run_dir}")
    if state.status == RunStatus.NEW:
        return f"no campaign in {run_dir}/journal.jsonl yet"
    # Over: the banner's next commands, kept in the terminal once the console's screen is gone.
    words = next_commands(state, run_dir, ruler_command(), earlier_run(run_dir, state.campaign),
                          console=False)
    return f"campaign {state.status}; " + " ".join(text for text, _ in words)


def follow_plain(run_dir: Path) -> int:
    """No terminal (a pipe, a log file): the engine's plain progress lines, to the end of the run."""
    # Here only: the progress lines' module loads the quality checks (a second of the console's
    # start, where the console itself needs none of it).
    from engine.commands.progress import printer

    emit = printer()
    done = threading.Event()
    follower = Follower(run_dir, lambda b: None, from_snapshot=False)  # every line, from the first

    def post(b: Batch) -> None:
        for d in b.damage:
            print(f"journal.jsonl damaged: {d}", flush=True)
        for e in b.events:
            emit(e)
            if e["kind"] == EventKind.RUN_FINISHED:
                done.set()
        follower.ack()

    follower.post = post
    with contextlib.suppress(KeyboardInterrupt):  # ^C stops following, never the engine
        follower.run(done.is_set)
    return 0
