"""A campaign on the vLLM testbed's image (`ruler testbed`: `docker import` of the environment's
interpreter and system libraries; the environment is mounted at its own path): one boot, its own
module so that it never runs beside test_vllm_live.py's module server."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from engine.record.journal import read_events
from tests.integration.test_vllm_live import REPEAT, RULER, SPEC

DOCKER = """\
name: vllm-docker
server: vllm
runtime: docker
docker:
  image: ${{testbed.vllm_image}}
  volumes: ["${{testbed.vllm_env}}:${{testbed.vllm_env}}:ro"]
  shm_size: 1g
  keep: false
control:
  model: ${{testbed.vllm_model}}
  env: {{VLLM_CPU_KVCACHE_SPACE: "1", VLLM_SERVER_DEV_MODE: "1"}}
  args:
    --model: ${{model}}
    --max-model-len: 2048
    --dtype: bfloat16
    --enforce-eager: true
    --speculative-config: '{spec3}'
windows: []
sessions:
  s1: []
control_position: first
workload:
  classes:
    repeat: {{prompts: ["{repeat}"]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 2
  max_tokens: 24
  cache: flush
  sampling: {{temperature: 0, seed: 1234}}
leak: {{spread: 0.5, max_reruns: 0}}
quality:
  greedy: {{n: 2, max_tokens: 8}}
  teacher_forced: {{top_k: 5, positions: 2}}
  knobs_check: false
timeouts: {{boot: 600, request: 120}}
"""


@pytest.mark.timeout(1200)
def test_a_campaign_on_the_vllm_image(vllm_image: str, docker_client: Any,
                                      tmp_path: Path) -> None:
    """The testbed's image serves the campaign as the process does: boot facts, acceptance from
    the counters, a verified flush, teacher forcing; the container is gone after its window."""
    spec = tmp_path / "docker.yaml"
    spec.write_text(DOCKER.format(repeat=REPEAT, spec3=json.dumps(SPEC)))
    out = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(tmp_path / "results")],
                         capture_output=True, text=True, timeout=1100)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    run = next((tmp_path / "results").iterdir())
    evs = read_events(run / "journal.jsonl")
    started = [e for e in evs if e["kind"] == "server_started"]
    assert [e["image"] for e in started] == [vllm_image]
    ready = [e for e in evs if e["kind"] == "window_ready"]
    assert ready and ready[0]["window"] == "control"
    facts = json.loads((run / "windows" / "s1-control" / "boot-facts.json").read_text())["facts"]
    assert facts["kv.pools"] == "CPU" and facts["kv.space_gib"] == 1.0 and facts["ready"] is True
    assert facts["server.url"].endswith(":8000")  # the container's port, published on loopback
    assert [k for k in facts if k.startswith("unparsed.")] == []
    rows = list(csv.DictReader((run / "throughput.csv").open()))
    assert [r["accept_source"] for r in rows] == ["metrics"] and float(rows[0]["accept_len"]) >= 1
    assert float(rows[0]["cache_hit"]) == 0.0
    v = {e["check"]: e for e in evs if e["kind"] == "verdict"}
    assert v["greedy"]["verdict"] == "reference" and v["self_score"]["verdict"] == "repeat-identical"
    run_id = evs[0]["run"]
    assert docker_client.containers.list(all=True, filters={"label": f"ruler.run={run_id}"}) == []
