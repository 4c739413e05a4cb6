"""The console (tui/) attached to a real engine on the llama.cpp testbed: keys sent over its
control socket change what the engine does, and what it journals reaches the screen. The console
on recorded runs is tests/unit/tui/test_app.py.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from engine import testbed as tb_mod
from engine.errors import EXIT_STOPPED
from engine.record.fold import fold
from engine.record.journal import read_events
from tests import campaigns
from tests.console import live_marked, screen_text, table_text, until
from tui.app import RulerConsole
from tui.widgets.log import BootLog

# Slow: each test drives a real engine's campaign, over ten seconds.
pytestmark = pytest.mark.slow

LIVE = """\
name: tui-live
server: llamacpp
runtime: process
process:
  command: ["${testbed.llama_server}"]
control:
  model: ${testbed.models}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {-m: "${model}", -c: 1024, -np: 1, -t: 1, --metrics: true}
windows:
  - name: ctx
    axis: context 2048
    change:
      args: {-c: 2048}
sessions:
  s1: [ctx]
control_position: first
workload:
  classes:
    prose: {prompts: ["Name three colours.", "Write one sentence about the sea."]}
  concurrency: [1]
  reps: 3
  requests_per_rep: 2
  max_tokens: 24
timeouts:
  boot: 120
  request: 60
quality: {enabled: false}  # the console is under test here, not the checks
"""


def start_engine(campaign: str, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    """A real engine running ``campaign`` headless, once its control socket is up (the console
    attaches to it): the process and its run directory."""
    spec = tmp_path / "campaign.yaml"
    spec.write_text(campaign)
    results = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                             "--results-dir", str(results)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while not list(results.glob("*/control.sock")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    return proc, next(results.iterdir())


@pytest.mark.timeout(600)
async def test_against_a_real_engine(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    proc, run = start_engine(LIVE, tmp_path)
    try:
        app = RulerConsole(run, probe_interval=0.5)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.main.link is not None and app.main.link.connected, timeout=30)
            # A rep lands on screen as the engine measures it.
            await until(pilot, lambda: any(any(r.reps.values()) for r in app.main.state.rows.values()),
                        timeout=300)
            await until(pilot, lambda: any(any(ch.isdigit() for ch in row[1])
                                           for row in table_text(app, "#reps")), timeout=10)
            assert app.query_one(BootLog).line_count > 0
            assert app.main.state.workload == {"classes": ["prose"], "concurrency": [1], "reps": 3,
                                          "requests": [2], "max_tokens": 24}
            began = app.main.state.windows[app.main.state.current or ""].started_ts  # the fold keeps it
            started = app.main.state.started_ts
            assert began is not None and started is not None and started <= began
            await pilot.press("p")
            await until(pilot, lambda: "pausing before the next rep" in screen_text(app))
            # PAUSED only once the engine journals that the pause took effect, between reps.
            await until(pilot, lambda: "PAUSED" in screen_text(app), timeout=120)
            assert any(e["kind"] == "paused" for e in read_events(run / "journal.jsonl"))
            await pilot.press("p")
            await until(pilot, lambda: "resuming" in screen_text(app))
            await pilot.press("a", "y")
            await until(pilot, lambda: app.main.state.status == "aborted", timeout=120)
            await until(pilot, lambda: "ABORTED" in screen_text(app))
            await until(pilot, lambda: "engine exited" in screen_text(app), timeout=30)
        assert proc.wait(timeout=120) == EXIT_STOPPED  # an operator abort: exit 3, --resume goes on
        cmds = [(e["cmd"], e["reply"]) for e in read_events(run / "journal.jsonl")
                if e["kind"] == "command"]
        assert [c for c, _ in cmds] == ["pause", "resume", "abort"]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)


PLACES = """\
name: tui-places-live
server: llamacpp
runtime: process
process:
  command: ["${testbed.llama_server}"]
control:
  model: ${testbed.models}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {-m: "${model}", -c: 1024, -np: 1, -t: 1, --metrics: true}
