"""Campaigns with ``runtime: slurm`` on a real Slurm cluster (``.ci/slurm-up``'s single node) and the
real llama.cpp testbed: each window one batch job, its receipts, its queue, its end.

Every Slurm test lives in this one module so that ``--dist loadfile`` runs them on one worker, in
order: the node is one, and ``exclusive`` (the default) lets one job at a time run on it. What the
tests say about a job they read from Slurm itself (``scontrol``, ``squeue --json``), not through
ruler's own parsers. Each test cancels whatever job of its run, or of its own, is left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.record.liveness import engine_alive, read_pid
from engine.record.results import dir_identity
from engine.runtime.base import stray_mark
from engine.runtime.slurm import options

RULER = [sys.executable, "-m", "engine"]

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: slurm
slurm:
  start: {start}
  time: "5"
docker:
  image: ${{testbed.image}}
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 1, -t: 1, -fa: "off", --metrics: true}}
windows:
{window_specs}sessions:
  s1: [{windows}]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Name three colours.", "Write one sentence about the sea."]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: {requests}
  max_tokens: {max_tokens}
timeouts: {{boot: {boot}, request: 60, queue: {queue}}}
quality: {quality}
"""
NO_QUALITY = "{enabled: false}  # the runtime is under test here, not the checks"

WINDOWS = {
    "ctx": "{name: ctx, axis: context 2048, change: {args: {-c: 2048}}}",
    "ctx3": "{name: ctx3, axis: context 3072, change: {args: {-c: 3072}}}",
    # llama.cpp refuses it at boot: the control turns flash attention off.
    "noop": "{name: noop, axis: --defrag-thold 0.1 (deprecated; parses and does nothing), "
            "change: {args: {--defrag-thold: 0.1}}}",
    "qv8": "{name: qv8, axis: q8_0 V cache without flash attention, "
           "change: {args: {--cache-type-v: q8_0}}}",
}


# ------------------------------------------------------------------ Slurm, read directly


def scontrol(job: str) -> dict[str, str]:
    """Slurm's record of a job now (``scontrol -o show job``), as key -> value."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return record_fields(out)


def record_fields(line: str) -> dict[str, str]:
    # A value runs to the next " Key=": a path may hold spaces (a results directory with one).
    return {m.group(1): m.group(2).strip() for m in re.finditer(
        r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s[A-Za-z][\w/:]*=|$)", line.strip())}


def jobs_listed() -> list[dict[str, Any]]:
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, timeout=30,
                         check=True).stdout
    return list(json.loads(out)["jobs"])


def active(job: dict[str, Any]) -> bool:
    state = job["job_state"]
    state = state[0] if isinstance(state, list) else state
    return state not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                         "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def the_node() -> tuple[str, int]:
    """The cluster's one node and its CPU count, as sinfo says."""
    name, cpus = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True,
                                text=True, timeout=30, check=True).stdout.split()[:2]
    return name, int(cpus)


