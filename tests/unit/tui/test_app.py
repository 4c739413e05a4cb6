"""The console (tui/) against recorded runs with a real control socket (against a real engine:
tests/integration/test_tui_live.py).

The recorded runs under fixtures/journals/ are prefixes of a real headless run on the testbed
(fixtures/journals/build.py says how they were cut). For them a :class:`StandIn` serves a real
``control.sock`` with ``engine.control.ControlServer`` and journals each accepted command as the
engine does; it stands in for the engine only because a recorded run has none.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandList
from textual.pilot import Pilot

from engine.commands.invocation import ruler_command
from engine.record import snapshot
from engine.record.fold import fold, fold_read
from engine.record.journal import read_events, read_journal
from engine.record.state import RunState
from engine.record.writer import JournalWriter
from engine.report.export import summary_text, write_results
from engine.servers import get_adapter
from engine.words import RunStatus
from tests.console import live_marked, screen_text, settled, table_text, type_in, until
from tests.paths import FIXTURES
from tests.unit.tui.recorded import JOURNALS, REPLIES, StandIn, append, last_ts, recorded, stable
from tui.app import RulerConsole, one_blas_thread
from tui.core.columns import fit_columns
from tui.core.follow import Link
from tui.core.logview import ServingView
from tui.core.reps import REP_COLS
from tui.core.windows import WINDOW_COLS
from tui.plain import farewell
from tui.widgets.log import BootLog
from tui.widgets.tables import FollowTable


@pytest.fixture
def measuring(tmp_path: Path):
    run = recorded("measuring", tmp_path)
    engine = StandIn(run)
    yield run, engine
    engine.close()


# ------------------------------------------------------------------ keys over a real socket


@pytest.mark.timeout(120)
async def test_each_key_sends_its_command_and_shows_the_reply(measuring) -> None:
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.main.link and app.main.link.connected
        assert "engine connected" in screen_text(app)

        for key, cmd in (("n", "advance"), ("w", "rewarm"), ("p", "pause")):
            await pilot.press(key)
            # Each condition is awaited here, before cmd takes its next value.
            await until(pilot, lambda: engine.got and engine.got[-1][0] == cmd)  # noqa: B023
            await until(pilot, lambda: REPLIES[cmd][:40] in screen_text(app))  # noqa: B023
        # The pause came back through the journal: asked for, not in effect until the rep ends...
        await until(pilot, lambda: "pausing after this rep" in screen_text(app))
        assert "PAUSED" not in screen_text(app)
        # ...which the engine journals between reps (engine/run/measure.py): now it holds.
        engine.journal.append("paused", session="s2", window="control", **{"class": "code"},
                              concurrency=1, attempt=1, rep=3)
        await until(pilot, lambda: "PAUSED" in screen_text(app))
        await pilot.press("p")  # p now resumes
        await until(pilot, lambda: engine.got[-1] == ("resume", []))
        await until(pilot, lambda: "PAUSED" not in screen_text(app)
                    and "pausing" not in screen_text(app).splitlines()[0])

        # r on a row that is neither void nor failed is refused here, without bothering the engine.
        sent = len(engine.got)
        await pilot.press("tab")  # the windows list has the keys first
        await pilot.press("r")  # the reps cursor follows the live row, code c1
        await until(pilot, lambda: "only void or failed rows rerun" in screen_text(app))
        assert len(engine.got) == sent
        await pilot.press("up")  # one up is prose c2, a void row
        await pilot.press("r")
        await until(pilot, lambda: engine.got[-1] == ("rerun", ["s2-control/prose/c2"]))
        await until(pilot, lambda: "queued s2-control/prose/c2" in screen_text(app))
        # On the windows list, r reruns the window's void and failed rows.
        await pilot.press("shift+tab")
        await until(pilot, lambda: app.focused is app.main.ui.windows)
        await pilot.press("r")
        await until(pilot, lambda: engine.got[-1] == ("rerun", ["s2-control"]))

        # a asks first: n keeps going and sends nothing, y aborts. It says what the run's runtime
        # keeps of the server: a process run's has no container (issue 48: it promised one).
        await pilot.press("a")
        await until(pilot, lambda: "Abort the campaign?" in screen_text(app))
        dialog = " ".join(screen_text(app).split())
        assert "The current server is stopped: its process is ended; its log stays" in dialog
        assert "container" not in dialog
        await pilot.press("n")
        await until(pilot, lambda: "abort cancelled" in screen_text(app))
        assert engine.got[-1][0] == "rerun"
        await pilot.press("a")
        await until(pilot, lambda: "Abort the campaign?" in screen_text(app))
        await pilot.press("y")
        await until(pilot, lambda: engine.got[-1][0] == "abort")
        await until(pilot, lambda: "aborting: the current server is stopped" in screen_text(app))

    commands = [e for e in read_events(run / "journal.jsonl") if e["kind"] == "command"]
    assert [c["cmd"] for c in commands] == ["advance", "rewarm", "pause", "resume", "rerun", "rerun",
                                            "abort"]


async def test_a_refusal_is_shown_as_the_engine_worded_it(measuring) -> None:
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        app.main.command("rerun", ["s2-control/prose/c1"])  # a noisy row: the engine refuses
        await until(pilot, lambda: "refused" in screen_text(app))
        assert "row s2-control/prose/c1 is noisy, not void" in screen_text(app)


async def test_every_key_is_in_the_command_palette(measuring) -> None:
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for key in "anwrp/:f?q":
            assert any(f"({key})" in t for t in titles), key
        await type_in(pilot, "ctrl+p", "rewarm")

        def listed() -> list[str]:
            return [str(o.prompt) for o in app.screen.query_one(CommandList).options]

        # The palette lists what matches as its search finds it; enter before that selects nothing.
        await until(pilot, lambda: len(listed()) == 1 and "Rewarm (w)" in listed()[0])
        await pilot.press("enter")
        await until(pilot, lambda: engine.got and engine.got[-1][0] == "rewarm")
        await until(pilot, lambda: REPLIES["rewarm"] in screen_text(app))


async def test_footer_shows_the_keys_and_help_says_the_engine_keeps_running(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        footer = screen_text(app).splitlines()[-1]
        for word in ("abort", "advance", "rewarm", "rerun", "pause", "filter", "cmd", "help", "quit"):
            assert word in footer
        await pilot.press("question_mark")
        await until(pilot, lambda: "the engine keeps running" in screen_text(app))
        await pilot.press("escape")
        await until(pilot, lambda: "the engine keeps running" not in screen_text(app))


async def test_picking_a_window_shows_it_and_esc_goes_back_to_the_live_one(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.main.sel.shown == "s2-control"
        assert app.focused is app.main.ui.windows  # the keys go to the windows list from the start
        await pilot.press("up")  # one up: s1 ctx
        await until(pilot, lambda: app.main.sel.shown == "s1-ctx" and app.main.sel.pinned)
        await pilot.press("tab")  # on to its reps: the arrows now go to its rows
        await until(pilot, lambda: app.focused is app.main.ui.reps)
        await until(pilot, lambda: "reps · s1-ctx (picked; esc: live)" in screen_text(app))
        assert [r[0].strip() for r in table_text(app, "#reps")] == [
            "prose c1", "prose c2", "code c1", "code c2"]
        assert "boot log s1-ctx (no log yet)" not in screen_text(app)  # it has a path, just no file
        # The engine moves on: a picked window stays on screen. The console has folded the rep
        # (and drawn what it shows, in the same step) when its row has it.
        append(run, [{"kind": "rep_done", "session": "s2", "window": "control", "class": "code",
                      "concurrency": 1, "attempt": 1, "rep": 3, "agg_tok_s": 17.156,
                      "per_user_tok_s": 17.156, "file": "x"}])
        await until(pilot, lambda: app.main.state.rows["s2-control/code/c1"].reps[1].get(3) == 17.156)
        assert app.main.sel.shown == "s1-ctx"
        await pilot.press("escape")
        await until(pilot, lambda: app.main.sel.shown == "s2-control" and not app.main.sel.pinned)


async def test_a_command_from_another_client_is_shown(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        append(run, [{"kind": "command", "cmd": "pause", "args": [],
                      "who": {"pid": 1, "uid": os.getuid(), "gid": os.getgid()},
                      "reply": "pausing before the next rep"}])
        await until(pilot, lambda: "pause (pid 1):" in screen_text(app))
        assert "pausing after this rep" in screen_text(app)


@pytest.fixture
def places(tmp_path: Path):
    run = recorded("places", tmp_path)
    engine = StandIn(run)
    yield run, engine
    engine.close()


async def test_on_places_keys_reps_and_log_follow_the_window_under_the_cursor(places) -> None:
    """Two places measure at once (the recorded run). The keys sent no session, which the engine
    refuses while two run; the reps and the log showed the window started last, so they flipped
    to the other place at each window start. Now each follows the window under the cursor."""
    run, engine = places
    app = RulerConsole(run, probe_interval=0.3)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert live_marked(app) == ["s1 ctx", "s2 ctx"]
        head = screen_text(app).splitlines()[:4]
        assert "sessions 2 running, 1 queued, 0 done" in head[0]
        assert head[2].strip().startswith("place a · s1 ctx · prose c2 attempt 2 rep 3/3")
        assert head[3].strip().startswith("▸ place b · s2 ctx · code c1 attempt 1 rep 3/3")
        assert app.main.sel.shown == "s2-ctx"  # started last
        await pilot.press("n")
        await until(pilot, lambda: engine.got[-1:] == [("advance", ["s2"])])

        await pilot.press("up", "up", "up", "up")  # s2 qv8, s2 control, s1 qv8, s1 ctx
        await until(pilot, lambda: app.main.sel.shown == "s1-ctx")
        assert not app.main.sel.pinned  # a live window: the screen follows its place from now on
        await until(pilot, lambda: "reps · s1-ctx" in screen_text(app)
                    and "log s1-ctx · following" in screen_text(app))
        s1_log = (run / "windows/s1-ctx/boot.log").read_text().splitlines()
        log = app.query_one(BootLog)
        await until(pilot, lambda: log.lines[:3] == s1_log[:3])
        assert [r[0].strip() for r in table_text(app, "#reps")] == ["prose c1", "prose c2"]
        await until(pilot, lambda: screen_text(app).splitlines()[2].startswith(" ▸ place a"))
        await pilot.press("p")
        await until(pilot, lambda: engine.got[-1] == ("pause", ["s1"]))
        await until(pilot, lambda: "pausing after this rep" in screen_text(app).splitlines()[2])
        assert "pausing" not in screen_text(app).splitlines()[3]  # b runs on

        # Place b moves on: s2 ends, s3 begins there. The window started last is now s3's control;
        # the screen stays on place a's window.
        where = {"session": "s3", "window": "control"}
        append(run, [{"kind": "window_finished", "session": "s2", "window": "ctx", "status": "done"},
                     {"kind": "session_started", "session": "s3", "place": "b"},
                     {"kind": "window_started", **where, "axis": "control",
                      "log": "windows/s3-control/boot.log"}])
        await until(pilot, lambda: live_marked(app) == ["s1 ctx", "s3 control"])
        assert app.main.state.current == "s3-control"
        await settled(pilot)
        assert app.main.sel.shown == "s1-ctx" and "log s1-ctx" in screen_text(app)
        await pilot.press("n")
        await until(pilot, lambda: engine.got[-1] == ("advance", ["s1"]))

        # On a window of neither running session nothing is sent: which one is meant?
        await pilot.press("down", "down", "down")  # s1 qv8, s2 control, s2 qv8: s2 is done
        await until(pilot, lambda: app.main.sel.shown == "s2-qv8" and app.main.sel.pinned)
        sent = len(engine.got)
        await pilot.press("w")
        await until(pilot, lambda: "sessions s1, s3 run at once: put the cursor on a window of "
                                   "the one to act on" in screen_text(app))
        assert len(engine.got) == sent
    commands = [(c["cmd"], c["args"]) for c in read_events(run / "journal.jsonl")
                if c["kind"] == "command"]
    assert commands == [("advance", ["s2"]), ("pause", ["s1"]), ("advance", ["s1"])]


# ------------------------------------------------------------------ live journal and log


async def test_a_leak_event_marks_its_rep_the_moment_it_lands(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        code_c1 = "s2-control/code/c1"
        reps = app.query_one("#reps", FollowTable)
        cell = lambda: str(reps.get_cell(code_c1, "reps tok/s"))  # noqa: E731
        assert cell().startswith("4.8! 6.2 ")  # rep 1 already suspected, rep 2 not
        where = {"session": "s2", "window": "control", "class": "code", "concurrency": 1}
        append(run, [{"kind": "leak_suspected", **where, "attempt": 1, "rep": 2, "agg_tok_s": 6.237,
                      "median": 5.5}])
        t0 = time.monotonic()
        await until(pilot, lambda: "6.2!" in cell(), timeout=5)
        print(f"leak on screen after {time.monotonic() - t0:.3f} s")
        assert "4.8! 6.2!" in screen_text(app)


async def test_rows_follow_the_journal_and_a_void_row_shows_its_reason(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(160, 48)) as pilot:
        await settled(pilot)
        rows = {r[0].strip(): r for r in table_text(app, "#reps")}
        assert rows["prose c2"][4].strip() == "VOID"
        assert "spread 140.7% > 10% at C2 after 2 attempts" in rows["prose c2"][-1]
        assert rows["prose c2"][5].strip() == "2"  # the rerun shows as a second attempt
        # The rest of the real run lands: the row finishes, the window and the campaign too.
        evs = read_events(JOURNALS / "finished" / "journal.jsonl")
        cut = read_events(run / "journal.jsonl")[-1]["seq"]
        append(run, [{k: v for k, v in e.items() if k not in ("seq", "ts")} for e in evs
                     if e["seq"] > cut])
        await until(pilot, lambda: app.main.state.status == "finished")
        await until(pilot, lambda: "done" in screen_text(app).splitlines()[0])
        assert "engine ?" in screen_text(app)  # no probe in this test


async def test_the_boot_log_follows_searches_and_stops_following(measuring) -> None:
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        log = app.query_one(BootLog)
        await pilot.press("v")  # the raw log: every line, as the file has them
        await until(pilot, lambda: app.main.logw.raw and "· raw (v" in screen_text(app))
        await settled(pilot)
        n = log.line_count
        assert n == len((run / "windows/s2-control/boot.log").read_text().splitlines())
        with open(run / "windows/s2-control/boot.log", "a") as f:
            f.write("".join(f"9.99.000.{i:03d} I srv  test line {i}\n" for i in range(50)))
        await until(pilot, lambda: log.line_count == n + 50)
        await until(pilot, lambda: "test line 49" in screen_text(app))  # following: the tail shows
        await pilot.press("tab", "tab")  # the log has the keys: / finds a line of it
        await until(pilot, lambda: app.focused is log)
        await type_in(pilot, "slash", "n_ctx_seq", "enter")
        await until(pilot, lambda: log.match is not None)
        assert log.match is not None and "n_ctx_seq" in log.lines[log.match]
        assert not log.auto_scroll and "follow off" in screen_text(app)
        first = log.match
        await pilot.press("enter")  # the next older match, wrapping around
        await until(pilot, lambda: log.match != first)
        await pilot.press("escape")
        await pilot.press("f")
        await until(pilot, lambda: log.auto_scroll and "test line 49" in screen_text(app))


async def test_a_log_line_with_escapes_is_shown_not_acted_on(measuring) -> None:
    """A server's OSC would retitle the pane (under tmux), its CSI clear the screen: the pane shows
    them as escapes. Its CR goes back to the line's start, as a terminal's does (a progress bar
    redrawn in place), and never starts a line of its own: one line, as the file has it."""
    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        log = app.query_one(BootLog)
        await pilot.press("v")
        await until(pilot, lambda: app.main.logw.raw and "· raw (v" in screen_text(app))
        await settled(pilot)
        n = log.line_count
        with open(run / "windows/s2-control/boot.log", "a") as f:
            f.write("9.99.000.001 E srv  hostile \x1b]0;TITLE\x07\x1b[2J\rforged: all ok\n")
        await until(pilot, lambda: log.line_count > n)
        assert log.lines[n:] == ["forged: all ok srv  hostile \\x1b]0;TITLE\\x07\\x1b[2J"]


async def test_past_the_ready_line_the_log_keeps_what_matters_and_folds_the_rest(measuring) -> None:
    """The serving view: request-time lines (slot, sampler, prompt cache) scrolled the boot away
    within seconds; now they are counted, and v shows the raw log."""
    run, _ = measuring
    path = run / "windows/s2-control/boot.log"
    lines = path.read_text().splitlines()
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        log = app.query_one(BootLog)
        shown = list(log.lines)
        ready = next(i for i, x in enumerate(lines) if "model loaded" in x)
        assert shown[: ready + 1] == lines[: ready + 1]  # the boot, as it was
        assert len(shown) < len(lines) / 3
        serving = app.main.logw.view
        assert serving is not None
        folded, pending = serving.folded, serving.pending
        assert pending  # the idle lines after the last request: their count line waits
        assert f"serving view, {folded:,} lines folded" in screen_text(app)
        with open(path, "a") as f:
            f.write("9.99.000.001 W srv  a warning worded as none before\n")
            f.write("".join(f"9.99.001.{i:03d} I slot update_slots: id  0 | task {i} | kv cache rm "
                            f"[{i}, end)\n" for i in range(30)))
            f.write("9.99.002.000 I slot print_timing: id  0 | task 9 |        eval time =     600.00"
                    " ms /    16 tokens (   37.50 ms per token,    26.67 tokens per second)\n")
        await until(pilot, lambda: "26.67 tokens per second" in (log.lines[-1] if log.lines else ""))
        log_tail = list(log.lines[-3:])
        assert log_tail[:2] == ["9.99.000.001 W srv  a warning worded as none before",
                                "[ruler: 30 lines folded]"]
        await until(pilot, lambda: f"serving view, {folded + 30:,} lines folded" in screen_text(app))
        await pilot.press("v")
        await until(pilot, lambda: log.line_count == len(lines) + 32)
        assert "· raw (v: serving view)" in screen_text(app)
        await pilot.press("v")  # the serving view again, the log read afresh
        again = ServingView(get_adapter("llamacpp")).feed(path.read_text().splitlines())
        assert again[len(shown):] == [f"[ruler: {pending} lines folded]", *log_tail]
        await until(pilot, lambda: list(log.lines) == again)


async def test_a_window_on_another_stack_is_read_in_its_servers_words(measuring) -> None:
    """A vLLM window beside a llama.cpp control: its log is classed and folded by vLLM's patterns
    (its ready line, its facts), not the campaign's server's, under which no line of it was ready
    and nothing was folded."""
    run, _ = measuring
    ready = "(APIServer pid=1) INFO:     Application startup complete."
    failed = "ERROR 05-07 02:14:18 [core.py:396] EngineCore failed to start."
    served = [f'(APIServer pid=1) INFO:     127.0.0.1:{5000 + i} - "POST /v1/completions HTTP/1.1" 200 OK'
              for i in range(30)]
    log_path = run / "windows/s2-other/boot.log"
    log_path.parent.mkdir(parents=True)
    log_path.write_text("\n".join([ready, *served, failed]) + "\n")
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.main.classify(ready) == ""  # the campaign's llama.cpp reads no fact in it
        append(run, [{"kind": "window_started", "session": "s2", "window": "other", "axis": "other",
                      "runtime": "process", "plan": {}, "tag": "", "stack": "vllm",
                      "log": "windows/s2-other/boot.log"}])
        await until(pilot, lambda: app.main.sel.shown == "s2-other")
        log = app.query_one(BootLog)
        await until(pilot, lambda: list(log.lines) == [ready, "[ruler: 30 lines folded]", failed])
        assert app.main.classify(ready) == "fact" and app.main.classify(failed) == "error"


@pytest.mark.slow
async def test_the_console_collects_its_garbage_as_it_goes(
        measuring: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Textual leaves cyclic garbage behind each frame (Strips that cache themselves, a table's
    row renders); unless collected as it comes, a long log flood piles it up (bench/ui_bench.py:
    RSS 64 -> 78 MiB in two minutes). The console collects it every GC_EVERY seconds, here a tenth
    of a second: after three seconds of a flood, what a full collection finds is a small part of
    those seconds' garbage (0 here; 860-1,220 objects when the console never collects)."""
    monkeypatch.setattr("tui.app.GC_EVERY", 0.1)
    run, engine = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        log = run / "windows/s2-control/boot.log"
        for i in range(15):
            with open(log, "a") as f:
                f.write("".join(f"9.99.{i:03d}.{k:03d} I slot print_timing: id 1 | task {k} | "
                                f"prompt eval time = 87.94 ms\n" for k in range(500)))
            if i % 5 == 0:
                engine.journal.append("command", cmd="rewarm", args=[], who={"pid": 1}, reply="ok")
            await pilot.pause(0.2)
        piled = gc.collect()
    assert piled < 200, piled


