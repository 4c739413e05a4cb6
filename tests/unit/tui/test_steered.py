"""A command another client sent, as the console says it; a ``command`` line with a field of the
wrong type is damage with its line (the fold's rule for every event), never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from engine.record.journal import read_events
from tui.app import RulerConsole
from tui.core.fmt import steered

MEASURING = Path(__file__).parents[2] / "fixtures" / "journals" / "measuring"
WHO = {"pid": 1, "uid": os.getuid(), "gid": os.getgid()}


def test_a_command_is_said_with_who_sent_it_unless_this_console_did() -> None:
    c = {"cmd": "pause", "args": ["s1"], "who": WHO, "reply": "pausing before the next rep"}
    assert steered(c, own_pid=2) == [("pause s1 (pid 1):", "bold"), ("pausing before the next rep", "")]
    assert steered(c, own_pid=1) is None
    assert steered({"cmd": "abort", "args": []}, own_pid=2) == [("abort (pid ?):", "bold"), ("", "")]


def status_text(app: RulerConsole) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def until(pilot: Pilot[Any], cond: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, status_text(pilot.app)  # type: ignore[arg-type]  # a RulerConsole
        await pilot.pause(0.05)


async def test_a_mistyped_command_line_is_damage_and_the_console_goes_on(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(MEASURING, run)
    seq = read_events(run / "journal.jsonl")[-1]["seq"]
    bad: list[dict[str, Any]] = [{"who": "someone"}, {"args": [1, 2]}, {"cmd": 7}, {"reply": None}]
    good: dict[str, Any] = {"cmd": "pause", "args": [], "who": WHO, "reply": "pausing before the next rep"}
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.main.caught_up)
        first = len(read_events(run / "journal.jsonl")) + 1  # the line of the first appended
        with open(run / "journal.jsonl", "a") as f:
            for i, fields in enumerate([*({**good, **b} for b in bad), good], start=1):
                f.write(json.dumps({"seq": seq + i, "ts": time.time(), "kind": "command",
                                    **fields}) + "\n")
        # The good command after the bad ones is said: every line before it was read.
        await until(pilot, lambda: "pause (pid 1):" in status_text(app))
        damage = [d for d in app.main.state.damage if d.line and d.line >= first]
        assert [d.line for d in damage] == list(range(first, first + len(bad)))
        assert all(d.reason.startswith("command event the fold cannot use (") for d in damage)
        assert len(app.main.state.commands) == 1
