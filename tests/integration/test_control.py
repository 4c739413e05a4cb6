"""The detached engine and its control socket, with real processes and a real llama-server."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from engine import control
from engine import testbed as tb_mod
from engine.record.liveness import engine_alive, read_pid
from tests.integration.live import RULER, events, finish, journaled_receipts, kinds, wait_for

CAMPAIGN = """\
name: ctl
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 2, -t: 1, --metrics: true}}
windows:
  - name: ctx
    axis: context 2048
    change:
      args: {{-c: 2048}}
sessions:
  s1: [ctx]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
    code: {{prompts: ["Write a Python function that adds two numbers."]}}{over}
  concurrency: [1, 2]
  reps: {reps}
  requests_per_rep: 2
  max_tokens: 16
leak: {{max_reruns: 0}}
timeouts: {{boot: 120, request: 60}}
quality: {{enabled: false}}  # the control plane is under test here, not the checks
"""


# A class whose one prompt (3000 tokens) is longer than any slot's context: the real server refuses
# every request of it (HTTP 400, exceed_context_size_error), so each of its rows is void.
OVER = '\n    over: {{prompts: ["' + "sea " * 3000 + '"]}}'


def start_detached(tmp_path: Path, reps: int = 3, over: bool = False) -> Path:
    spec = tmp_path / "ctl.yaml"
    spec.write_text(CAMPAIGN.format(reps=reps, over=OVER.format() if over else ""))
    out = subprocess.run([*RULER, "run", str(spec), "--detach", "--results-dir",
                          str(tmp_path / "results")], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert "engine detached" in out.stdout
    return next((tmp_path / "results").iterdir())


@pytest.mark.slow
def test_engine_survives_the_terminal_and_refuses_a_second(testbed: tb_mod.Testbed,
                                                           tmp_path: Path) -> None:
    spec = tmp_path / "ctl.yaml"
    spec.write_text(CAMPAIGN.format(reps=2, over=""))
    # A "terminal": a shell in its own process group that runs ruler, then lingers.
    term = subprocess.Popen(["bash", "-c", f"{' '.join(RULER)} run {spec} --detach --results-dir "
                             f"{tmp_path / 'results'} < /dev/null; sleep 600"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    run = None
    try:
        deadline = time.monotonic() + 120
        while run is None and time.monotonic() < deadline:
            runs = list((tmp_path / "results").glob("*/engine.pid"))
            run = runs[0].parent if runs else None
            time.sleep(0.1)
        assert run is not None
        wait_for(run, lambda e: bool(kinds(e, "rep_done")), what="a first rep")
        os.killpg(term.pid, signal.SIGHUP)
        os.killpg(term.pid, signal.SIGKILL)  # the whole terminal is gone
        term.wait(10)
        seen = len(kinds(events(run), "rep_done"))
        wait_for(run, lambda e: len(kinds(e, "rep_done")) > seen + 1, what="reps after the hangup")
        assert engine_alive(run)
        # One engine per run directory.
        second = subprocess.run([*RULER, "engine", str(run)], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 2
        assert "another engine" in second.stderr and "is already running" in second.stderr
        evs = wait_for(run, lambda e: bool(kinds(e, "run_finished")), timeout=300, what="the end")
        assert kinds(evs, "run_finished")[-1]["status"] == "finished"
    finally:
        if run:
            finish(run)
        if term.poll() is None:
            os.killpg(term.pid, signal.SIGKILL)


@pytest.mark.slow
def test_kill_9_then_resume_keeps_every_finished_rep(testbed: tb_mod.Testbed,
                                                      tmp_path: Path) -> None:
    run = start_detached(tmp_path, reps=3)
    try:
        # Kill mid-shape: right after the first rep of the third row.
        wait_for(run, lambda e: len(kinds(e, "row_done")) >= 2 and e[-1]["kind"] == "rep_done"
                 and e[-1]["rep"] == 1, what="the middle of a shape")
        pid = read_pid(run)
        assert pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while engine_alive(run) and time.monotonic() < deadline:
            time.sleep(0.1)
        before = events(run)
        reps_before = [(e["session"], e["window"], e["class"], e["concurrency"], e["attempt"],
                        e["rep"], e["agg_tok_s"]) for e in kinds(before, "rep_done")]
        rows_before = list(csv.DictReader((run / "throughput.csv").open()))
        files_before = journaled_receipts(run, before)
        server_pid = kinds(before, "server_started")[-1]["pid"]
        print(f"killed after {len(reps_before)} reps, {len(rows_before)} rows")

        out = subprocess.run([*RULER, "run", "--resume", str(run), "--headless"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        after = events(run)
        assert after[: len(before)] == before  # the journal only grew
        reps_after = [(e["session"], e["window"], e["class"], e["concurrency"], e["attempt"],
                       e["rep"], e["agg_tok_s"]) for e in kinds(after, "rep_done")]
        assert reps_after[: len(reps_before)] == reps_before
        # No finished rep measured twice: each (row, attempt, rep) appears once.
        assert len({r[:6] for r in reps_after}) == len(reps_after)
        resumed = kinds(after, "shape_resumed")
        assert resumed and resumed[0]["reps_kept"] >= 1
        rows_after = list(csv.DictReader((run / "throughput.csv").open()))
        keyed = {(r["session"], r["window"], r["class"], r["concurrency"]): r for r in rows_after}
        # A finished row's own figures stay; its delta, noise between boots and call are the whole
        # run's (engine.record.judgement) and move as more boots land.
        judged = {"delta", "delta_lo", "delta_hi", "boot_noise", "boot_noise_how", "p_value",
                  "p_adjusted", "verdict", "verdict_why"}
        for r in rows_before:
            mine = keyed[(r["session"], r["window"], r["class"], r["concurrency"])]
            assert {k: v for k, v in mine.items() if k not in judged} == \
                {k: v for k, v in r.items() if k not in judged}
        assert len(rows_after) == 2 * 2 * 2  # 2 classes x 2 concurrencies x 2 windows
        assert len(files_before) >= len(reps_before)
        for path, data in files_before.items():
            assert path.read_bytes() == data, path
        assert kinds(after, "stray_stopped")[0]["pid"] == server_pid
        with pytest.raises(ProcessLookupError):
            os.kill(server_pid, 0)
        print(f"after resume: {len(reps_after)} reps, {len(rows_after)} rows")
    finally:
        finish(run)


@pytest.mark.slow
def test_each_command_changes_what_the_engine_does(testbed: tb_mod.Testbed,
                                                   tmp_path: Path) -> None:
    # The over-long class's rows are void (and max_reruns 0 leaves them so): something to rerun.
    run = start_detached(tmp_path, reps=2, over=True)
    try:
        wait_for(run, lambda e: bool(kinds(e, "rep_done")), what="a first rep")
        assert control.send(run, "resume") == {"ok": False, "error": "already running"}
        assert control.send(run, "pause")["ok"]
        # A pass in flight finishes first (on a loaded box a rep outlasted a fixed 1.5 s wait);
        # the engine journals "paused" when it holds, and from then on nothing moves. The pause
        # lasts a rep's length as reps take here, so a rep that ignored it would have begun long
        # before the resume; the first rep after it began after the resume (its end less its
        # wall time; the journal's clock has millisecond steps).
        evs = wait_for(run, lambda e: bool(kinds(e, "paused")), what="the pause to hold")
        n, paused = len(kinds(evs, "rep_done")), kinds(evs, "paused")[0]
        rep_s = max(r["wall_s"] for r in kinds(evs, "rep_done"))
        while time.time() < paused["ts"] + rep_s:
            time.sleep(0.1)
        assert control.send(run, "resume")["ok"]
        evs = wait_for(run, lambda e: len(kinds(e, "rep_done")) > n, what="reps after resume")
        resumed = next(c for c in kinds(evs, "command") if c["cmd"] == "resume")
        after = kinds(evs, "rep_done")[n]
        assert after["seq"] > resumed["seq"]
        assert after["ts"] - after["wall_s"] >= resumed["ts"] - 0.01, (after, resumed)
        with socket.socket(socket.AF_UNIX) as s:  # a client gone wrong: the engine shrugs it off
            with control.addressable(run / control.SOCKET) as address:  # deep tmp dirs under xdist
                s.connect(address)
            s.settimeout(30)
            f = s.makefile("rwb")
            f.write(b"[" * 60_000 + b"\n" + b"x" * 1_000_000 + b"\n" + b'{"cmd": "status"}\n')
            f.flush()
            assert [json.loads(f.readline())["ok"] for _ in range(3)] == [False, False, True]

        assert control.send(run, "rewarm")["ok"]
        wait_for(run, lambda e: any(str(w.get("label", "")).startswith("rewarm")
                                    for w in kinds(e, "warm_done")), what="the rewarm pass")

        # The rest runs paused, so the engine cannot run ahead of the test to its last window
        # (the advance would then end the run, and the abort find nothing to abort): the rerun
        # is queued while paused, the advance ends the window it is held in, and the rerun's
        # window boots again after it and holds there too, so the run is still going for the abort.
        evs = wait_for(run, lambda e: any(r["status"] == "void" for r in kinds(e, "row_done")),
                       what="a void row")
        void = next(r for r in kinds(evs, "row_done") if r["status"] == "void")
        key = f"{void['session']}-{void['window']}/{void['class']}/c{void['concurrency']}"
        held = len(kinds(events(run), "paused"))
        assert control.send(run, "pause")["ok"]
        evs = wait_for(run, lambda e: len(kinds(e, "paused")) > held, what="the pause to hold again")
        window = kinds(evs, "paused")[-1]["window"]
        reply = control.send(run, "rerun", [key])
        assert reply["ok"], reply
        assert control.send(run, "rerun", ["s9-nope/x/c1"])["ok"] is False

        # Advance while paused ends the window with no resume (issue 26 item 11), the pause held on.
        reply = control.send(run, "advance")
        assert reply["ok"] and "still paused" in reply["reply"], reply
        wait_for(run, lambda e: any(w["status"] == "advanced" for w in kinds(e, "window_finished")),
                 what="the advanced window, paused")
        held = len(kinds(events(run), "paused"))
        wait_for(run, lambda e: any(s.get("rerun") and s["class"] == void["class"]
                                    and s["concurrency"] == void["concurrency"]
                                    for s in kinds(e, "shape_started"))
                 and len(kinds(e, "paused")) > held, what="the rerun, held by the pause")

        # An abort while paused leaves no pause on record (item 10: "aborted PAUSED").
        assert control.send(run, "abort")["ok"]
        evs = wait_for(run, lambda e: bool(kinds(e, "run_finished")), what="the abort")
        assert kinds(evs, "run_finished")[-1]["status"] == "aborted"
        cmds = [e["cmd"] for e in kinds(evs, "command")]
        assert cmds == ["pause", "resume", "rewarm", "pause", "rerun", "advance", "abort"]
        wait_for(run, lambda e: not engine_alive(run), what="the engine to exit")
        status = subprocess.run([*RULER, "status", str(run)], capture_output=True, text=True,
                                timeout=60, stdin=subprocess.DEVNULL)
        first = status.stdout.splitlines()[0]
        assert "  aborted  " in first and "PAUSED" not in first, status.stdout
        assert "Traceback" not in (run / "engine.log").read_text()
        assert all(e["who"]["uid"] == os.getuid() for e in kinds(evs, "command"))
        assert window
    finally:
        finish(run)


# ------------------------------------------------------------------ a damaged journal

TINY = """\
name: tiny-{suffix}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 1, -t: 1, --metrics: true}}
windows:
  - name: ctx
    axis: context 2048
    change:
      args: {{-c: 2048}}