def unused_pid() -> int:
    """A pid no process can have: one past the kernel's largest."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


async def test_a_lost_engine_shows_disconnected_and_comes_back(tmp_path: Path) -> None:
    run = recorded("measuring", tmp_path)
    (run / "engine.pid").write_text(f"{os.getpid()}\n")  # alive: an engine whose socket is silent
    app = RulerConsole(run, probe_interval=0.2)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert "DISCONNECTED" in screen_text(app)
        engine = StandIn(run)
        try:
            await until(pilot, lambda: "engine connected" in screen_text(app))
        finally:
            engine.close()
        await until(pilot, lambda: "DISCONNECTED" in screen_text(app))
        await pilot.press("n")  # a key with no answer: told so, nothing hangs
        await until(pilot, lambda: "no engine answers" in screen_text(app))
        # Its process gone too: the run will not go on by itself. The banner says how to resume it
        # and the engine's keys are greyed (nothing is sent, nothing is said).
        (run / "engine.pid").write_text(f"{unused_pid()}\n")
        await until(pilot, lambda: "the engine is gone and the campaign is not finished"
                    in screen_text(app))
        assert f"run --resume {run}" in app.main.ui.banner.text.plain
        assert app.main.check_action("advance", ()) is None and app.main.check_action("help", ()) is True
        said = app.main.ui.status.said
        await pilot.press("n")
        await settled(pilot)
        assert app.main.ui.status.said == said
        # Said in the header as what it is: no engine left, not one being retried.
        head = screen_text(app).splitlines()[1]
        assert "engine gone: it stopped before the run's end" in head and "DISCONNECTED" not in head


async def test_a_finished_runs_header_never_says_disconnected_while_its_history_is_read(
        tmp_path: Path) -> None:
    """Issue 47: attached to a day-long finished run without its snapshot, the header said "engine
    DISCONNECTED (retrying)" for the minutes its journal took to read. The journal is folded before
    the first frame (Follower.preload): every frame drawn says the run is done and no frame says the
    engine is gone or disconnected before the journal's end says the run finished."""
    run = recorded("finished", tmp_path)
    (run / "engine.pid").write_text(f"{unused_pid()}\n")  # no engine: the run is over
    app = RulerConsole(run, probe=lambda *_: Link(False, "no engine answers"))
    heads: list[tuple[str, bool]] = []

    def recorded_after(draw: Any) -> Any:
        def drawn() -> None:
            draw()
            if app.main.ui.head.text.plain:
                heads.append((app.main.ui.head.text.plain.splitlines()[1], app.main.ui.banner.display))
        return drawn

    # Each frame's header as it is drawn, recorded.
    app.main.render_all = recorded_after(app.main.render_all)  # type: ignore[method-assign]
    app.main._render_head = recorded_after(app.main._render_head)  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert heads, "no frame drawn"
        assert not any("DISCONNECTED" in h or "gone" in h for h, _ in heads), heads
        lines = screen_text(app).splitlines()
        assert "done" in lines[0] and lines[1].startswith(" ○ engine exited")
        assert app.main.ui.banner.text.plain.startswith("■ campaign finished")


