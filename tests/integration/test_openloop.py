"""Open-loop load on the real testbed: a rate llama-server can serve meets the campaign's SLOs, one
far past it does not, and goodput drops while the finished rate stays near what the server can do.

The server: SmolLM2-135M (Q8_0) on one CPU thread with two slots, about 0.8 s a 16-token request,
so two to four requests a second at most, as busy as the machine is. At 1 request a second the
queue rarely builds and nearly every request's first token comes within 500 ms; at 64 a second
every request of a pass arrives within half a second and waits its turn behind the others: the
longer the pass, the fewer of its requests meet the SLO, so 24 of them make goodput fall below the
low rate's whatever the machine's speed.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.method import stats
from engine.record.journal import read_events
from engine.record.receipts import read_rep
from engine.run.measure import recompute_row

# Slow: a rate sweep on the real server, minutes.
pytestmark = pytest.mark.slow

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q8_0.gguf
  args: {{-m: "${{model}}", -c: 2048, -np: 2, -t: 1, --metrics: true}}
windows:
  - name: ctx
    axis: context 4096
    change:
      args: {{-c: 4096}}
sessions:
  s1: [ctx]
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea.", "Name three colours.", "Say hello in French."]}}
  concurrency: [1]
  rate: [1, 64]
  reps: 1
  requests_per_rep: 24
  max_tokens: 16
  slo: {{ttft_ms: 500, tpot_ms: 150}}
leak: {{min_concurrency: 64, spread: 0.5, max_reruns: 0}}
timeouts: {{boot: 120, request: 120}}
quality: {{enabled: false}}
"""
SLO = stats.Slo(500, 150)


def test_a_rate_sweep_meets_its_slos_until_the_server_falls_behind(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    spec = tmp_path / "rates.yaml"
    spec.write_text(CAMPAIGN.format(name=f"rates-{uuid.uuid4().hex[:6]}"))
    results = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=900)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    run = next(results.iterdir())
    rows = {(r["window"], r["rate"] or f"c{r['concurrency']}"): r
            for r in csv.DictReader((run / "throughput.csv").open())}
    print(json.dumps({f"{w} {k}": {c: r[c] for c in ("achieved_rps", "goodput_rps", "ttft_p50",
                                                      "ttft_p99", "itl_p50", "tpot_p99")}
                      for (w, k), r in rows.items()}, indent=1))
    assert sorted(rows) == [("control", "1.0"), ("control", "64.0"), ("control", "c1"),
                            ("ctx", "1.0"), ("ctx", "64.0"), ("ctx", "c1")]
    for window in ("control", "ctx"):
        low, high = rows[(window, "1.0")], rows[(window, "64.0")]
        for row in (low, high):
            assert row["status"] in ("ok", "noisy") and row["concurrency"] == "0", row
            # Every figure comes from the receipts: recomputed, the same.
            again = recompute_row(run, row["source"], 0, stats.LeakPolicy(64, 0.5, 0), SLO)
            for col in ("achieved_rps", "goodput_rps", "ttft_p50", "ttft_p99", "itl_p99", "tpot_p50"):
                assert float(row[col]) == again[col], col
            # Each request went out in its order and none before its arrival time, on the same
            # schedule in the warm pass and the rep. How late a send is on a busy machine is
            # bench/client_bench.py's to measure, not a test's.
            rep = run / row["source"]
            passes = [read_rep(rep)[1], read_rep(rep.with_name(rep.name.replace("-1-1.", "-1-warm.")))[1]]
            for recs in passes:
                assert [r["index"] for r in recs] == list(range(len(recs)))
                assert all(r["start"] >= r["scheduled"] for r in recs)
                late = sorted(r["start"] - r["scheduled"] for r in recs)
                print(f"sent late: p50 {late[len(late) // 2] * 1000:.1f} ms, max {late[-1] * 1000:.1f} ms")
            assert [r["scheduled"] - passes[0][0]["scheduled"] for r in passes[0]] == pytest.approx(
                [r["scheduled"] - passes[1][0]["scheduled"] for r in passes[1]], abs=1e-6)
        # A rate it can serve: nearly every finished request within the SLOs.
        assert float(low["goodput_rps"]) >= 0.75 * float(low["achieved_rps"]), low
        assert float(low["ttft_p50"]) < 500
        # Far past it: requests queue, TTFT grows far past the SLO, most miss it, and goodput
        # falls below the low rate's even though more requests finish each second.
        assert float(high["ttft_p50"]) > 2 * 500, high
        assert float(high["goodput_rps"]) <= 0.5 * float(high["achieved_rps"]), high
        assert float(high["goodput_rps"]) < float(low["goodput_rps"])
        assert float(high["achieved_rps"]) > float(low["achieved_rps"])
        # Inter-token latency stays a token's time: the slots, not the queue, bound it.
        assert float(high["itl_p50"]) < 150
    # Closed-loop rows carry the latency percentiles too.
    assert all(rows[(w, "c1")][c] != "" for w in ("control", "ctx") for c in ("itl_p99", "tpot_p90"))
    # The window's rate rows against the control's of the same rate (one rep: no interval).
    assert rows[("ctx", "64.0")]["delta"] != "" and rows[("control", "64.0")]["delta"] == ""
    assert [e["rate"] for e in read_events(run / "journal.jsonl")
            if e["kind"] == "row_done" and e.get("rate")] == [1.0, 64.0, 1.0, 64.0]
