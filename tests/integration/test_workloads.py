"""Workloads from traffic on the real testbed (llama-server, SmolLM2-135M): a ShareGPT file and a
JSONL file as classes, answered at exactly the data's lengths by the server's own count and the
same sample in two runs; generated shared prefixes served from the prefix cache where unshared
prompts of the same lengths are not (the server's counters and its per-request cache fields say
so); gamma arrivals at a rate, sent on their schedule, with the rate's mean and the shape's dispersion.
"""

from __future__ import annotations

import csv
import json
import shutil
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.method import stats
from engine.record.receipts import read_rep
from engine.record.request import RequestRecord
from engine.run.loadgen import arrival_times
from engine.run.measure import recompute_row

pytestmark = pytest.mark.slow
DATA = Path(__file__).resolve().parents[2] / "campaigns" / "data"

HEAD = """\
name: {name}
server: llamacpp
runtime: process
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q8_0.gguf
  args: {{-m: "${{model}}", -c: 4096, -np: {slots}, -t: 1, --metrics: true{extra}}}
windows: []
sessions:
  s1: []
leak: {{min_concurrency: 64, spread: 0.9, max_reruns: 0}}
timeouts: {{boot: 120, request: 120}}
quality: {{enabled: false}}
control_position: first
workload:
  reps: 1
  sampling: {{temperature: 0, seed: 1234}}
"""


def run_campaign(tmp_path: Path, name: str, workload: str, slots: int = 2, extra: str = "") -> Path:
    """A run of the campaign on the control alone; its run directory."""
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(HEAD.format(name=f"{name}-{uuid.uuid4().hex[:6]}", slots=slots, extra=extra)
                    + workload)
    results = tmp_path / f"results-{name}"
    out = subprocess.run([sys.executable, "-m", "engine", "run", str(spec), "--headless",
                          "--results-dir", str(results)], capture_output=True, text=True, timeout=900)
    print(out.stdout[-3000:], out.stderr[-2000:])
    assert out.returncode == 0, out.stderr
    return next(results.iterdir())


def rows(run: Path) -> dict[str, dict[str, str]]:
    return {r["class"]: r for r in csv.DictReader((run / "throughput.csv").open())}


def passes(run: Path, row: dict[str, str]) -> list[tuple[dict[str, Any], list[RequestRecord]]]:
    """The row's warm pass and its reps, each header and records."""
    reps = [run / p for p in row["source"].split(";")]
    warm = reps[0].with_name(reps[0].name.rsplit("-", 1)[0] + "-warm.jsonl")
    return [read_rep(p) for p in [warm, *reps]]


# Each pass asks for every sampled record at least once (5 chat, 4 code).
DATASET_REQUESTS = 5
DATASETS = f"""\
  classes:
    chat: {{dataset: {{file: data/chat-sharegpt.json, sample: 5, seed: 7}}}}
    code: {{dataset: {{file: data/requests.jsonl, category: code, sample: 4, seed: 7}}}}
  concurrency: [2]
  requests_per_rep: {DATASET_REQUESTS}
  max_tokens: 64
"""


def test_dataset_classes_are_answered_at_the_data_s_lengths_and_sampled_alike_in_two_runs(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path / "data")
    runs = [run_campaign(tmp_path, f"datasets{k}", DATASETS) for k in (1, 2)]
    frozen = [json.loads((run / "items.json").read_text()) for run in runs]
    assert frozen[0] == frozen[1]  # the same sample, drawn again by the second run
    assert [len(frozen[0][c]) for c in ("chat", "code")] == [5, 4]
    assert not (runs[0] / "prompts.json").read_text().strip("{}\n")  # no plain class
    for run in runs:
        for cls, row in rows(run).items():
            assert row["status"] in ("ok", "noisy"), row
            items = frozen[0][cls]
            for _, records in passes(run, row):
                assert len(records) == DATASET_REQUESTS and not any(r["error"] for r in records)
                for r in records:
                    # The server's own count: exactly the record's length, at its limit.
                    assert r["completion_tokens"] == items[r["prompt_index"]]["max_tokens"], r
                    assert r["finish_reason"] == "length"
            again = recompute_row(run, row["source"], 2, stats.LeakPolicy(64, 0.9, 0))
            assert float(row["agg_tok_s"]) == again["agg_tok_s"]
            print(cls, {k: row[k] for k in ("agg_tok_s", "ttft_ms", "tpot_p50", "cache_hit", "status")})
    code = frozen[0]["code"]
    assert {len(i["messages"]) for i in code} <= {1, 2} and all(
        i["messages"][-1]["role"] == "user" for i in code)