async def test_detach_and_reattach_rebuild_the_same_picture(measuring) -> None:
    run, _ = measuring
    first = RulerConsole(run, probe=None)
    async with first.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        append(run, [{"kind": "rep_done", "session": "s2", "window": "control", "class": "code",
                      "concurrency": 1, "attempt": 1, "rep": 3, "agg_tok_s": 17.156,
                      "per_user_tok_s": 17.156, "file": "windows/s2-control/reps/code-c1-1-3.jsonl"}])
        await until(pilot, lambda: "17.2" in str(first.main.ui.reps.get_cell("s2-control/code/c1",
                                                                         "reps tok/s")))
        await pilot.press("q")
    reps, windows = table_text(first, "#reps"), table_text(first, "#windows")
    second = RulerConsole(run, probe=None)
    async with second.run_test(size=(100, 30)) as pilot:
        await settled(pilot)
        assert table_text(second, "#reps") == reps
        assert table_text(second, "#windows") == windows
        assert second.main.state == fold(read_events(run / "journal.jsonl"))


@pytest.mark.parametrize("name", ["measuring", "finished"])
async def test_a_snapshot_of_the_fold_gives_the_same_picture(name: str, tmp_path: Path) -> None:
    """Attaching takes the journal's snapshot and folds the events after it: the screen is the one
    the whole journal gives, a damaged line's number included."""
    run = recorded(name, tmp_path)
    path = run / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(20, b"garbage\n")
    lines.insert(250, b"[]\n")  # after the snapshot's lines
    path.write_bytes(b"".join(lines[:200]))
    read = read_journal(path)
    snapshot.write(path, fold_read(read), read.length, read.lines, read.last)  # 200 lines in
    path.write_bytes(b"".join(lines))
    link, now = Link(True, "recorded"), last_ts(run) + 5

    async def picture() -> tuple[str, str, RunState]:
        app = RulerConsole(run, clock=lambda: now, probe=lambda *_: link)
        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot)
            return screen_text(app), app.export_screenshot(simplify=True), app.main.state

    text, with_it, state = await picture()
    assert snapshot.load(path)[1] == "" and "line 21: not JSON" in text
    snapshot.path_of(path).unlink()
    _, without, whole = await picture()
    assert with_it == without
    assert state == dataclasses.replace(whole, damage=state.damage)
    assert sorted(state.damage, key=lambda d: d.line or 0) == whole.damage
    assert [d.line for d in whole.damage] == [21, 251]


