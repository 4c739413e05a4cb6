"""Traffic replayed on the real testbed: a Mooncake trace sent at its own times, and multi-turn
conversations whose later turns the server serves from its prefix cache.

The server: SmolLM2-135M (Q8_0) on one CPU thread with two slots of 2048 tokens, the control
alone. The trace's 10 requests span 3.6 s of trace time, replayed at half of it (time_scale 0.5);
each opens with one of two shared blocks of 32 tokens. Three generated conversations of three
turns each, a system prompt of their own and 0.2 s of think time, two workers: the cache policy is
flush, so a conversation's first turn reuses nothing and every later turn finds its history in
the cache.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from engine import testbed as tb_mod
from engine.campaign.sources import trace
from engine.method import stats
from engine.record.journal import read_events
from engine.record.receipts import read_rep
from engine.run.measure import recompute_row

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q8_0.gguf
  args: {{-m: "${{model}}", -c: 4096, -np: 2, -t: 1, --metrics: true}}
windows: []
sessions:
  s1: []
control_position: first
workload:
  classes:
    mooncake: {{trace: {{file: trace.jsonl, time_scale: 0.5, block_tokens: 32, seed: 3}}}}
    chat:
      conversations:
        generate: {{conversations: 3, turns: 3, user_tokens: 30, reply_tokens: 10, system_tokens: 80}}
        think_s: 0.2
  concurrency: [2]
  reps: 2
  max_tokens: 16
  slo: {{ttft_ms: 1000, tpot_ms: 200}}
  cache: flush
leak: {{min_concurrency: 64, spread: 0.9, max_reruns: 0}}
timeouts: {{boot: 120, request: 120}}
quality: {{enabled: false}}
"""
POLICY = stats.LeakPolicy(64, 0.9, 0)
SLO = stats.Slo(1000, 200)


def write_trace(path: Path) -> list[trace.TraceRequest]:
    rows = []
    for k in range(10):
        length = 60 + 10 * k
        own = [100 + 10 * k + j for j in range(-(-length // 32) - 1)]
        rows.append({"timestamp": 400 * k, "input_length": length, "output_length": 4 + k % 5,
                     "hash_ids": [k % 2, *own]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trace.read_trace(path)


@pytest.mark.slow
def test_a_trace_at_its_times_and_conversations_from_the_cache(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    reqs = write_trace(tmp_path / "trace.jsonl")
    spec = tmp_path / "replay.yaml"
    spec.write_text(CAMPAIGN.format(name=f"replay-{uuid.uuid4().hex[:6]}"))
    results = tmp_path / "results"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=900)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    run = next(results.iterdir())
    done = {(e["window"], e["class"]): e for e in read_events(run / "journal.jsonl")
            if e["kind"] == "row_done"}
    assert sorted(done) == [("control", "chat"), ("control", "mooncake")]
    for window in ("control",):
        row = done[(window, "mooncake")]
        assert row["status"] in ("ok", "noisy") and row["concurrency"] == 0 and not row.get("rate")
        assert row["source"].split(";")[0].split("/")[-1].startswith("mooncake-trace-")
        again = recompute_row(run, row["source"], 0, POLICY, SLO)
        for key in ("agg_tok_s", "ttft_p50", "itl_p99", "tpot_p90", "goodput_rps"):
            assert row[key] == again[key], key
        for path in row["source"].split(";"):
            header, recs = read_rep(run / path)
            assert len(recs) == len(reqs) and not any(r["error"] for r in recs)
            # Each send within 50 ms of its schedule, the schedule the trace's times at half.
            assert all(r["start"] - r["scheduled"] < 0.05 for r in recs)
            t0 = recs[0]["scheduled"]
            assert [r["scheduled"] - t0 for r in recs] == pytest.approx(
                [q.t * 0.5 for q in reqs], abs=1e-6)
            # The trace's output lengths, honoured (llama-server ignores the end of sequence).
            assert [r["completion_tokens"] for r in recs] == [q.output_length for q in reqs]

        chat = done[(window, "chat")]
        assert chat["status"] in ("ok", "noisy"), chat
        turns = chat["turns"]
        print(window, json.dumps(turns))
        assert [t["turn"] for t in turns] == [0, 1, 2]
        assert all(t["requests"] == 3 * 2 and t["failed"] == 0 for t in turns)  # 3 a rep, 2 reps
        # Flushed before each rep: a first turn reuses nothing; a later one finds its history,
        # most of its prompt, in the server's cache, as the server's own usage says.
        assert turns[0]["cache_hit"] == 0.0
        assert all(t["cache_hit"] > 0.4 for t in turns[1:]), turns
        assert recompute_row(run, chat["source"], 2, POLICY, SLO)["turns"] == turns
        for path in chat["source"].split(";"):
            header, recs = read_rep(run / path)
            # The server's counters over the rep agree: it served prompt tokens from its cache.
            assert header["cache"]["metrics"]["cached"] > 0
            by_conv: dict[int, list[dict[str, float]]] = {}
            for r in sorted(recs, key=lambda r: r["start"]):
                by_conv.setdefault(r["conversation"], []).append(r)  # type: ignore[arg-type]
            assert sorted(by_conv) == [0, 1, 2]
            for conv in by_conv.values():
                assert [r["turn"] for r in conv] == [0, 1, 2]  # in order, one after the other
                assert all(b["start"] - a["end"] >= 0.2 - 0.005 for a, b in itertools.pairwise(conv))
