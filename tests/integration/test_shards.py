"""Sharded passes against the real testbed llama-server.

Two campaigns attach to one llama-server, identical but for ``workload.shard``: one runs every
pass on a single event loop, the other splits its C2 passes over two shard processes. Greedy and
seeded, the server answers both alike, so their receipts must account the same tokens request by
request; the sharded one's receipts also say how many shards ran and each one's lag.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Literal, get_args

import pytest

from engine import testbed as tb_mod
from engine.record.receipts import read_rep
from engine.runtime.base import LaunchPlan, free_port
from tests.integration.live import serve

# Slow: a campaign on the real server, over ten seconds.
pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: attach
attach:
  url: http://127.0.0.1:{port}/v1
control:
  args: {{}}
windows:
  - name: same
    axis: the same server
    change:
      env: {{UNUSED: "1"}}
sessions:
  s1: [same]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write a long story about the sea.", "Describe a busy city street at night."]}}
  concurrency: [1, 2]
  reps: 2
  requests_per_rep: 4
  max_tokens: 12
  sampling: {{temperature: 0, seed: 1234}}
{shard}leak: {{max_reruns: 0}}
quality: {{enabled: false}}
"""

Accounted = Literal["index", "prompt_index", "completion_tokens", "prompt_tokens", "chunks", "error"]
ACCOUNTING: tuple[Accounted, ...] = get_args(Accounted)


def run_campaign(tmp_path: Path, name: str, port: int, shard: str) -> Path:
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(CAMPAIGN.format(name=name, port=port, shard=shard))
    results = tmp_path / name
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=600)
    print(out.stdout[-3000:])
    assert out.returncode == 0, out.stderr
    return next(results.iterdir())


def test_sharded_passes_account_as_one_loops(testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("two shards need two cores")
    port = free_port()
    server = serve(LaunchPlan("shards-target", [
        str(testbed.llama_server), "-m", str(testbed.models["Q4_1"]), "-c", "2048", "-np", "2",
        "-t", "1", "--host", "127.0.0.1", "--port", str(port)], {}, {}, port))
    try:
        one = run_campaign(tmp_path, "oneloop", port, "")
        two = run_campaign(tmp_path, "sharded", port, "  shard: {concurrency: 1}\n")
    finally:
        server.stop()

    for window in ("control", "same"):
        for c, shards in ((1, 1), (2, 2)):
            for rep in ("warm", 1, 2):
                name = f"windows/s1-{window}/reps/prose-c{c}-1-{rep}.jsonl"
                h1, r1 = read_rep(one / name)
                h2, r2 = read_rep(two / name)
                assert h1["client"]["shards"] == 1 and len(h1["client"]["shard_lag_p99_ms"]) == 1
                assert h2["client"]["shards"] == shards, name
                assert len(h2["client"]["shard_lag_p99_ms"]) == shards
                assert len(h2["client"]["shard_client_bound"]) == shards
                assert h2["client"]["client_bound"] == any(h2["client"]["shard_client_bound"])
                assert {r["worker"] for r in r2} == set(range(c))
                # The same tokens, request by request, whichever process read them.
                assert [{k: r[k] for k in ACCOUNTING} for r in r2] == \
                       [{k: r[k] for k in ACCOUNTING} for r in r1], name
                assert all(r["error"] is None and (r["completion_tokens"] or 0) > 0 for r in r2)
