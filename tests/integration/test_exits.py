"""Exit codes and messages: each case through the real command line, never a traceback.

Real parts: the campaign cases run llama-server processes from the testbed. The disk cases use a
real tmpfs (read-only, or full) and need root to mount it; CI runs as root.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.errors import (
    EXIT_ENGINE,
    EXIT_NOTHING_MEASURED,
    EXIT_OK,
    EXIT_STOPPED,
)
from engine.record.fold import fold
from engine.record.journal import read_events
from tests.cli import RULER, closed_pipe_run, no_traceback, ruler, tmpfs

# One window, one class, C1, one rep. COUNT asks for a long reply and the pass has many requests,
# so a measurement never ends on its own within the window timeouts used here.
REAL = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args:
    -m: ${{model}}
    -c: 2048
    -t: 1
    -fa: "off"
    --metrics: true{control_extra}
windows:
  - name: ctx
    axis: context 4096
    change: {{args: {{-c: 4096}}}}
sessions:
  s1: [ctx]
control_position: first
workload:
  classes:
    count: {{prompts: ["{prompt}"]}}
  concurrency: [1]
  reps: 1
  requests_per_rep: {requests}
  max_tokens: {max_tokens}
quality: {{enabled: false}}
timeouts: {{boot: 120, request: 120, window: {window}}}
"""
COUNT = "Count from 1 to 500, one number per line."


def real_campaign(tmp_path: Path, window: float | str, requests: int = 1, max_tokens: int = 8,
                  control_extra: str = "", prompt: str = "Say hi.") -> Path:
    name = f"exits-{uuid.uuid4().hex[:6]}"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(REAL.format(name=name, window=window, requests=requests, max_tokens=max_tokens,
                                control_extra=control_extra, prompt=prompt))
    return spec


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has stopped, just not been reaped