async def test_the_first_frame_shows_the_run_its_snapshot_holds(tmp_path: Path) -> None:
    """The console reads the snapshot before its first frame (issue 17: an empty screen was drawn
    while the follower read it, then everything drawn again): with no batch from the follower at
    all, the windows and reps on screen are those of the whole journal, each window's delta and
    call "…" until the run is judged behind that frame (issue 47), then the same as ever."""
    run = recorded("finished", tmp_path)
    JournalWriter(run / "journal.jsonl").close()  # the snapshot the engine leaves when it stops
    link, now = Link(True, "recorded"), last_ts(run) + 5
    app = RulerConsole(run, clock=lambda: now, probe=lambda *_: link)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        want = table_text(app, "#windows"), table_text(app, "#reps")
    assert len(want[0]) == 4

    app = RulerConsole(run, clock=lambda: now, probe=lambda *_: link)
    assert app.main.state == fold(read_events(run / "journal.jsonl"))
    # The follower is asked to run once the first frame is drawn (on mount), and hands nothing.
    asked = threading.Event()
    app.follower.run = lambda cancelled: asked.set()  # type: ignore[method-assign]  # never hands one
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, asked.is_set)
        first = table_text(app, "#windows")
        assert table_text(app, "#reps") == want[1]
        for row, whole in zip(first, want[0], strict=True):  # name, status, Δ, CI, call, notes, axis
            calls = ["ctl ", " ", " "] if whole[2] == "ctl " else ["… ", " ", "… "]
            assert row == [*whole[:2], *calls, *whole[5:]]
        await until(pilot, lambda: app.main.judged)  # no batch: JUDGE_AFTER after that frame
        await pilot.pause()
        assert (table_text(app, "#windows"), table_text(app, "#reps")) == want
        assert not app.main.caught_up


