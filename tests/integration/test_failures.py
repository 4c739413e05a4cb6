"""A server that dies mid-window fails that window, keeps its log tail, and the campaign goes on.

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
from engine.record.journal import read_events
from engine.record.state import fold

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
workload:
  classes:
    prose: {prompts: ["Write one sentence about the sea."]}
    code: {prompts: ["Write a Python function that adds two numbers."]}
  concurrency: [1]
  reps: 3
  requests_per_rep: 3
  max_tokens: 48   # a rep long enough (seconds) that the kill lands in the next one
quality: {enabled: false}
timeouts: {boot: 120, request: 30}
"""


def kill_after_first_rep(results: Path, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the victim's server as soon as the journal shows its first rep done."""
    while not stop.is_set():
        for journal in results.glob("*/journal.jsonl"):
            events = read_events(journal)
            pids = [e["pid"] for e in events if e["kind"] == "server_started" and e["window"] == "victim"]
            if pids and any(e["kind"] == "rep_done" and e.get("window") == "victim" for e in events):
                os.kill(pids[0], signal.SIGKILL)
                killed.append(pids[0])
                return
        time.sleep(0.05)


def test_server_death_mid_window_fails_it_and_the_campaign_goes_on(testbed: tb_mod.Testbed,
                                                                  tmp_path: Path) -> None:
    spec = tmp_path / "dies.yaml"
    spec.write_text(CAMPAIGN)
    results = tmp_path / "results"
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=kill_after_first_rep, args=(results, killed, stop), daemon=True)
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
    assert state.windows["s1-victim"].status == "failed"
    assert state.windows["s1-after"].status == "done"  # the campaign went on

    failure = (run / "windows" / "s1-victim" / "failure.txt").read_text()
    assert "server died" in failure and "last lines of the log:" in failure
    assert "exit code -9" in failure and "slot" in failure.split("last lines of the log:")[1]  # its own log

    rows = {(r["window"], r["class"]): r for r in csv.DictReader((run / "throughput.csv").open())}
    assert rows[("victim", "prose")]["status"] == "failed"
    # The kill lands in rep 2, or in rep 3 when the machine is so busy that the killer, polling
    # the journal, wakes after rep 2 ended: either way the finished reps are kept, none after.
    done = re.search(r"the server failed after (\d+) reps", rows[("victim", "prose")]["reason"])
    assert done and int(done[1]) in (1, 2), rows[("victim", "prose")]["reason"]
    assert rows[("victim", "prose")]["source"].count(";") == int(done[1]) - 1
    assert rows[("victim", "code")]["status"] == "failed"  # never measured, still a row
    assert rows[("victim", "code")]["reason"].startswith("not measured")
    assert rows[("after", "prose")]["status"] in ("ok", "noisy")
    assert rows[("control", "prose")]["status"] in ("ok", "noisy")