def wait_state(job: str, pred: Callable[[str], bool], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = scontrol(job)["JobState"]
        if pred(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


class Jobs:
    """What a test leaves on the cluster: its blockers (comment ``ruler-test=<token>``) and the
    jobs of its runs (comment ``ruler-run=<run id>;ruler-dir=<its identity>``), cancelled when
    the test ends."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.token = uuid.uuid4().hex[:8]

    def blocker(self, seconds: int) -> str:
        """A job that holds every CPU of the node for ``seconds``; returned once it runs."""
        job = subprocess.run(
            ["sbatch", "--parsable", "--exclusive", f"--comment=ruler-test={self.token}",
             "--job-name=ruler-test-blocker", "--output=/dev/null", "--time=5",
             "--wrap", f"sleep {seconds}"],
            capture_output=True, text=True, timeout=30, check=True).stdout.strip().split(";")[0]
        assert wait_state(job, lambda s: s != "PENDING") == "RUNNING"
        return job

    def comments(self) -> set[str]:
        marks = {f"ruler-test={self.token}"}
        for info in self.results.glob("*/engine.json"):
            marks.add(stray_mark(json.loads(info.read_text())["run_id"], dir_identity(info.parent) or ""))
        return marks

    def cancel_left(self) -> list[str]:
        marks = self.comments()
        left = [str(j["job_id"]) for j in jobs_listed() if j.get("comment") in marks and active(j)]
        if left:
            subprocess.run(["scancel", *left], timeout=30, check=False)
        return left


@pytest.fixture
def jobs(slurm_cluster: None, testbed: tb_mod.Testbed, tmp_path: Path) -> Iterator[Jobs]:
    j = Jobs(tmp_path / "results")
    yield j
    left = j.cancel_left()
    if left:
        print(f"cancelled jobs the test left: {left}")


# ------------------------------------------------------------------ runs


def write_campaign(tmp_path: Path, name: str, windows: str, start: str = "process",
                   requests: int = 2, max_tokens: int = 8, boot: int = 60,
                   queue: int = 600, quality: str = NO_QUALITY) -> Path:
    spec = tmp_path / f"{name}.yaml"
    specs = "".join(f"  - {WINDOWS[w.strip()]}\n" for w in windows.split(","))
    spec.write_text(CAMPAIGN.format(name=name, start=start, windows=windows, requests=requests,
                                    max_tokens=max_tokens, boot=boot, queue=queue,
                                    window_specs=specs, quality=quality))
    return spec


def run_headless(spec: Path, results: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    return proc


def start_headless(spec: Path, results: Path) -> tuple[subprocess.Popen[str], Path]:
    """``ruler run --headless`` in the background; returns it once its journal exists."""
    proc = subprocess.Popen([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        journals = list(results.glob("*/journal.jsonl"))
        if journals:
            return proc, journals[0].parent
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("no run directory after 60 s")


def ruler_status(run: Path, *args: str) -> str:
    done = subprocess.run([*RULER, "status", str(run), *args], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def only_run(results: Path) -> Path:
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    assert len(runs) == 1, runs
    return runs[0]


def events(run: Path) -> list[dict[str, Any]]:
    return read_events(run / "journal.jsonl")


def kinds(evs: list[dict[str, Any]], kind: str, window: str | None = None) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == kind and (window is None or e.get("window") == window)]


def wait_for(run: Path, pred: Callable[[list[dict[str, Any]]], bool], timeout: float = 120,
             what: str = "") -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        evs = events(run)
        if pred(evs):
            return evs
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last events: "
                         f"{[e['kind'] for e in events(run)[-8:]]}")


def run_id_of(run: Path) -> str:
    return str(json.loads((run / "engine.json").read_text())["run_id"])


def job_of(evs: list[dict[str, Any]], window: str) -> str:
    """The job of a window's last boot."""
    return str(kinds(evs, "server_started", window)[-1]["job"])


def check_receipts(run: Path, name: str, window: str, job: str, node: str, cpus: int,
                   state: str = "COMPLETED", exit_code: str = "0:0",
                   output: str = "") -> dict[str, str]:
    """A window's job.sh, job.record.txt and boot facts say what Slurm says of its job; ``output``:
    how job.sh writes the --output path, when not as is."""
    wdir = run / "windows" / f"s1-{window}"
    script = (wdir / "job.sh").read_text().splitlines()
    assert script[0] == "#!/bin/bash"
    output = output or f"{wdir}/boot.log"
    for line in (f"#SBATCH --job-name=ruler-{name}-s1-{window}",
                 f"#SBATCH --comment={stray_mark(run_id_of(run), dir_identity(run) or '')}",
                 f"#SBATCH --output={output}", "#SBATCH --exclusive", "#SBATCH --time=5",
                 "#SBATCH --no-requeue"):
        assert line in script, (line, script)
    recorded = (wdir / "job.record.txt").read_text()
    assert recorded.count("\n") == 1 and recorded.startswith(f"JobId={job} ")
    rec = record_fields(recorded)
    assert rec["JobName"] == f"ruler-{name}-s1-{window}"
    assert (rec["JobState"], rec["ExitCode"], rec["NodeList"]) == (state, exit_code, node)
    assert rec["Command"] == str(wdir / "job.sh")
    if not output.startswith('"'):  # scontrol expands an --output pattern (%j) even when escaped
        assert rec["StdOut"] == str(wdir / "boot.log")
    # Verbatim: Slurm, asked again about the ended job, says the same line.
    assert recorded.strip() == subprocess.run(["scontrol", "-o", "show", "job", job],
                                              capture_output=True, text=True, timeout=30,
                                              check=True).stdout.strip()
    facts = json.loads((wdir / "boot-facts.json").read_text())["facts"]
    assert (facts["node"], facts["slurm_job"], facts["slurm_cpus"], facts["slurm_gpus"]) == (
        node, job, str(cpus), "none")
    # Receipts are the owner's alone, like every other file of the run (job.place: written by the job).
    receipts = ("job.sh", "job.place", "job.record.txt", "boot.log")
    assert {f: oct(stat.S_IMODE((wdir / f).stat().st_mode)) for f in receipts} == dict.fromkeys(
        receipts, oct(0o600))
    # The job itself wrote the first line of boot.log, on its node.
    first = (wdir / "boot.log").read_text().splitlines()[0]
    assert re.fullmatch(rf"ruler-job: job {job} on node {node} \(\S+\), port \d+, cpus {cpus}, "
                        r"gpus none", first), first
    return rec


# ------------------------------------------------------------------ the tests


def test_two_windows_as_process_jobs(jobs: Jobs, tmp_path: Path) -> None:
    name = f"slp-{jobs.token[:4]}"
    proc = run_headless(write_campaign(tmp_path, name, "ctx"), jobs.results)
    run = only_run(jobs.results)
    assert proc.returncode == 0, proc.stderr
    evs = events(run)
    state = fold(evs)
    assert state.status == "finished"
    assert {k: w.status for k, w in state.windows.items()} == {"s1-control": "done", "s1-ctx": "done"}
    node, cpus = the_node()

    placed = {e["window"]: e for e in kinds(evs, "window_placed")}
    assert set(placed) == {"control", "ctx"}
    for window in ("control", "ctx"):
        job = job_of(evs, window)
        p = placed[window]
        assert (p["job"], p["node"]) == (job, node)
        assert re.fullmatch(rf"http://{re.escape(node)}:\d+", p["url"]), p["url"]
        # The server listens on the port its job picked on the node, and said so in job.place.
        port = p["url"].rsplit(":", 1)[1]
        place = json.loads((run / "windows" / f"s1-{window}" / "job.place").read_text())
        assert (place["node"], str(place["port"]), place["job"]) == (node, port, job)
        log = (run / "windows" / f"s1-{window}" / "boot.log").read_text()
        assert f"llama_server: listening on http://0.0.0.0:{port}" in log
        seqs = [e["seq"] for e in evs if e.get("window") == window and e["kind"] in (
            "server_started", "window_placed", "window_ready", "window_finished", "server_stopped")]
        assert [e["kind"] for e in evs if e["seq"] in seqs] == [
            "server_started", "window_placed", "window_ready", "window_finished", "server_stopped"]
        rec = check_receipts(run, name, window, job, node, cpus)
        stopped = kinds(evs, "server_stopped", window)[-1]
        assert stopped["record"]["JobState"] == "COMPLETED" and stopped["record"]["JobId"] == job
        assert stopped["exit_code"] == 0
        # The window's receipts name the job Slurm ran, and ruler's rows name the window.
        assert rec["BatchHost"] == node

    # The session's later windows go where its control ran; the control goes where Slurm puts it.
    control_sh = (run / "windows" / "s1-control" / "job.sh").read_text()
    ctx_sh = (run / "windows" / "s1-ctx" / "job.sh").read_text()
    assert "--nodelist" not in control_sh
    assert f"#SBATCH --nodelist={node}\n" in ctx_sh
    assert scontrol(job_of(evs, "ctx"))["ReqNodeList"] == node
    assert scontrol(job_of(evs, "control"))["ReqNodeList"] == "(null)"
    rows = kinds(evs, "row_done")
    assert [(r["window"], r["status"] in ("ok", "noisy"), r["agg_tok_s"] > 0) for r in rows] == [
        ("control", True, True), ("ctx", True, True)], rows


@pytest.mark.slow
def test_a_window_that_changes_nothing_differs_from_its_control_in_no_boot_fact(
        jobs: Jobs, tmp_path: Path) -> None:
    """Each window is a job of its own, so its job id always differs from the control's: that is
    not an effect of the window's change, and must not hide a window that changes nothing."""
    name = f"sln-{jobs.token[:4]}"
    quality = ('{greedy: {prompts: ["Name three colours."], n: 1, max_tokens: 4}, '
               "teacher_forced: {positions: 1}, knobs_check: false}")
    proc = run_headless(write_campaign(tmp_path, name, "noop", quality=quality), jobs.results)
    run = only_run(jobs.results)
    assert proc.returncode == 0, proc.stderr
    evs = events(run)
    facts = json.loads((run / "windows" / "s1-noop" / "boot-facts.json").read_text())
    diff = facts["diff_vs_control"]
    assert diff["changed"]["slurm_job"] == [job_of(evs, "noop"), job_of(evs, "control")]
    assert {"node", "slurm_cpus", "slurm_gpus"} <= set(diff["equal"])  # the same box
    effect = json.loads((run / "windows" / "s1-noop" / "no-effect.json").read_text())
    assert effect["facts_differ"] == {}
    assert not any(r.startswith("boot facts differ") for r in effect["reasons"]), effect["reasons"]


@pytest.mark.slow
def test_two_windows_as_docker_jobs(jobs: Jobs, testbed_image: str, docker_client: Any,
                                    tmp_path: Path) -> None:
    name = f"sld-{jobs.token[:4]}"
    proc = run_headless(write_campaign(tmp_path, name, "ctx", start="docker"), jobs.results)
    run = only_run(jobs.results)
    run_id = run_id_of(run)
    try:
        assert proc.returncode == 0, proc.stderr
        evs = events(run)
        assert {k: w.status for k, w in fold(evs).windows.items()} == {
            "s1-control": "done", "s1-ctx": "done"}
        node, cpus = the_node()
        token = run_id.rsplit(".", 1)[1]
        for window in ("control", "ctx"):
            job = job_of(evs, window)
            check_receipts(run, name, window, job, node, cpus)
            script = (run / "windows" / f"s1-{window}" / "job.sh").read_text()
            container = f"ruler-{name}-s1-{window}-{token}"
            assert f"docker run --rm --name={container} --init " in script
            assert f" {testbed_image} -m " in script
            assert f"trap 'docker stop --time=10 {container} >/dev/null 2>&1' TERM INT" in script
            # The server answered from inside the container: llama.cpp's own boot lines, and the
            # container's port published on the port the job picked.
            log = (run / "windows" / f"s1-{window}" / "boot.log").read_text()
            assert "llama_server: listening on http://0.0.0.0:8080" in log
        # The job removed its container when it ended: none of this run is left.
        assert docker_client.containers.list(all=True, filters={"label": f"ruler.run={run_id}"}) == []
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": f"ruler.run={run_id}"}):
            c.remove(force=True)


@pytest.mark.slow
def test_a_job_that_fails_at_boot_is_rejected_with_its_slurm_record(jobs: Jobs,
                                                                     tmp_path: Path) -> None:
    name = f"slf-{jobs.token[:4]}"
    proc = run_headless(write_campaign(tmp_path, name, "qv8"), jobs.results)
    run = only_run(jobs.results)
    assert proc.returncode == 0, proc.stderr  # the control measured a row
    evs = events(run)
    node, cpus = the_node()
    job = job_of(evs, "qv8")
    check_receipts(run, name, "qv8", job, node, cpus, state="FAILED", exit_code="1:0")
    assert scontrol(job)["Reason"] == "NonZeroExitCode"
    rejected = kinds(evs, "window_rejected", "qv8")
    assert len(rejected) == 1
    reason = rejected[0]["reason"]
    assert reason == (f"server exited during boot (exit code 1); Slurm job {job} FAILED "
                      f"(reason NonZeroExitCode, exit code 1:0, node {node})")
    wdir = run / "windows" / "s1-qv8"
    log = (wdir / "boot.log").read_text().splitlines()
    said = [ln for ln in log if "quantized V cache requires flash_attn to be enabled" in ln]
    assert said, log[-20:]
    # The error lines are the server's own, verbatim from the log its node wrote.
    assert said[0] in rejected[0]["errors"]
    assert all(e in log for e in rejected[0]["errors"])
    rejection = (wdir / "rejection.txt").read_text()
    assert rejection.startswith(f"reason: {reason}\n\nerror lines (verbatim):\n{rejected[0]['errors'][0]}\n")
    assert said[0] in rejection
    stopped = kinds(evs, "server_stopped", "qv8")[-1]
    assert {k: stopped["record"][k] for k in ("JobState", "Reason", "ExitCode")} == {
        "JobState": "FAILED", "Reason": "NonZeroExitCode", "ExitCode": "1:0"}
    assert fold(evs).windows["s1-qv8"].status == "rejected"


@pytest.mark.slow
def test_scancel_mid_rep_fails_the_window_and_the_campaign_goes_on(jobs: Jobs,
                                                                  tmp_path: Path) -> None:
    name = f"slx-{jobs.token[:4]}"
    # Three requests of 16 tokens a rep: after the warm pass two reps are left, seconds of them.
    spec = write_campaign(tmp_path, name, "ctx, ctx3", requests=3, max_tokens=16)
    proc, run = start_headless(spec, jobs.results)
    try:
        evs = wait_for(run, lambda e: bool(kinds(e, "warm_done", "ctx")), what="ctx's warm pass")
        job = job_of(evs, "ctx")
        assert scontrol(job)["JobState"] == "RUNNING"
        subprocess.run(["scancel", job], timeout=30, check=True)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(out[-4000:])
    assert proc.returncode == 0, out
    evs = events(run)
    node = the_node()[0]
    assert scontrol(job)["JobState"] == "CANCELLED"
    finished = kinds(evs, "window_finished", "ctx")
    assert [f["status"] for f in finished] == ["failed"]
    reason = finished[0]["reason"]
    assert re.fullmatch(rf"server died during a pass \(exit code \d+\); Slurm job {job} CANCELLED "
                        rf"\(reason \w+, exit code \d+:\d+, node {node}\)", reason), reason
    failure = (run / "windows" / "s1-ctx" / "failure.txt").read_text()
    assert failure.startswith(f"reason: {reason}\n")
    # Slurm's own words on the cancel, as the job's output has them.
    assert f"*** JOB {job} ON {node} CANCELLED AT " in failure
    ctx_rows = kinds(evs, "row_done", "ctx")
    assert [r["status"] for r in ctx_rows] == ["failed"]
    assert re.match(r"the server failed after (0 reps|1 rep): server died during a pass",
                    ctx_rows[0]["reason"]), ctx_rows[0]["reason"]
    assert kinds(evs, "server_stopped", "ctx")[-1]["record"]["JobState"] == "CANCELLED"
    # The campaign went on: the next window booted its own job and measured.
    assert [f["status"] for f in kinds(evs, "window_finished", "ctx3")] == ["done"]
    assert job_of(evs, "ctx3") != job
    assert scontrol(job_of(evs, "ctx3"))["JobState"] == "COMPLETED"
    assert [r["status"] in ("ok", "noisy") for r in kinds(evs, "row_done", "ctx3")] == [True]
    assert fold(evs).status == "finished"


@pytest.mark.slow
def test_kill_9_of_the_engine_then_resume_cancels_the_stray_job(jobs: Jobs,
                                                                tmp_path: Path) -> None:
    name = f"slk-{jobs.token[:4]}"
    spec = write_campaign(tmp_path, name, "ctx", requests=3)
    out = subprocess.run([*RULER, "run", str(spec), "--detach", "--results-dir", str(jobs.results)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    run = only_run(jobs.results)
    try:
        # Mid-shape: the window's two reps are still to come.
        evs = wait_for(run, lambda e: bool(kinds(e, "warm_done", "ctx")), what="ctx's warm pass")
        pid = read_pid(run)
        assert pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while engine_alive(run) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not engine_alive(run)
        stray = job_of(evs, "ctx")
        # The engine is gone; its job is not.
        assert scontrol(stray)["JobState"] == "RUNNING"
        before = events(run)

        resumed = subprocess.run([*RULER, "run", "--resume", str(run), "--headless"],
                                 capture_output=True, text=True, timeout=300,
                                 stdin=subprocess.DEVNULL)
        print(resumed.stdout[-4000:], resumed.stderr[-2000:])
        assert resumed.returncode == 0, resumed.stderr
    finally:
        pid = read_pid(run)
        if pid and engine_alive(run):
            os.kill(pid, signal.SIGKILL)
    after = events(run)
    assert after[: len(before)] == before
    strays = kinds(after, "stray_stopped")
    assert [(s["job"], s["name"]) for s in strays] == [(stray, f"ruler-{name}-s1-ctx")]
    assert strays[0]["state"] == "RUNNING"
    # Ended by ruler's stop (a TERM the job passes to the server, which exits cleanly).
    rec = scontrol(stray)
    assert (rec["JobState"], rec["ExitCode"]) == ("COMPLETED", "0:0")
    assert not any(str(j["job_id"]) == stray and active(j) for j in jobs_listed())
    # The window booted again as a new job and finished.
    again = job_of(after, "ctx")
    assert again != stray and scontrol(again)["JobState"] == "COMPLETED"
    assert [f["status"] for f in kinds(after, "window_finished", "ctx")] == ["done"]
    assert fold(after).status == "finished"


@pytest.mark.slow
def test_a_job_held_pending_shows_queued_with_slurms_reason_then_runs(jobs: Jobs,
                                                                     tmp_path: Path) -> None:
    name = f"slq-{jobs.token[:4]}"
    boot = 8
    # Boots take about a second here: a boot clock that counted the queue would time out.
    spec = write_campaign(tmp_path, name, "ctx", boot=boot)
    blocker = jobs.blocker(boot + 10)
    proc, run = start_headless(spec, jobs.results)
    try:
        evs = wait_for(run, lambda e: any(q["reason"] == "Resources"
                                          for q in kinds(e, "window_queued", "control")),
                       timeout=30, what="the control queued behind the blocker")
        job = job_of(evs, "control")
        assert scontrol(job)["JobState"] == "PENDING" and scontrol(job)["Reason"] == "Resources"
        said = json.loads(ruler_status(run, "--json"))
        assert said["windows"]["s1-control"] == "queued"
        assert said["queued"] == {"s1-control": {"job": job, "reason": "Resources"}}
        assert f"  queued  s1-control: Slurm job {job} queued (Resources)\n" in ruler_status(run)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(out[-4000:])
    assert proc.returncode == 0, out
    evs = events(run)
    queued = kinds(evs, "window_queued", "control")
    assert [(q["job"], q["state"]) for q in queued] == [(job, "PENDING")] * len(queued)
    assert queued[-1]["reason"] == "Resources"
    assert {q["reason"] for q in queued} <= {"", "Resources"}
    placed = kinds(evs, "window_placed", "control")[0]
    ready = kinds(evs, "window_ready", "control")[0]
    assert placed["seq"] > queued[-1]["seq"] and ready["seq"] > placed["seq"]
    # It waited longer than its boot timeout in the queue, and booted within it once it ran.
    assert placed["queued_s"] > boot + 2, placed
    assert ready["boot_s"] < boot, ready
    # Slurm ran it when the blocker ended.
    assert scontrol(job)["StartTime"] >= scontrol(blocker)["EndTime"]
    assert [f["status"] for f in kinds(evs, "window_finished")] == ["done", "done"]
    assert f"s1/control queued: Slurm job {job} PENDING (Resources)\n" in out
    assert (f"s1/control runs on node {placed['node']} (job {job}, {placed['queued_s']:.1f} s in "
            f"the queue) {placed['url']}\n") in out
    assert "  nodes   s1 on " + placed["node"] in ruler_status(run)


@pytest.mark.slow
def test_queue_timeout_rejects_the_window_and_the_campaign_goes_on(jobs: Jobs,
                                                                  tmp_path: Path) -> None:
    name = f"slt-{jobs.token[:4]}"
    spec = write_campaign(tmp_path, name, "ctx", queue=4)
    blocker = jobs.blocker(240)
    proc, run = start_headless(spec, jobs.results)
    try:
        evs = wait_for(run, lambda e: bool(kinds(e, "window_rejected", "control")), timeout=60,
                       what="the control's queue timeout")
        # Free the node: the next window's job runs.
        subprocess.run(["scancel", blocker], timeout=30, check=True)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(out[-4000:])
    assert proc.returncode == 0, out
    evs = events(run)
    job = job_of(evs, "control")
    reason = kinds(evs, "window_rejected", "control")[0]["reason"]
    assert reason == (f"Slurm job {job} still PENDING after 4 s (queue timeout; Slurm's reason: "
                      "Resources)")
    rejection = (run / "windows" / "s1-control" / "rejection.txt").read_text()
    assert rejection.startswith(f"reason: {reason}\n")
    # The job that never ran was cancelled, not left to start later on a free node.
    rec = scontrol(job)
    assert (rec["JobState"], rec["Reason"]) == ("CANCELLED", "Resources")
    assert not (run / "windows" / "s1-control" / "job.place").exists()
    assert kinds(evs, "window_placed", "control") == []
    # The campaign went on: the next window queued, ran once the node was free, and measured.
    assert [f["status"] for f in kinds(evs, "window_finished", "ctx")] == ["done"]
    assert scontrol(job_of(evs, "ctx"))["JobState"] == "COMPLETED"
    assert {k: w.status for k, w in fold(evs).windows.items()} == {
        "s1-control": "rejected", "s1-ctx": "done"}



# ------------------------------------------------------------------ places: two sessions at once


@pytest.mark.slow
def test_two_sessions_run_at_once_as_slurm_jobs_on_one_node(jobs: Jobs, tmp_path: Path) -> None:
    """Issue 15 on Slurm: two places naming this node, each job one CPU, so both jobs run at once."""
    node, _ = the_node()
    spec = write_campaign(tmp_path, f"slpl-{jobs.token}", "ctx")
    text = spec.read_text().replace("  time: \"5\"\n", "  time: \"5\"\n  exclusive: false\n"
                                    "  sbatch: [\"--cpus-per-task=1\"]\n")
    text = text.replace("  s1: [ctx]\n", "  s1: [ctx]\n  s2: [ctx]\nplaces:\n"
                        f"  - {{name: p1, node: {node}}}\n  - {{name: p2, node: {node}}}\n")
    spec.write_text(text)
    proc = run_headless(spec, jobs.results)
    assert proc.returncode == 0, proc.stderr
    run = only_run(jobs.results)
    evs = events(run)
    st = fold(evs)
    assert {w.status for w in st.windows.values()} == {"done"}
    assert sorted(st.session_places.values()) == ["p1", "p2"]
    placed = kinds(evs, "window_placed")
    assert len(placed) == 4 and {e["node"] for e in placed} == {node}
    # From a job running (window_placed) to its window's end: a job of s1 and one of s2 overlap.
    up: dict[str, tuple[float, float]] = {}
    began: dict[str, float] = {}
    for e in evs:
        key = f"{e.get('session')}-{e.get('window')}"
        if e["kind"] == "window_placed":
            began[key] = e["ts"]
        elif e["kind"] == "window_finished" and key in began:
            up[key] = (began.pop(key), e["ts"])
    both = max(min(a[1], b[1]) - max(a[0], b[0]) for ka, a in up.items() for kb, b in up.items()
               if ka.startswith("s1-") and kb.startswith("s2-"))
    assert both > 1.0, up
    assert all(w.facts.get("slurm_cpus") == "1" for w in st.windows.values()), \
        {k: w.facts for k, w in st.windows.items()}
    for e in kinds(evs, "window_started"):
        assert "--cpus-per-task=1" in e["plan"]["slurm"]["sbatch"]
        assert e["plan"]["place"] == node


# ------------------------------------------------------------------ what sbatch reads


def sbatch_reads(word: str) -> tuple[str, ...]:
    """What the real sbatch makes of one option word, from glibc's own words: the long option it
    takes it for, the options it could be (ambiguous), or () when it knows none. Nothing is
    submitted: sbatch stops at the option, or finds no script on its empty standard input."""
    said = subprocess.run(["sbatch", word], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30).stderr
    if m := re.search(r"option '--([\w-]+)' (?:requires|doesn't allow) an argument", said):
        return (m.group(1),)
    if m := re.search(r"is ambiguous; possibilities:(.*)", said):
        return tuple(sorted(re.findall(r"'--([\w-]+)'", m.group(1))))
    if "unrecognized option" in said or "invalid option" in said:
        return ()
    return ("?",)  # taken, and no word says which: an option that may take a value, or none


def test_sbatch_reads_every_prefix_and_letter_as_rulers_table_says(slurm_cluster: None) -> None:
    """Every prefix of every long option in ruler's table of sbatch's options, and every letter,
    read by this cluster's sbatch: the guard refuses what sbatch would read as an owned option."""
    differ = []
    for prefix in sorted({n[:i] for n in options.LONG for i in range(1, len(n) + 1)}):
        ours = options.long_option(prefix)
        real = sbatch_reads(f"--{prefix}")
        if real == ("?",):  # no value needed, none refused: give it one to make sbatch name it
            real = sbatch_reads(f"--{prefix}=x")
        if real != ours and not (real == ("?",) and len(ours) == 1
                                 and ours[0] in options.MAY_TAKE_VALUE):
            differ.append((prefix, ours, real))
    assert differ == []
    for letter in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ":
        said = subprocess.run(["sbatch", f"-{letter}"], stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30).stderr
        known = "invalid option" not in said
        needs = "requires an argument" in said
        long = options.SHORT.get(letter)
        assert (known, needs) == (long is not None, long in options.NEEDS_VALUE), (letter, said)


def test_the_spellings_that_escaped_the_guard_set_what_ruler_owns_and_are_now_refused(
        slurm_cluster: None, tmp_path: Path) -> None:
    """Issue 26's abbreviations, in the #SBATCH lines of a held job: sbatch sets the job's output,
    error, comment, name, node and requeue from them (scontrol says so), so ruler refuses each,
    naming the campaign's file and line."""
    node, _ = the_node()
    spellings = [f"--outp={tmp_path}/out.log", f"--err={tmp_path}/err.log", "--comm=mine",
                 "--job=myname", f"--nodel={node}", "--requ", "--open=truncate"]
    script = tmp_path / "held.sh"
    script.write_text("#!/bin/bash\n" + "".join(f"#SBATCH {s}\n" for s in spellings)
                      + "#SBATCH --time=1\ntrue\n")
    job = subprocess.run(["sbatch", "--parsable", "--hold", str(script)], capture_output=True,
                         text=True, timeout=30, check=True).stdout.strip().split(";")[0]
    try:
        rec = scontrol(job)
    finally:
        subprocess.run(["scancel", job], timeout=30, check=False)
    assert (rec["StdOut"], rec["StdErr"], rec["Comment"], rec["JobName"], rec["ReqNodeList"],
            rec["Requeue"]) == (f"{tmp_path}/out.log", f"{tmp_path}/err.log", "mine", "myname",
                                node, "1")
    spec = write_campaign(tmp_path, "guard", "ctx")
    text = spec.read_text().replace('  time: "5"\n', '  time: "5"\n  sbatch:\n'
                                    + "".join(f"    - {s}\n" for s in spellings))
    spec.write_text(text)
    done = subprocess.run([*RULER, "validate", str(spec)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == len(spellings), lines
    for i, (line, spelling) in enumerate(zip(lines, spellings, strict=True)):
        assert line.startswith(f"{spec}:{8 + i}:7: slurm.sbatch[{i}]: {spelling.split('=')[0]} is "
                               "sbatch's --"), line
        assert line.endswith(": leave it out"), line


def test_a_results_directory_with_a_space_runs_its_slurm_windows(jobs: Jobs, tmp_path: Path) -> None:
    """Issue 26, item 12: every window of a run under a directory with a space (and '#', which an
    #SBATCH line takes for a comment, and '%', which starts an --output pattern) was rejected."""
    results = tmp_path / "odd dir #1 %j" / "results"
    jobs.results = results
    name = f"sls-{jobs.token[:4]}"
    proc = run_headless(write_campaign(tmp_path, name, "ctx"), results)
    assert proc.returncode == 0, proc.stderr
    run = only_run(results)
    evs = events(run)
    assert fold(evs).status == "finished"
    assert {k: w.status for k, w in fold(evs).windows.items()} == {"s1-control": "done",
                                                                    "s1-ctx": "done"}
    node, cpus = the_node()
    for window in ("control", "ctx"):
        wdir = run / "windows" / f"s1-{window}"
        # Quoted for sbatch's line reader; the backslash before the name turns slurmstepd's
        # patterns off (sbatch's reader makes one of the two).
        check_receipts(run, name, window, job_of(evs, window), node, cpus,
                       output=f'"{wdir}/\\\\boot.log"')
    # Written where ruler reads it, not where the pattern %j would have put it.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["odd dir #1 %j", f"{name}.yaml"])


def test_a_secret_no_variable_holds_reaches_the_job_and_never_job_sh(jobs: Jobs, tmp_path: Path) -> None:
    """Issue 49's repeat: a flag's literal secret (--hf-token) and a URL's password in a plain flag
    (--alias, a string llama-server only repeats) were written into job.sh, a receipt, in clear.
    job.sh names each by a variable of its own; the job has it from sbatch's environment: the
    server, which prints its argv here, was given the value (its log, filtered, says so)."""
    name = f"slk-{jobs.token[:4]}"
    spec = write_campaign(tmp_path, name, "ctx")
    token, password = "hf_literalSlurmToken0123456789", "pwInAnAlias1234"
    spec.write_text(spec.read_text().replace(
        'command: ["${testbed.llama_server}"]',
        'command: ["/bin/sh", "-c", "echo \\"argv: $*\\"; exec \\"$0\\" \\"$@\\"",'
        ' "${testbed.llama_server}"]',
    ).replace("--metrics: true}", f'--metrics: true, --hf-token: {token}, '
                                  f'--alias: "https://u:{password}@x.example"}}'))
    proc = run_headless(spec, jobs.results)
    assert proc.returncode == 0, proc.stderr
    run = only_run(jobs.results)
    assert fold(events(run)).status == "finished"
    script = (run / "windows" / "s1-control" / "job.sh").read_text()
    assert '--hf-token "${RULER_SECRET_' in script and 'https://u:"${RULER_SECRET_' in script
    log = (run / "windows" / "s1-control" / "boot.log").read_text()
    assert "--hf-token <redacted:--hf-token>" in log and "https://u:<redacted:--alias>@x.example" in log
    for path in run.rglob("*"):
        text = path.read_text(errors="replace").lower() if path.is_file() else ""
        assert token.lower() not in text and password.lower() not in text, path