windows:
  - name: ctx
    axis: context 2048
    change:
      args: {-c: 2048}
sessions:
  s1: [ctx]
  s2: [ctx]
places:
  - {name: a, cpus: "0"}
  - {name: b, cpus: "1"}
control_position: first
workload:
  classes:
    prose: {prompts: ["Name three colours.", "Write one sentence about the sea."]}
  concurrency: [1]
  reps: 200  # the controls measure long enough to be seen live together and advanced (then aborted)
  requests_per_rep: 2
  max_tokens: 24
timeouts:
  boot: 120
  request: 60
quality: {enabled: false}
"""


@pytest.mark.timeout(600)
async def test_two_places_live_at_once_and_advance_goes_to_the_session_under_the_cursor(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    """A real engine runs two sessions at once on two places (CPU 0 and CPU 1). The windows list
    shows both controls live at the same moment; n on s2's control sends ``advance s2`` (a bare
    ``advance`` is refused while two sessions run), and only s2's control is advanced."""
    proc, run = start_engine(PLACES, tmp_path)
    try:
        app = RulerConsole(run, probe_interval=0.5)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.main.link is not None and app.main.link.connected, timeout=30)
            # Both controls measuring, in one frame of the windows list.
            both = ["s1 control", "s2 control"]
            await until(pilot, lambda: live_marked(app) == both and all(
                app.main.state.windows[k].status == "measuring" for k in ("s1-control", "s2-control")),
                timeout=120)
            rows = {r[0].strip("▶ ").strip(): r[1].strip() for r in table_text(app, "#windows")}
            assert [rows[w] for w in both] == ["measuring", "measuring"]
            print("\n".join(screen_text(app).splitlines()[:12]))
            order = app.main.ui.windows.keys
            while app.main.sel.shown != "s2-control":  # the cursor onto s2's control
                up = order.index(app.main.sel.shown or "") > order.index("s2-control")
                await pilot.press("up" if up else "down")
                await pilot.pause(0.1)
            # The cursor's place is marked, whichever line the live places are in.
            await until(pilot, lambda: any(line.startswith(" ▸ place b")
                                           for line in screen_text(app).splitlines()[2:4]))
            await pilot.press("n")
            await until(pilot, lambda: "advance s2: ending window s2/control" in screen_text(app))
            await until(pilot, lambda: app.main.state.windows["s2-control"].status == "advanced")
            assert app.main.state.windows["s1-control"].status == "measuring"
            await pilot.press("a", "y")
            await until(pilot, lambda: app.main.state.status == "aborted", timeout=120)
        assert proc.wait(timeout=120) == EXIT_STOPPED
        events = read_events(run / "journal.jsonl")
        assert [(e["cmd"], e["args"]) for e in events if e["kind"] == "command"] == [
            ("advance", ["s2"]), ("abort", [])]
        advanced = [(e["session"], e["window"]) for e in events
                    if e["kind"] == "window_finished" and e["status"] == "advanced"]
        assert advanced == [("s2", "control")]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)


