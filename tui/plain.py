"""The console's words outside the screen: what the terminal says once it is closed, and the plain
progress lines when there is no terminal (a pipe, a log file)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from engine.commands.invocation import ruler_command
from engine.record.events import EventKind
from engine.record.state import RunState
from engine.sanitize import terminal
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
    # Over: the summary table the run printed last, as a headless run ends, and the banner's next
    # commands, kept in the terminal once the console's screen is gone.
    words = next_commands(state, run_dir, ruler_command(), earlier_run(run_dir, state.campaign),
                          console=False)
    return run_summary(run_dir, state) + f"campaign {state.status}; " + " ".join(t for t, _ in words)


def run_summary(run_dir: Path, state: RunState, wait: float = 10.0) -> str:
    """The summary table a headless run prints as it ends (engine.commands.launch), and where its
    results.json is: the engine writes the file after the run's last event, so while it still
    runs the file is waited for (``wait`` seconds at most); an engine gone without writing it (an
    older ruler, a crash) leaves the table made here from the run's files, the file unwritten.
    "" when the run has no rows to sum up."""
    # Here only: the export reads numpy and the report (a second of the console's start).
    from engine.report.export import RESULTS_JSON, requests_of, results_document, summary_text
    from engine.report.run import ReportError, load_run

    path = run_dir / RESULTS_JSON

    def written() -> dict[str, Any] | None:
        try:  # one this run's end wrote, not a resumed run's earlier end's
            if path.stat().st_mtime < (state.finished_ts or 0.0) - 1.0:
                return None
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and isinstance(doc.get("rows"), list) else None

    deadline = time.monotonic() + wait
    doc = written()
    while doc is None and time.monotonic() < deadline and pid_alive(engine_pid(run_dir, state.pid)):
        time.sleep(0.1)
        doc = written()
    where = f"results: {path}\n"
    if doc is None:
        try:
            view = load_run(run_dir)
            doc = results_document(view, requests_of(view))
        except (ReportError, OSError) as e:
            return f"no summary ({terminal(e)})\n"
        where = f"results: not written ({ruler_command()} export {run_dir} --format json writes it)\n"
    return summary_text(doc) + where if doc["rows"] else ""


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
