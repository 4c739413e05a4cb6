"""Headless campaigns on the real testbed, in Docker and as processes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.method.stats import LeakPolicy
from engine.record.fold import fold
from engine.record.journal import read_events
from engine.run.measure import recompute_row
from engine.runtime.base import LaunchPlan, free_port
from tests.integration.live import serve

# Slow: each test runs a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: {runtime}
docker:
  image: ${{testbed.image}}
  keep: true
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args:
    -m: ${{model}}
    -c: 2048
    -np: 2
    -t: 1              # two threads spin against any other busy process on 2 cores
    -fa: "off"
    --metrics: true
windows:
  - name: ctx
    axis: context 4096
    change:
      args: {{-c: 4096}}
  - name: qv8
    axis: q8_0 V cache without flash attention
    change:
      args: {{--cache-type-v: q8_0}}
sessions:
  s1: [ctx]
  s2: [qv8]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours."]}}
    code: {{prompts: ["Write a Python function that adds two numbers."]}}
  concurrency: [2]  # C1 is every other campaign's: this one is about the runtimes
  reps: 2
  requests_per_rep: 2
  max_tokens: 12
leak:
  min_concurrency: 8
  spread: 0.10
  max_reruns: 1
timeouts:
  boot: 120
  request: 60
quality: {{greedy: {{n: 2, max_tokens: 8}}, teacher_forced: {{positions: 1}}}}
"""


def run_headless(tmp_path: Path, runtime: str, name: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(CAMPAIGN.format(name=name, runtime=runtime))
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "run", str(spec), "--headless",
         "--results-dir", str(results)], capture_output=True, text=True, timeout=900)
    print(proc.stdout[-4000:], proc.stderr[-2000:])
    runs = sorted(results.iterdir())
    assert len(runs) == 1, proc.stderr
    return runs[0], proc


def check_run(run: Path, proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert f"run directory: {run}" in proc.stdout
    for name in ("campaign.yaml", "env.json", "journal.jsonl", "throughput.csv"):
        assert (run / name).is_file(), name
    windows = sorted(p.name for p in (run / "windows").iterdir())
    assert windows == ["s1-control", "s1-ctx", "s2-control", "s2-qv8"]
    for w in ("s1-control", "s1-ctx", "s2-control"):
        for f in ("boot.log", "boot-facts.json", "boot-excerpt.txt"):
            assert (run / "windows" / w / f).is_file(), f"{w}/{f}"

    # The rejected window keeps the server's own words.
    rejection = (run / "windows" / "s2-qv8" / "rejection.txt").read_text()
    assert "quantized V cache requires flash_attn to be enabled" in rejection
    state = fold(read_events(run / "journal.jsonl"))
    assert state.status == "finished"
    assert state.windows["s2-qv8"].status == "rejected"
    assert state.windows["s1-ctx"].status == "done"

    # Boot facts differ where the axis changes them and are equal where it does not.
    facts = json.loads((run / "windows" / "s1-ctx" / "boot-facts.json").read_text())
    diff = facts["diff_vs_control"]
    assert diff["changed"]["kv.cells"] == [2048, 1024]  # per stream: -np 2 splits the context
    assert not any(k.startswith("weights.") for k in diff["changed"]), diff["changed"]
    assert any(k.startswith("weights.") for k in diff["equal"])

    # Every throughput row is recomputed from the receipts it names.
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    assert len(rows) == 2 * 3  # 2 classes x 3 measured windows
    policy = LeakPolicy(8, 0.10, 1)
    for row in rows:
        again = recompute_row(run, row["source"], int(row["concurrency"]), policy)
        assert float(row["agg_tok_s"]) == pytest.approx(again["agg_tok_s"])
        assert float(row["agg_tok_s"]) > 0
        assert row["status"] in ("ok", "noisy"), row  # void here could only mean failed requests

    # The quality phase ran in this runtime too: greedy against the session's control.
    verdicts = {(v["session"], v["window"]): v for v in csv.DictReader((run / "verdicts.csv").open())}
    assert verdicts[("s1", "ctx")]["greedy"] in ("0/2", "1/2", "2/2")
    assert verdicts[("s1", "control")]["greedy"] == "reference"
    assert (run / "windows" / "s1-ctx" / "greedy.json").is_file()


def test_two_session_campaign_as_processes(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    run, proc = run_headless(tmp_path, "process", "proc-run")
    check_run(run, proc)
    env = json.loads((run / "env.json").read_text())
    assert env["runtime"] == "process"


def test_two_session_campaign_in_docker(testbed_image: str, docker_client, tmp_path: Path) -> None:
    run, proc = run_headless(tmp_path, "docker", "docker-run")
    try:
        check_run(run, proc)
        run_id = json.loads((run / "engine.json").read_text())["run_id"]
        assert run_id.startswith(run.name)
        containers = {c.name: c for c in docker_client.containers.list(
            all=True, filters={"label": f"ruler.run={run_id}"})}
        token = run_id.rsplit(".", 1)[1]  # in every name: no other run can clash with them
        assert set(containers) == {f"ruler-docker-run-{w}-{token}" for w in
                                   ("s1-control", "s1-ctx", "s2-control", "s2-qv8")}
        c = containers[f"ruler-docker-run-s1-ctx-{token}"]
        assert {k: v for k, v in c.labels.items() if k in ("ruler.campaign", "ruler.run",
                                                            "ruler.window")} == {
            "ruler.campaign": "docker-run", "ruler.run": run_id, "ruler.window": "s1-ctx"}
        assert c.status == "exited"  # stopped and kept
        assert f"RULER_CONTAINER=ruler-docker-run-s1-ctx-{token}" in c.attrs["Config"]["Env"]
        ports = c.attrs["HostConfig"]["PortBindings"]["8080/tcp"]
        assert ports[0]["HostIp"] == "127.0.0.1"
        env = json.loads((run / "env.json").read_text())
        assert env["docker"]["server_version"]
        assert env["docker"]["images"][testbed_image]["id"].startswith("sha256:")
    finally:
        for c in docker_client.containers.list(all=True, filters={"label": "ruler.campaign=docker-run"}):
            c.remove(force=True)


ATTACH = """\
name: attach-run
server: llamacpp
runtime: attach
attach:
  url: {url}
pass_env: [HF_TOKEN]
control:
  args: {{}}
windows:
  - name: again
    axis: the same server again (attach has no lifecycle)
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [again]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Say hi."]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 1
  max_tokens: 4
quality: {{greedy: {{n: 2, max_tokens: 4}}, teacher_forced: {{positions: 1}}}}  # its requests too
"""


@pytest.fixture(scope="module")
def attach_target(testbed: tb_mod.Testbed) -> Iterator[str]:
    """One llama-server the three spellings of its URL attach to, in turn (one server thread:
    two spin against every other busy process on two cores)."""
    port = free_port()
    server = serve(LaunchPlan("attach-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "1024", "-t", "1",
        "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", ""])
def test_attach_never_sends_v1_twice_and_records_no_secret(
        attach_target: str, tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "hf_ruler_test_secret_value_1234"
    monkeypatch.setenv("HF_TOKEN", secret)
    spec = tmp_path / "attach.yaml"
    spec.write_text(ATTACH.format(url=attach_target + suffix))
    proc = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                           "--results-dir", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    run = next((tmp_path / "results").iterdir())
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    # A doubled /v1 answers 404 on llama-server: every request would fail and void the rows.
    assert len(rows) == 2 and all(r["status"] in ("ok", "noisy") for r in rows), rows
    assert all(float(r["agg_tok_s"]) > 0 for r in rows)
    for path in run.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(errors="replace"), path