def kill_after_first_rep(run: Path, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the victim window's server once the journal shows its first rep done: the fault the
    operator then reruns from the console (a real kill from outside, timed by the engine's journal)."""
    while not stop.is_set() and not killed:
        events = read_events(run / "journal.jsonl")
        pids = [e["pid"] for e in events if e["kind"] == "server_started" and e["window"] == "victim"]
        if pids and any(e["kind"] == "rep_done" and e.get("window") == "victim" for e in events):
            os.kill(pids[0], signal.SIGKILL)
            killed.append(pids[0])
        time.sleep(0.05)


@pytest.mark.timeout(900)
async def test_r_on_a_row_whose_server_was_killed_reruns_it_with_its_windows_checks(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    """Issue 48's loop from the keyboard: the victim window's llama-server is killed mid-window,
    its row fails; r on that row in the console queues it; the console says what the rerun waits
    on; the window booted again after the next one ends runs its quality checks, so the window has
    its verdicts (verdicts.csv, greedy.json, teacher-forced.json), not only its figure."""
    spec = campaigns.testbed_campaign(
        "tui-rerun-live", {"victim": {"axis": "context 4096 (its server is killed after rep 1)",
                                      "args": {"-c": 4096}},
                           "after": {"axis": "context 1024", "args": {"-c": 1024}}},
        {"s1": ["victim", "after"]}, model="Q4_1",
        concurrency=[1], reps=3, requests_per_rep=2,
        max_tokens=48,  # a rep long enough (seconds) that the kill lands inside the next one
        quality={"greedy": {"n": 2, "max_tokens": 16}, "teacher_forced": {"positions": 2}},
        boot=120)
    spec["timeouts"]["request"] = 30
    proc, run = start_engine(yaml.safe_dump(spec, sort_keys=False), tmp_path)
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=kill_after_first_rep, args=(run, killed, stop), daemon=True)
    killer.start()
    row = "s1-victim/prose/c1"
    try:
        app = RulerConsole(run, probe_interval=0.5)
        async with app.run_test(size=(160, 40)) as pilot:
            await until(pilot, lambda: app.main.link is not None and app.main.link.connected, timeout=30)
            await until(pilot, lambda: row in app.main.state.rows
                        and app.main.state.rows[row].status == "failed", timeout=600)
            assert killed
            # The cursor onto the victim window, then r on its failed row in the reps table.
            order = app.main.ui.windows.keys
            while app.main.sel.shown != "s1-victim":
                up = order.index(app.main.sel.shown or "") > order.index("s1-victim")
                await pilot.press("up" if up else "down")
                await pilot.pause(0.1)
            await pilot.press("tab")
            await until(pilot, lambda: app.focused is app.main.ui.reps
                        and app.main.ui.reps.cursor_key() == row)
            await pilot.press("r")
            await until(pilot, lambda: f"queued {row}: its window will be booted again" in screen_text(app))
            # What it waits on, said in the header from the engine's journal (rerun_waiting):
            # the window s1-after to end, then its server to stop (each event checked below).
            await until(pilot, lambda: "1 rerun queued, waiting on" in screen_text(app))
            await until(pilot, lambda: app.main.state.windows["s1-victim"].status == "done"
                        and app.main.state.status == "finished", timeout=600)
        assert proc.wait(timeout=120) == 0
    finally:
        stop.set()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)

    events = read_events(run / "journal.jsonl")
    assert [(e["cmd"], e["args"]) for e in events if e["kind"] == "command"] == [("rerun", [row])]
    assert [(e["window"], e["status"]) for e in events if e["kind"] == "window_finished"] == [
        ("control", "done"), ("victim", "failed"), ("after", "done"), ("victim", "done")]
    assert [(e["window"], e["waiting"]) for e in events if e["kind"] == "rerun_waiting"] == [
        ("victim", "window s1-after to end"), ("victim", "the server of s1-after to stop")]
    rows = {(r["window"], r["class"]): r for r in csv.DictReader((run / "throughput.csv").open())}
    assert rows[("victim", "prose")]["status"] in ("ok", "noisy")
    assert rows[("victim", "prose")]["attempts"] == "2"
    # The window's verdicts, which its first boot (killed before its checks) never got.
    verdicts = {v["window"]: v for v in csv.DictReader((run / "verdicts.csv").open())}
    assert re.fullmatch(r"\d/2", verdicts["victim"]["greedy"]), verdicts["victim"]
    assert verdicts["victim"]["reference"] == "s1-control"
    assert verdicts["victim"]["dlogp_max"] != ""
    window = run / "windows" / "s1-victim"
    assert json.loads((window / "greedy.json").read_text())["reference"] == "s1-control"
    assert (window / "teacher-forced.json").is_file()
    assert fold(events).windows["s1-victim"].verdicts["greedy"]["summary"]
