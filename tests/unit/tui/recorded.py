"""Recorded runs for the console's tests, and a stand-in for their engine.

The recorded runs under fixtures/journals/ are prefixes of a real headless run on the testbed
(fixtures/journals/build.py says how they were cut). For them a :class:`StandIn` serves a real
``control.sock`` with ``engine.control.ControlServer`` and journals each accepted command as the
engine does; it stands in for the engine only because a recorded run has none.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from engine.control import CommandRefused, ControlServer
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.record.writer import JournalWriter
from engine.words import stop_keeps
from tests.paths import FIXTURES

JOURNALS = FIXTURES / "journals"
REPLIES = {"abort": f"aborting: the current server is stopped ({stop_keeps('process')}); rows in "
                    "flight become aborted",
           "advance": "ending window s2/control; the campaign goes on with the next",
           "rewarm": "a warm pass runs before the next rep",
           "pause": "pausing before the next rep", "resume": "resuming"}


def recorded(name: str, tmp_path: Path) -> Path:
    run = tmp_path / "run"  # short: a Unix socket path has ~100 bytes
    shutil.copytree(JOURNALS / name, run)
    return run


def last_ts(run: Path) -> float:
    return float(read_events(run / "journal.jsonl")[-1]["ts"])


class StandIn:
    """A real control socket on a recorded run, answering as engine.run.runner's command() does."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.got: list[tuple[str, list[str]]] = []
        self.journal = JournalWriter(run / "journal.jsonl")
        self.server = ControlServer(run, self.handle)

    def handle(self, cmd: str, args: list[str], who: dict[str, Any]) -> str:
        if cmd == "status":
            return "stand-in engine: running"  # read-only: not journaled, as in the engine
        self.got.append((cmd, args))
        if cmd == "rerun":
            st = fold(read_events(self.run / "journal.jsonl"))
            row = st.rows.get(args[0])
            rows = [r.key for r in st.rows.values() if f"{r.session}-{r.window}" == args[0]
                    and r.status in ("void", "failed")]
            if row is None and not rows:
                raise CommandRefused(f"window {args[0]} has no void or failed row to rerun")
            if row is not None and row.status not in ("void", "failed"):
                raise CommandRefused(f"row {args[0]} is {row.status}, not void or failed")
            reply = f"queued {args[0] if row else ', '.join(rows)}: runs after this window's shapes"
        else:
            reply = REPLIES[cmd]
        self.journal.append("command", cmd=cmd, args=args, who=who, reply=reply)
        return reply

    def close(self) -> None:
        self.server.close()
        self.journal.close()


def append(run: Path, events: list[dict[str, Any]]) -> None:
    seq = read_events(run / "journal.jsonl")[-1]["seq"]
    with open(run / "journal.jsonl", "a") as f:
        for e in events:
            seq += 1
            f.write(json.dumps({"seq": seq, "ts": time.time(), **e}) + "\n")


def stable(name: str, tmp_path: Path, monkeypatch: Any) -> Path:
    """A recorded run for a snapshot: named ``run`` from a working directory beside it, and ruler
    named ``ruler``, so that the commands the console prints (the banner's) are the same text in
    every checkout and temporary directory."""
    recorded(name, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("tui.widgets.banner.ruler_command", lambda: "ruler")
    return Path("run")