def said(stderr: str) -> str:
    """What a run said on stderr, less the testbed's timing of a step that took a second or more
    (``[testbed] gguf models: 1.3 s``: resolving ``${testbed.*}`` on a busy machine, seen)."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith("[testbed] "))


def only_run(results: Path) -> Path:
    runs = sorted(results.iterdir())
    assert len(runs) == 1, runs
    return runs[0]


# ------------------------------------------------------------------ the documented codes


# ------------------------------------------------------------------ results directory


# ------------------------------------------------------------------ campaigns for real


def test_every_window_rejected_exits_4(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    # A q8_0 V cache needs flash attention, which the control turns off: llama-server refuses
    # the control and the window alike.
    spec = real_campaign(tmp_path, window=3600, control_extra="\n    --cache-type-v: q8_0")
    results = tmp_path / "results"
    out = ruler("run", str(spec), "--headless", "--results-dir", str(results), timeout=300)
    print(out.stdout[-2000:], out.stderr[-2000:])
    no_traceback(out)
    assert out.returncode == EXIT_NOTHING_MEASURED
    state = fold(read_events(only_run(results) / "journal.jsonl"))
    assert state.status == "finished"
    assert {k: w.status for k, w in state.windows.items()} == {"s1-control": "rejected",
                                                               "s1-ctx": "rejected"}
    assert "quantized V cache requires flash_attn" in " ".join(state.windows["s1-control"].errors)


def test_a_run_whose_output_reader_went_away_still_runs_to_its_end(testbed: tb_mod.Testbed,
                                                                  tmp_path: Path) -> None:
    spec = real_campaign(tmp_path, window=3600, control_extra="\n    --cache-type-v: q8_0")
    results = tmp_path / "results"
    out = closed_pipe_run("run", str(spec), "--headless", "--results-dir", str(results))
    # The one line a run that measured nothing ends with, and no broken pipe's complaint.
    assert said(out.stderr).startswith("ruler run: measured nothing: every window was rejected or failed")
    assert said(out.stderr).count("\n") == 1 and "Broken pipe" not in out.stderr
    assert out.returncode == EXIT_NOTHING_MEASURED  # the run's own code, not the pipe's
    assert fold(read_events(only_run(results) / "journal.jsonl")).status == "finished"


def test_window_timeout_during_boot_fails_each_window_and_the_campaign_goes_on(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    spec = real_campaign(tmp_path, window="1.0e-9")  # YAML reads a bare 1e-9 as a string
    results = tmp_path / "results"
    out = ruler("run", str(spec), "--headless", "--results-dir", str(results), timeout=300)
    print(out.stdout[-2000:], out.stderr[-2000:])
    no_traceback(out)
    assert out.returncode == EXIT_NOTHING_MEASURED
    run = only_run(results)
    events = read_events(run / "journal.jsonl")
    state = fold(events)
    assert state.status == "finished"
    for key in ("s1-control", "s1-ctx"):  # the second window booted after the first timed out
        ws = state.windows[key]
        assert (ws.status, ws.reason) == ("failed", "window timeout after 1e-09 s during its boot")
        assert (run / "windows" / key / "failure.txt").read_text().startswith(
            "reason: window timeout after 1e-09 s during its boot\n")
    assert not [e for e in events if e["kind"] in ("window_ready", "row_done")]
    assert "s1/control failed: window timeout after 1e-09 s during its boot" in out.stdout


@pytest.mark.slow
def test_window_timeout_cuts_the_shape_in_flight(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    # Ten seconds: a boot of the small model is a second or two even on a busy machine (the
    # assertion below says so if not), and the window's rest is cut in its warm pass.
    window = 10.0
    # 40 long replies in the warm pass alone: minutes at one thread, far past the window.
    spec = real_campaign(tmp_path, window=window, requests=40, max_tokens=400, prompt=COUNT)
    results = tmp_path / "results"
    out = ruler("run", str(spec), "--headless", "--results-dir", str(results), timeout=300)
    print(out.stdout[-3000:], out.stderr[-2000:])
    no_traceback(out)
    assert out.returncode == EXIT_NOTHING_MEASURED
    run = only_run(results)
    events = read_events(run / "journal.jsonl")
    state = fold(events)
    assert state.status == "finished"
    for key in ("s1-control", "s1-ctx"):
        ws = state.windows[key]
        assert ws.boot_s is not None, f"{key} never became ready: the timeout is too short here"
        assert (ws.status, ws.reason) == ("failed", f"window timeout after {window:g} s")
        assert ws.started_ts is not None and ws.ended_ts is not None
        # Cut at the deadline, not when the pass would have ended (the pass polls every 0.1 s).
        assert window - 0.5 <= ws.ended_ts - ws.started_ts < window + 5
        row = state.rows[f"{key}/count/c1"]
        assert row.status == "failed"
        assert row.row["reason"] == f"window timeout after {window:g} s (0 reps done)"
        assert (run / "windows" / key / "failure.txt").read_text().startswith(
            f"reason: window timeout after {window:g} s\n")
    warm = [e for e in events if e["kind"] == "warm_done"]
    assert len(warm) == 2  # each window's warm pass was cut and recorded; no rep followed
    assert not [e for e in events if e["kind"] == "rep_done"]
    assert f"count C1 row failed: window timeout after {window:g} s (0 reps done)" in out.stdout


def test_an_operator_stop_exits_3(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    spec = real_campaign(tmp_path, window=3600, requests=40, max_tokens=400, prompt=COUNT)
    results = tmp_path / "results"
    proc = subprocess.Popen([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            journals = list(results.glob("*/journal.jsonl"))
            if journals and any(e["kind"] == "window_ready" for e in read_events(journals[0])):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the control never became ready")
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(stdout[-2000:], stderr[-2000:])
    assert "Traceback" not in stderr
    assert proc.returncode == EXIT_STOPPED
    state = fold(read_events(only_run(results) / "journal.jsonl"))
    assert state.status == "aborted"
    assert state.windows["s1-control"].status == "aborted"


@pytest.mark.slow
def test_results_disk_full_mid_run_stops_with_a_message(testbed: tb_mod.Testbed,
                                                        tmp_path: Path) -> None:
    # Short requests: the warm pass ends within seconds and its receipt is the next file written.
    # A dozen of them outlast the wait for the filler by far (it is written within the 0.1 s
    # poll of window_ready), and the resumed run has four such passes to measure, not 40-request ones.
    spec = real_campaign(tmp_path, window=3600, requests=12, max_tokens=8)
    with tmpfs(tmp_path / "results", "size=1m") as results:
        proc = subprocess.Popen([*RULER, "run", str(spec), "--headless", "--results-dir",
                                 str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                journals = list(results.glob("*/journal.jsonl"))
                if journals and any(e["kind"] == "window_ready" for e in read_events(journals[0])):
                    break
                time.sleep(0.1)
            else:
                pytest.fail("the control never became ready")
            before = (journals[0]).read_bytes()
            with contextlib.suppress(OSError):  # the disk fills up under the running engine
                (results / "filler").write_bytes(b"\0" * (2 << 20))
            stdout, stderr = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
        print(stdout[-2000:], stderr[-2000:])
        assert "Traceback" not in stderr
        assert proc.returncode == EXIT_ENGINE
        run = journals[0].parent
        assert said(stderr).strip().startswith("ruler run: the run stopped: cannot write ")
        assert "(No space left on device)" in stderr
        # ruler named as found: `ruler` on the PATH, else this environment's script
        assert re.search(rf"continue with: \S*ruler run --resume {re.escape(str(run))}$", stderr.strip())
        after = journals[0].read_bytes()
        assert after.startswith(before)  # everything written before the disk filled is kept
        server_pid = next(e["pid"] for e in read_events(journals[0])
                          if e["kind"] == "server_started")
        assert not running(server_pid)  # the window's server was stopped

        # With room again, the run resumes from its journal and finishes.
        (results / "filler").unlink()
        out = ruler("run", "--resume", str(run), "--headless", timeout=300)
        print(out.stdout[-2000:], out.stderr[-2000:])
        assert out.returncode == EXIT_OK, out.stderr
        state = fold(read_events(journals[0]))
        assert state.status == "finished" and state.resumes == 1
        assert {r.status for r in state.rows.values()} <= {"ok", "noisy"}
