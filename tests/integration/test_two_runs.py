"""Runs of one campaign never touch each other's containers: real Docker, the real testbed image."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import control
from engine.record.liveness import engine_alive, read_pid
from tests.integration.live import RULER, events, finish, kinds, wait_for

# Slow: each test runs campaigns in real Docker, over ten seconds.
pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: docker
docker:
  image: ${{testbed.image}}
  keep: true
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 1, -t: 1}}
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
    prose: {{prompts: ["Say hi."]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 1
  max_tokens: 4
timeouts: {{boot: 120, request: 60}}
quality: {{enabled: false}}  # the containers are under test here, not the checks
"""


@pytest.fixture
def results() -> Iterator[Path]:
    """A short results directory: the control socket's path must fit AF_UNIX's 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ruler-two-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_campaign(tmp_path: Path) -> tuple[Path, str]:
    name = f"two-{uuid.uuid4().hex[:8]}"  # other engineers' tests run beside these
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(CAMPAIGN.format(name=name))
    return spec, name


def start_detached(spec: Path, results: Path) -> Path:
    before = set(results.iterdir()) if results.exists() else set()
    out = subprocess.run([*RULER, "run", str(spec), "--detach", "--results-dir", str(results)],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    (run,) = set(results.iterdir()) - before
    return run


def run_headless(spec: Path, results: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    before = set(results.iterdir()) if results.exists() else set()
    proc = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    (run,) = set(results.iterdir()) - before
    return run, proc


def run_id(run: Path) -> str:
    return str(json.loads((run / "engine.json").read_text())["run_id"])


def containers(docker_client: Any, run: Path) -> dict[str, Any]:
    return {c.name: c for c in docker_client.containers.list(
        all=True, filters={"label": f"ruler.run={run_id(run)}"})}


def check_finished(run: Path) -> None:
    evs = events(run)
    assert kinds(evs, "run_finished")[-1]["status"] == "finished"
    finished = {e["window"]: e["status"] for e in kinds(evs, "window_finished")}
    assert finished == {"control": "done", "ctx": "done"}, finished
    assert not kinds(evs, "window_rejected")


def remove_all(docker_client: Any, name: str) -> None:
    for c in docker_client.containers.list(all=True, filters={"label": f"ruler.campaign={name}"}):
        c.remove(force=True)


def test_two_runs_at_once_keep_their_own_containers(testbed_image: str, docker_client: Any,
                                                    tmp_path: Path, results: Path) -> None:
    """The first run is held paused in its control window, with its server live, while a second
    run of the same campaign goes from start to end; the first then finishes too."""
    spec, name = write_campaign(tmp_path)
    first = start_detached(spec, results)
    try:
        assert control.send(first, "pause")["ok"]
        wait_for(first, lambda e: bool(kinds(e, "paused")), what="the first run to pause")
        (live,) = containers(docker_client, first).values()
        assert live.status == "running"

        second, proc = run_headless(spec, results)
        live.reload()
        assert live.status == "running", "the second run touched the first run's live server"
        assert proc.returncode == 0, proc.stderr
        check_finished(second)
        token = run_id(second).rsplit(".", 1)[1]
        assert set(containers(docker_client, second)) == {
            f"ruler-{name}-s1-control-{token}", f"ruler-{name}-s1-ctx-{token}"}

        assert control.send(first, "resume")["ok"]
        wait_for(first, lambda e: bool(kinds(e, "run_finished")), timeout=300, what="the first run's end")
        check_finished(first)
        assert len(containers(docker_client, first)) == 2
    finally:
        finish(first)
        remove_all(docker_client, name)


def test_a_kept_container_of_a_resumed_run_blocks_no_later_run(
        testbed_image: str, docker_client: Any, tmp_path: Path, results: Path) -> None:
    spec, name = write_campaign(tmp_path)
    first = start_detached(spec, results)
    try:
        wait_for(first, lambda e: bool(kinds(e, "window_ready")), what="the control's boot")
        pid = read_pid(first)
        assert pid
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while engine_alive(first) and time.monotonic() < deadline:
            time.sleep(0.1)
        out = subprocess.run([*RULER, "run", "--resume", str(first), "--headless"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        check_finished(first)
        kept = containers(docker_client, first)
        ids = {n: c.id for n, c in kept.items()}

        second, proc = run_headless(spec, results)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        check_finished(second)
        assert {n: c.id for n, c in containers(docker_client, first).items()} == ids  # untouched
        assert len(containers(docker_client, second)) == 2
        # The killed attempt at the control is kept beside the resumed one, named by its own id.
        token = run_id(first).rsplit(".", 1)[1]
        (aside,) = [n for n in kept if n.startswith(f"ruler-{name}-s1-control-{token}--")]
        assert aside == f"ruler-{name}-s1-control-{token}--{kept[aside].short_id}"
        assert set(kept) == {aside, f"ruler-{name}-s1-control-{token}", f"ruler-{name}-s1-ctx-{token}"}
    finally:
        finish(first)
        remove_all(docker_client, name)
