"""Exit codes and messages: each case through the real command line, never a traceback.

Real parts: the campaign cases run llama-server processes from the testbed. The disk cases use a
real tmpfs (read-only, or full) and need root to mount it; CI runs as root.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.errors import (
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_ENGINE,
    EXIT_NOTHING_MEASURED,
    EXIT_OK,
    EXIT_STOPPED,
)
from engine.record.journal import read_events
from engine.record.state import fold

RULER = [sys.executable, "-m", "engine"]
REPO = Path(__file__).resolve().parents[2]
FINISHED = REPO / "tests" / "fixtures" / "journals" / "finished"

# A campaign that starts nothing: the results-directory checks come before any server.
INERT = """\
name: exits
server: llamacpp
runtime: process
process:
  command: ["/bin/false"]
control:
  model: /nonexistent/model.gguf
  args:
    -m: ${model}
windows:
  - name: w
    axis: context 4096
    change: {args: {-c: 4096}}
sessions:
  s1: [w]
workload:
  classes:
    prose: {prompts: ["Hi."]}
  concurrency: [1]
  reps: 1
quality: {enabled: false}
"""

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


def ruler(*args: str, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RULER, *args], capture_output=True, text=True, timeout=timeout,
                          **kw)


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


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


def only_run(results: Path) -> Path:
    runs = sorted(results.iterdir())
    assert len(runs) == 1, runs
    return runs[0]


# ------------------------------------------------------------------ the documented codes


def test_help_and_readme_list_every_exit_code() -> None:
    out = ruler("--help")
    assert out.returncode == 0
    for code, said in EXIT_CODES.items():
        assert f"  {code}  {said}" in out.stdout
    readme = (REPO / "README.md").read_text()
    line = next(x for x in readme.splitlines() if "Exit codes:" in x)
    para = readme[readme.index(line):].split("\n\n")[0]
    assert re.findall(r"\b(\d) (?:the|ruler|bad|stopped)", para) == [str(c) for c in EXIT_CODES]


# ------------------------------------------------------------------ results directory


def test_results_dir_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(INERT)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    out = ruler("run", str(spec), "--headless", "--results-dir", str(a_file))
    no_traceback(out)
    assert out.returncode == EXIT_BAD_INPUT
    assert out.stderr.strip() == f"--results-dir {a_file}: not a directory (it is a file)"

    under = a_file / "results"
    out = ruler("run", str(spec), "--headless", "--results-dir", str(under))
    no_traceback(out)
    assert out.returncode == EXIT_BAD_INPUT
    assert out.stderr.strip() == f"--results-dir {under}: {a_file} is a file, not a directory"
    assert a_file.read_text() == "not a directory\n"


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {got.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_results_dir_read_only_or_full_is_bad_input(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(INERT)
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        out = ruler("run", str(spec), "--headless", "--results-dir", str(ro))
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT
        assert out.stderr.strip() == f"--results-dir {ro}: cannot write there (Read-only file system)"
    with tmpfs(tmp_path / "full", "size=16k") as full:
        with contextlib.suppress(OSError):
            (full / "filler").write_bytes(b"\0" * 65536)  # fills it: ENOSPC on the rest
        out = ruler("run", str(spec), "--headless", "--results-dir", str(full))
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT
        assert out.stderr.strip() == (f"--results-dir {full}: cannot write there "
                                      "(No space left on device)")
        assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no half-made run directory


# ------------------------------------------------------------------ reading commands


def closed_pipe_run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with its stdout a pipe nobody reads any more (`ruler status | head -0`)."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([*RULER, *args], stdout=w, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    finally:
        os.close(w)


def test_status_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    run = shutil.copytree(FINISHED, tmp_path / "run")  # status leaves an engine.lock behind
    for args in (["status", str(run)], ["status", str(run), "--json"]):
        out = closed_pipe_run(*args)
        assert out.stderr == ""
        assert out.returncode == EXIT_OK


def test_compare_on_a_malformed_throughput_csv_is_bad_input(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(FINISHED, good)
    shutil.copytree(FINISHED, bad)
    header = ("session,window,axis,class,concurrency,reps,agg_tok_s,per_user_tok_s,ttft_ms,"
              "decode_tok_s,accept_len,accept_rate,accept_source,spread,status,attempts,reason,"
              "source,ruler_check\n")
    row = "s1,control,control,prose,1,1,10.0,10.0,50,10.0,,,,0.01,ok,1,,,\n"
    (good / "throughput.csv").write_text(header + row)
    path = bad / "throughput.csv"
    cases = {
        # A column gone (a hand-edited or foreign file): the KeyError of old.
        header.replace("concurrency,", "") + row.replace(",1,1,", ",1,", 1):
            f"{path}:2: no 'concurrency' column",
        header + row + "s1,ctx,ctx,prose,four,1,10.0,10.0,50,10.0,,,,0.01,ok,1,,,\n":
            f"{path}:3: cannot read this row (invalid literal for int() with base 10: 'four')",
        header + "s1,control,control,prose,1,1,10.0,10.0,50,10.0,,,,0.01,ok,1,,reps/x.jsonl,\n":
            f"{path}:2: a receipt it names cannot be read (No such file or directory: "
            f"{bad / 'reps' / 'x.jsonl'})",
    }
    for text, said in cases.items():
        path.write_text(text)
        out = ruler("compare", str(good), str(bad))
        no_traceback(out)
        assert out.returncode == EXIT_BAD_INPUT
        assert out.stderr.strip() == said
    out = ruler("compare", str(good), str(good))
    assert out.returncode == EXIT_OK, out.stderr


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
    assert out.stderr.startswith("ruler run: measured nothing: every window was rejected or failed")
    assert out.stderr.count("\n") == 1 and "Broken pipe" not in out.stderr
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
    window = 20.0
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
        assert (ws.status, ws.reason) == ("failed", "window timeout after 20 s")
        assert ws.started_ts is not None and ws.ended_ts is not None
        # Cut at the deadline, not when the pass would have ended (the pass polls every 0.1 s).
        assert window - 0.5 <= ws.ended_ts - ws.started_ts < window + 5
        row = state.rows[f"{key}/count/c1"]
        assert row.status == "failed"
        assert row.row["reason"] == "window timeout after 20 s (0 reps done)"
        assert (run / "windows" / key / "failure.txt").read_text().startswith(
            "reason: window timeout after 20 s\n")
    warm = [e for e in events if e["kind"] == "warm_done"]
    assert len(warm) == 2  # each window's warm pass was cut and recorded; no rep followed
    assert not [e for e in events if e["kind"] == "rep_done"]
    assert "count C1 row failed: window timeout after 20 s (0 reps done)" in out.stdout


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
    spec = real_campaign(tmp_path, window=3600, requests=40, max_tokens=8)
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
        assert stderr.strip().startswith("ruler run: the run stopped: cannot write ")
        assert "(No space left on device)" in stderr
        assert stderr.strip().endswith(f"continue with: ruler run --resume {run}")
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