sessions:
  s1: [ctx]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Name three colours."]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 1
  max_tokens: 8
timeouts: {{boot: 120, request: 60}}
quality: {{enabled: false}}
"""


@pytest.mark.slow
def test_resume_refuses_a_damaged_journal_and_writes_nothing(testbed: tb_mod.Testbed,
                                                             tmp_path: Path) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.format(suffix=uuid.uuid4().hex[:6]))
    out = subprocess.run([*RULER, "run", str(spec), "--detach", "--results-dir",
                          str(tmp_path / "results")], capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    run = next((tmp_path / "results").iterdir())
    try:
        wait_for(run, lambda e: bool(kinds(e, "run_finished")), timeout=300, what="the end")
        deadline = time.monotonic() + 30
        while engine_alive(run) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        finish(run)
    # Every receipt is the owner's alone: the journal and the logs as much as the rep files.
    modes = {str(p.relative_to(run)): oct(p.stat().st_mode & 0o777) for p in [run, *run.rglob("*")]}
    assert {"journal.jsonl", "engine.log", "windows/s1-ctx/boot.log"} <= set(modes)
    assert all(m == ("0o700" if (run / p).is_dir() else "0o600") for p, m in modes.items()), modes

    journal = run / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    # Damage in the middle of the finished run: after the control window's first rep.
    k = next(i for i, x in enumerate(lines) if json.loads(x)["kind"] == "rep_done") + 1
    for bad, reason in ((b"garbage\n", "not JSON: garbage"), (lines[k - 1], "duplicate seq")):
        journal.write_bytes(b"".join(lines[:k] + [bad] + lines[k:]))
        before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
        for argv in (["run", "--resume", str(run), "--headless"], ["engine", str(run)]):
            out = subprocess.run([*RULER, *argv], capture_output=True, text=True, timeout=60)
            assert out.returncode == 2, (out.stdout, out.stderr)
            assert f"{journal}:{k + 1}: {reason}" in out.stderr
            assert f"ruler will not resume {run}" in out.stderr
            assert "Traceback" not in out.stderr
            after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
            assert after == before  # not one byte written, nothing measured again
        status = subprocess.run([*RULER, "status", str(run), "--json"], capture_output=True,
                                text=True, timeout=60)
        s = json.loads(status.stdout)
        assert [d["line"] for d in s["journal_damage"]] == [k + 1]
        assert s["status"] == "finished" and s["rows"]["total"] == 2
    print(out.stderr)