PREFIX = """\
  classes:
    prefix: {shared_prefix: {groups: 2, prompts_per_group: 4, system_tokens: 256,
                             question_tokens: 32, output_tokens: 2}}
    unshared: {shared_prefix: {groups: 8, prompts_per_group: 1, system_tokens: 256,
                               question_tokens: 32, output_tokens: 2}}
  concurrency: [1]
  requests_per_rep: 8
  max_tokens: 2
  cache: keep
"""


def test_shared_prefixes_are_served_from_the_cache_where_unshared_prompts_are_not(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    # One slot and no host-memory prompt cache: a request reuses only what it shares with the one
    # before it, so what the class shares is what the cache can serve.
    run = run_campaign(tmp_path, "prefix", PREFIX, slots=1, extra=", --cache-ram: 0")
    got, frozen = rows(run), json.loads((run / "items.json").read_text())
    hit = {}
    for cls in ("prefix", "unshared"):
        (_, warm), (header, records) = passes(run, got[cls])
        systems = [i["messages"][0]["content"] for i in frozen[cls]]
        for r in records:
            # 256 + 32 words are as many tokens, and the chat template's few around them.
            assert 288 <= (r["prompt_tokens"] or 0) < 288 + 24, r
            # The server's own field: a request after one of its group (the warm pass's last
            # before the rep's first) is served its system prompt from the cache, any other
            # request at most the template's head.
            before = (r["index"] - 1) % len(systems)
            if systems[before] == systems[r["prompt_index"]]:
                assert (r["cached_tokens"] or 0) >= 256, (cls, r)
            else:
                assert (r["cached_tokens"] or 0) < 16, (cls, r)
        metrics = header["cache"]["metrics"]  # the server's counters over the rep
        hit[cls] = metrics["cached"] / metrics["prompt"]
        fields = sum(r["cached_tokens"] or 0 for r in records) / sum(r["prompt_tokens"] or 0 for r in records)
        assert fields == pytest.approx(hit[cls], abs=0.05), (cls, fields, hit[cls])
        print(cls, f"cache hit {hit[cls]:.1%}", got[cls]["cache_hit"], got[cls]["ttft_ms"])
        if cls == "prefix":  # a request served its system prompt starts its answer sooner
            ttft: dict[bool, list[float]] = {True: [], False: []}
            for r in records:
                assert r["first_token"] is not None and "start" in r
                ttft[(r["cached_tokens"] or 0) >= 256].append(r["first_token"] - r["start"])
            assert statistics.median(ttft[True]) < 0.6 * statistics.median(ttft[False]), ttft
    assert hit["prefix"] > 0.15 > 0.05 > hit["unshared"], hit


# A pass of 100 arrivals at 20 a second: five seconds of the schedule, its bursts among them.
BURST_REQUESTS = 100
BURSTS = f"""\
  classes:
    short: {{prompts: ["Say yes.", "Say no.", "Name a colour."]}}
  rate: [20]
  burstiness: 0.25
  requests_per_rep: {BURST_REQUESTS}
  max_tokens: 1
"""


def test_gamma_arrivals_go_out_on_their_schedule_with_the_rate_s_mean_and_the_shape_s_dispersion(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    """Each pass sends the seeded gamma schedule, request by request in its order and none before
    its time; the schedule has the rate's mean gap and the shape's dispersion. How late a send
    is on a busy machine is bench/client_bench.py's to measure (its lag figures), not a test's."""
    run = run_campaign(tmp_path, "bursts", BURSTS, slots=4)
    (row,) = rows(run).values()
    # Shape 0.25: gaps of mean 1/rate and a coefficient of variation 1/sqrt(0.25) = 2 (Poisson's
    # is 1); 400 gaps of a heavy-tailed draw come within 20 % of both. The pass sends the first
    # of them: the same seeded draw, cut short.
    longer = arrival_times(20.0, 400, 1234, 0.25)
    gaps = [b - a for a, b in zip(longer, longer[1:], strict=False)]
    assert statistics.fmean(gaps) == pytest.approx(1 / 20, rel=0.2)
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(2.0, rel=0.2)
    schedule = arrival_times(20.0, BURST_REQUESTS, 1234, 0.25)
    assert schedule == longer[:BURST_REQUESTS]
    for _, records in passes(run, row):
        assert [r["index"] for r in records] == list(range(len(schedule)))
        t0 = records[0]["scheduled"]
        assert [r["scheduled"] - t0 for r in records] == pytest.approx(schedule, abs=1e-6)
        assert all(r["start"] >= r["scheduled"] for r in records)  # none sent before its time
        late = sorted(r["start"] - r["scheduled"] for r in records)
        print(f"sent late: p50 {late[len(late) // 2] * 1000:.1f} ms, max {late[-1] * 1000:.1f} ms")