def test_the_console_judges_on_one_blas_thread_unless_told_otherwise() -> None:
    """Set before numpy is imported, which the console does only to judge (a BLAS's thread pool
    tripled a day-long run's first judgement); an operator's own count is kept."""
    env = {"OMP_NUM_THREADS": "4"}
    one_blas_thread(env)
    assert env == {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "1"}


async def test_no_color_keeps_every_mark_in_the_text(measuring, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = measuring
    monkeypatch.setenv("NO_COLOR", "1")
    app = RulerConsole(run, probe=None)
    assert app.no_color
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        text = screen_text(app)
        for mark in ("VOID", "4.8!", "2 void", "▶ s2 control", "~5.5", "measuring"):
            assert mark in text, mark


def _luminance(rgb: Any) -> float:
    def ch(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    return 0.2126 * ch(rgb.red) + 0.7152 * ch(rgb.green) + 0.0722 * ch(rgb.blue)


async def test_256_colours_keep_the_marks_apart_and_readable(measuring) -> None:
    """tmux over SSH often means 256 colours: each mark's colour, downsampled to the xterm
    palette, stays distinct from the others and reads against every background the console uses
    (WCAG contrast at least 4.5)."""
    from rich.color import Color as RichColor
    from rich.color import ColorSystem
    from textual.color import Color

    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        marks = {t: app.main.tags[t].color.downgrade(ColorSystem.EIGHT_BIT)  # type: ignore[union-attr]  # all set
                 for t in ("error", "warning", "success", "accent")}
        assert len({c.number for c in marks.values()}) == len(marks), marks
        for name in ("background", "panel", "surface"):
            bg = RichColor.parse(Color.parse(app.theme_variables[name]).hex)
            lb = _luminance(bg.downgrade(ColorSystem.EIGHT_BIT).get_truecolor())
            for tag, c in marks.items():
                lc = _luminance(c.get_truecolor())
                contrast = (max(lc, lb) + 0.05) / (min(lc, lb) + 0.05)
                assert contrast >= 4.5, (tag, name, round(contrast, 2))


async def test_the_panel_with_the_keys_shows_in_256_colours_and_without_colour(measuring) -> None:
    """Focus was a 5% background tint, which a 256-colour tmux rounds away: now the focused panel's
    top line is heavy (a glyph: no colour needed) and in a colour the 8-bit palette keeps apart."""
    from rich.color import ColorSystem

    run, _ = measuring
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await settled(pilot)

        def tops() -> list[str]:
            rows = screen_text(app).splitlines()
            return [next(r for r in rows if "windows" in r), next(r for r in rows if "reps ·" in r),
                    next(r for r in rows if "boot facts" in r)]

        assert tops()[0].startswith("━windows ") and "━" not in tops()[1] + tops()[2]
        ui = app.main.ui
        (_, focused), (_, blurred) = ui.windows.styles.border_top, ui.right.styles.border_top
        bits = [c.rich_color.downgrade(ColorSystem.EIGHT_BIT).number for c in (focused, blurred)]
        assert bits[0] != bits[1], bits
        await pilot.press("tab")
        await until(pilot, lambda: tops()[1].startswith("━reps"))
        assert "━" not in tops()[0] + tops()[2]
        await pilot.press("tab")
        await until(pilot, lambda: tops()[2].startswith("━log"))


def test_quitting_says_whether_the_engine_goes_on(tmp_path: Path) -> None:
    run = recorded("measuring", tmp_path)
    st = fold(read_events(run / "journal.jsonl"))
    (run / "engine.pid").write_text(f"{os.getpid()}\n")  # a live pid stands for the engine
    ruler = ruler_command()  # "ruler" on the PATH, else this environment's script: typed as printed
    assert farewell(run, st) == (f"engine still running (pid {os.getpid()}); "
                                 f"reattach with: {ruler} attach {run}")
    (run / "engine.pid").unlink()
    st.pid = None
    assert f"resume it with: {ruler} run --resume" in farewell(run, st)
    # Over: the banner's next commands stay in the terminal once the console is gone (a run
    # with no row to sum up has no summary table above them).
    done = fold(read_events(JOURNALS / "finished" / "journal.jsonl"))
    said = farewell(run, done).splitlines()
    assert said[-1] == f"campaign finished; next: {ruler} report {run} · {ruler} compare OTHER_RUN {run}"
    done.status = RunStatus.ABORTED
    assert farewell(run, done).splitlines()[-1].startswith(
        f"campaign aborted; next: {ruler} run --resume {run} · {ruler} report {run}")


def test_a_finished_runs_farewell_prints_the_summary_a_headless_run_prints(tmp_path: Path) -> None:
    """Issue 48: under the console a run ended without the summary table a headless run prints
    (the engine, detached, wrote it to engine.log). The engine writes results.json as the run ends;
    the terminal the console leaves prints its table, then what to type next."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "demo-smollm2", run)
    state = fold(read_events(run / "journal.jsonl"))
    path, doc = write_results(run)  # as the engine does once the run's last event is written
    table = summary_text(doc)
    assert table.splitlines()[0].strip("= ") == "demo-smollm2: finished" and "s1-ngram" in table
    said = farewell(run, state)
    assert said.startswith(table + f"results: {path}\n")
    assert said.splitlines()[-1].startswith("campaign finished; next: ")
    # An engine gone without writing it: the same table, made from the run's files, none written.
    path.unlink()
    said = farewell(run, state)
    assert said.startswith(table) and "results: not written" in said and not path.exists()


def test_without_a_terminal_attach_prints_progress_lines(tmp_path: Path) -> None:
    run = recorded("finished", tmp_path)
    proc = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                           "from tui.app import run_console; sys.exit(run_console(Path(sys.argv[1])))",
                           str(run)], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "REJECTED: server exited during boot" in lines[-2] and lines[-1].endswith("run finished")


# ------------------------------------------------------------------ widths and snapshots


@pytest.mark.slow
async def test_every_width_from_80_to_200_lays_out_cleanly(tmp_path: Path) -> None:
    """At 100 columns the windows list ran under the reps table ("Δ ctshape") and the reps' last
    columns were cut mid-word. At every width now: the windows list above the reps (never on the
    same line), each the screen's width; the always-shown columns are there, each table shows only
    whole columns that fit (a cut one ends in an ellipsis), in order. The finished run has the
    widest cells: void reasons, verdict notes, a rejection.

    On screen: each width where either table's set of columns changes (fit_columns on its cells,
    every width from 80 to 200), the width before it, and every fifth width; between those a
    table only widens its cut columns by a cell."""
    run = recorded("finished", tmp_path)
    app = RulerConsole(run, probe=None)
    async with app.run_test(size=(80, 30)) as pilot:
        await settled(pilot)
        windows, reps = app.main.ui.windows, app.main.ui.reps

        def layout() -> object:
            return (windows.size.width, reps.size.width, dict(windows._shown), dict(reps._shown))

        def columns(width: int) -> list[list[str]]:  # a table's room is its width less one cell
            return [list(fit_columns(t._spec, t._natural(), width - 1)) for t in (windows, reps)]

        steps = {w for w in range(81, 201) if columns(w) != columns(w - 1)}
        assert steps, "no width from 80 to 200 changes the columns: the finished run's cells are too narrow"
        for width in sorted({80, 200, *steps, *(w - 1 for w in steps), *range(80, 201, 5)}):
            await pilot.resize_terminal(width, 30)

            before = None
            while before != layout():  # each table's columns settle for the new width
                before = layout()
                await pilot.pause()
            lines = screen_text(app).splitlines()
            for table, spec in ((windows, WINDOW_COLS), (reps, REP_COLS)):
                assert table.size.width == width and table.region.x == 0, width
                header = lines[table.content_region.y]
                shown = table._shown
                assert sum(shown.values()) <= table.size.width - 1, (width, shown)
                assert [c.name for c in spec if c.rank == 0] == [c for c in shown if any(
                    s.name == c and s.rank == 0 for s in spec)], (width, shown)
                assert list(shown) == [c.name for c in spec if c.name in shown]  # display order
                x = 0
                for col, w in shown.items():  # each label where its column starts, and whole
                    label = header[x:x + w]
                    assert label.startswith(col[: w - 1]) or label.startswith(col[: w - 2] + "…"), (
                        width, col, header)
                    x += w
            assert windows.region.bottom <= reps.region.y  # stacked: never a line in common


SNAPSHOTS = ["booting", "measuring", "rejected", "finished", "places"]


# 80x24 in tmux is the floor; every width up to 200 must lay out cleanly (tui.core.columns.fit_columns).
SIZES = [(80, 24), (120, 40), (200, 50)]


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot(name: str, size: tuple[int, int], tmp_path: Path, snap_compare,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    run = stable(name, tmp_path, monkeypatch)
    # Frozen: the clock 5 s after the last event, and the engine link (no engine in a recording).
    link, now = Link(name != "finished", "recorded"), last_ts(run) + 5
    app = RulerConsole(run, clock=lambda: now, probe=lambda *_: link)
    assert snap_compare(app, terminal_size=size, run_before=settled)


async def open_help(pilot: Pilot[Any]) -> None:
    await settled(pilot)
    await pilot.press("question_mark")
    await settled(pilot)


def test_snapshot_of_the_help_at_80x24(tmp_path: Path, snap_compare) -> None:
    """The help overlay on the smallest terminal: the whole width, each description wrapped under
    its own column (not back under the keys), the rest of it a scroll away."""
    run = recorded("measuring", tmp_path)
    link, now = Link(True, "recorded"), last_ts(run) + 5
    app = RulerConsole(run, clock=lambda: now, probe=lambda *_: link)
    assert snap_compare(app, terminal_size=(80, 24), run_before=open_help)


async def test_the_help_scrolls_to_its_last_mark_at_80x24(tmp_path: Path) -> None:
    """Every line of the help starts at the keys' column (a key, a heading, the intro) or at the
    descriptions' (a description wrapped), never elsewhere; its end is a scroll away."""
    app = RulerConsole(recorded("measuring", tmp_path), probe=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_help(pilot)

        def starts() -> set[int]:
            inner = [line[1:-1] for line in screen_text(app).splitlines()[1:-1]]  # in the border
            return {len(line) - len(line.lstrip()) for line in inner if line.strip()}

        pick = next(line for line in screen_text(app).splitlines() if "pick a window" in line)
        column = pick.index("pick a window") - 1
        last = "the place n, w, p act on"
        assert last not in screen_text(app) and starts() == {2, column}
        await pilot.press("end")  # the dialog has the focus: the keys scroll it
        await until(pilot, lambda: last in screen_text(app))
        assert "ruler console" not in screen_text(app) and starts() == {2, column}


async def test_rep_bars_start_at_zero() -> None:
    from textual.app import App, ComposeResult

    from tui.widgets.panels import RepBars

    class Bars(App[None]):
        CSS = "RepBars { width: 6; height: 1; }"

        def compose(self) -> ComposeResult:
            yield RepBars()

    async with Bars().run_test(size=(20, 4)) as pilot:
        bars = pilot.app.query_one(RepBars)
        bars.data = [700.0, 135.0, 700.0]  # the notes' leaked C8 rep: a stub between full bars
        await pilot.pause()
        assert str(bars.render()) == "█▂█"
        bars.data = [1.78, 1.81]  # 2 % apart: two full bars, not an empty one beside a full one
        await pilot.pause()
        assert str(bars.render()) == "██"
        bars.data = [float(v) for v in range(1, 10)]  # more reps than fit: the newest six
        await pilot.pause()
        assert str(bars.render()) == "▄▄▅▆▇█"  # 4/9 .. 9/9 of eight steps, rounded


async def test_a_refusal_quoting_the_operators_words_is_shown_as_text(measuring) -> None:
    """The engine's refusal quotes what the operator typed: its toast shows markup in it ([/x]
    closes nothing, [link=...] would make a link) as typed, and escapes as escapes."""
    run, engine = measuring
    app = RulerConsole(run, probe_interval=0.3)
    markup = "[/x] [link=https://evil.example]y[/link]"
    async with app.run_test(size=(120, 30)) as pilot:
        await settled(pilot)
        app.main.command("rerun", [markup])
        await until(pilot, lambda: len(list(app._notifications)) == 1)
        app.main.command("rerun", ["row\x1b]0;TITLE\x07"])
        await until(pilot, lambda: len(list(app._notifications)) == 2)
        toasts = list(app._notifications)
        assert markup in str(toasts[0].message) and markup in toasts[0].title
        assert not [t for t in toasts if t.markup]  # the message shown as it is, not read as markup
        assert not [t for t in toasts if "\x1b" in t.title + str(t.message)]
        assert "row\\x1b]0;TITLE\\x07 refused" in toasts[1].title
