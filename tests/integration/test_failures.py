"""A server that dies mid-window fails that window, keeps its log tail, and the campaign goes on;
the operator's rerun of the window measures its failed rows on a fresh boot and runs its quality
checks there (the first boot died before them).

Real parts: llama-server processes on the testbed; the fault is a real SIGKILL of the window's
server after its first rep, timed from the engine's own journal.
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.record.fold import fold
from engine.record.journal import read_events

# Slow: a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: dies
server: llamacpp
runtime: process
process:
  command: ["${testbed.llama_server}"]
control:
  model: ${testbed.models}/SmolLM2-135M-Instruct.Q4_1.gguf
  args:
    -m: ${model}
    -c: 2048
    -np: 2
    -t: 1
    --metrics: true
windows:
  - name: victim
    axis: context 4096 (its server is killed after rep 1)
    change: {args: {-c: 4096}}
  - name: after
    axis: context 1024
    change: {args: {-c: 1024}}
sessions:
  s1: [victim, after]
control_position: first
workload:
  classes:
    prose: {prompts: ["Write one sentence about the sea."]}
    code: {prompts: ["Write a Python function that adds two numbers."]}
  concurrency: [1]
  reps: 3
  requests_per_rep: 2
  max_tokens: 48   # a rep long enough (a second or more) that the kill lands in the next one
quality:
  greedy: {n: 2, max_tokens: 16}
  teacher_forced: {positions: 2}
timeouts: {boot: 120, request: 30}
"""


def kill_after_first_rep(results: Path, killed: list[int], replies: list[str],
                         stop: threading.Event) -> None:
    """SIGKILL the victim's server as soon as the journal shows its first rep done; once the
    campaign has gone on to the next window, ask for the victim's failed rows again (`ruler ctl
    RUN rerun s1-victim`), as an operator would."""
    while not stop.is_set():
        for journal in results.glob("*/journal.jsonl"):
            events = read_events(journal)
            pids = [e["pid"] for e in events if e["kind"] == "server_started" and e["window"] == "victim"]
            if not killed and pids and any(e["kind"] == "rep_done" and e.get("window") == "victim"
                                           for e in events):
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
            if killed and any(e["kind"] == "window_started" and e["window"] == "after" for e in events):
                ctl = subprocess.run([sys.executable, "-m", "engine", "ctl", str(journal.parent), "rerun",
                                      "s1-victim"], capture_output=True, text=True, timeout=60)
                replies.append(ctl.stdout.strip() or ctl.stderr.strip())
                return
        time.sleep(0.05)


def test_server_death_mid_window_fails_it_and_the_campaign_goes_on(testbed: tb_mod.Testbed,
                                                                  tmp_path: Path) -> None:
    spec = tmp_path / "dies.yaml"
    spec.write_text(CAMPAIGN)
    results = tmp_path / "results"
    killed: list[int] = []
    replies: list[str] = []
    stop = threading.Event()
    killer = threading.Thread(target=kill_after_first_rep, args=(results, killed, replies, stop),
                              daemon=True)
    killer.start()
    try:
        proc = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                               "--results-dir", str(results)], capture_output=True, text=True,
                              timeout=600)
    finally:
        stop.set()
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr  # a failed window is a result, not an engine error
    assert killed, "the victim's first rep never landed"
    run = next(results.iterdir())
    state = fold(read_events(run / "journal.jsonl"))
    assert state.status == "finished"
    finished = [e for e in read_events(run / "journal.jsonl") if e["kind"] == "window_finished"]
    assert [(e["window"], e["status"]) for e in finished] == [
        ("control", "done"), ("victim", "failed"), ("after", "done"), ("victim", "done")]

    failure = (run / "windows" / "s1-victim" / "failure.txt").read_text()
    assert "server died" in failure and "last lines of the log:" in failure
    assert "exit code -9" in failure and "slot" in failure.split("last lines of the log:")[1]  # its own log

    # The rows as the failure left them: the journal's first row of each victim shape.
    first = {e["class"]: e for e in reversed(read_events(run / "journal.jsonl"))
             if e["kind"] == "row_done" and e["window"] == "victim"}
    assert first["prose"]["status"] == "failed"
    # The kill lands in rep 2, or in rep 3 when the machine is so busy that the killer, polling
    # the journal, wakes after rep 2 ended: either way the finished reps are kept, none after.
    done = re.search(r"the server failed after (\d+) reps?", first["prose"]["reason"])
    assert done and int(done[1]) in (1, 2), first["prose"]["reason"]
    assert first["prose"]["source"].count(";") == int(done[1]) - 1
    # The rep the kill cut short is the death's, never a slow rep the leak rule suspects (the
    # operator's rerun is an ordinary attempt: its noise is the leak rule's to judge).
    assert not [e for e in read_events(run / "journal.jsonl") if e["kind"] == "leak_suspected"
                and e["window"] == "victim" and e["attempt"] == first["prose"]["attempts"]]
    assert first["code"]["status"] == "failed"  # never measured, still a row
    assert first["code"]["reason"].startswith("not measured")

    # The operator's rerun of the window (its failed rows) booted it again after the next window.
    assert replies == ["queued 2 rows of s1-victim (s1-victim/prose/c1, s1-victim/code/c1): its "
                       "window will be booted again once window s1-after has ended"]
    journal = read_events(run / "journal.jsonl")
    reboots = [e for e in journal if e["kind"] == "window_reboot"]
    assert [(e["window"], e["reason"]) for e in reboots] == [("victim", "operator rerun of a failed row")]
    # What the rerun waited on, as the console says it: the window up, then its server stopping.
    assert [(e["window"], e["waiting"]) for e in journal if e["kind"] == "rerun_waiting"] == [
        ("victim", "window s1-after to end"), ("victim", "the server of s1-after to stop")]
    assert (run / "windows" / "s1-victim" / "boot-rerun1.log").is_file()
    assert state.windows["s1-victim"].status == "done"
    assert not state.reruns_waiting

    # Its quality checks ran on the rerun's boot: the verdicts the first boot never got.
    verdicts = {v["window"]: v for v in csv.DictReader((run / "verdicts.csv").open())}
    assert re.fullmatch(r"\d/2", verdicts["victim"]["greedy"]), verdicts["victim"]
    assert verdicts["victim"]["reference"] == "s1-control"
    assert verdicts["victim"]["dlogp_max"] != ""
    assert (run / "windows" / "s1-victim" / "greedy.json").is_file()
    assert state.windows["s1-victim"].verdicts["greedy"]["summary"]

    rows = {(r["window"], r["class"]): r for r in csv.DictReader((run / "throughput.csv").open())}
    assert rows[("victim", "prose")]["status"] in ("ok", "noisy")
    assert int(rows[("victim", "prose")]["attempts"]) == 2
    assert rows[("victim", "code")]["status"] in ("ok", "noisy")
    assert rows[("after", "prose")]["status"] in ("ok", "noisy")
    assert rows[("control", "prose")]["status"] in ("ok", "noisy")
