"""Accuracy benchmark: ruler's decode tok/s and token counts against llama-server's own timings.

The testbed's llama-server runs as a local process (as tests/integration/test_testbed.py starts it). ruler's
load generator (``engine.run.loadgen.measure_pass``) sends streamed chat completions at C1 and C4; for the
same requests llama-server reports, in the final stream chunk, ``timings.predicted_n`` (tokens
generated) and ``timings.predicted_per_second`` = (predicted_n - 1) / (last token - first token),
timed inside the server (tools/server/server-common.h: the first token comes from the prompt pass,
so it is not a decode step). ruler's per-request decode tok/s is the same quantity timed at the
client: (completion_tokens - 1) / (end - first_token), the definition ``engine.method.stats`` uses.

Per concurrency it prints: token counts (ruler's usage count against predicted_n), the ratio
ruler / server of decode tok/s per request (median and range), and the rep-level ratio: ruler's
row figure (``stats.rep_figures`` decode_tok_s, the median over requests) against the median of
the server's per-request figures, and whether the client was flagged client-bound. Target: within
2 % at every concurrency, not client-bound.

The server is the CPU testbed's by default. Any llama-server runs instead: ``--server`` takes its
command, model and flags (ruler adds ``--host``/``--port``), ``--campaign`` boots a campaign's
window as the process runtime would (``--window``, the control by default; ``--var`` sets a
``${...}`` the campaign uses), so the bench runs on a GPU box as it runs here.

    .venv/bin/python bench/accuracy_bench.py [--max-tokens 64] [--requests 8] [--threads 1] [--drafter]
    .venv/bin/python bench/accuracy_bench.py --concurrency 1 8 64 \
        --server "$HOME/llama-server -m smol.gguf -ngl 99 -np 64 -c 65536"
    .venv/bin/python bench/accuracy_bench.py --concurrency 1 8 64 --campaign campaigns/h200-smollm2.yaml
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import testbed
from engine.campaign.launch import WindowStart, plan_launch
from engine.campaign.load import load_campaign
from engine.campaign.sources.item import plain_item
from engine.method import stats
from engine.run.loadgen import PassPlan
from engine.run.shards import measure_pass
from engine.runtime import process as rp
from engine.runtime.base import LaunchPlan, free_port
from engine.servers.llamacpp import LlamaCppAdapter
from engine.words import CONTROL

PROMPTS = ["Write a short story about a lighthouse keeper.",
           "Explain how a hash map works, step by step.",
           "Describe the water cycle to a ten-year-old.",
           "Write a Python function that merges two sorted lists, with comments."]
ITEMS = [plain_item(p) for p in PROMPTS]
TARGET = 0.02


class TimingsAdapter(LlamaCppAdapter):
    """The adapter sees the final chunk in request_acceptance: keep its ``timings`` in the record
    too (as record["acceptance"]["timings"]), without touching the load generator."""

    def request_acceptance(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        acc: dict[str, Any] = dict(super().request_acceptance(chunk) or {})
        if isinstance(chunk.get("timings"), dict):
            acc["timings"] = chunk["timings"]
        return acc or None


def testbed_plan(drafter: bool, threads: int) -> tuple[LaunchPlan, str]:
    tb = testbed.ensure(with_image=False)
    port = free_port()
    argv = [str(tb.llama_server), "-m", str(tb.models["Q8_0"]), "-c", "4096", "-np", "4",
            "-t", str(threads), "--host", "127.0.0.1", "--port", str(port)]
    if drafter:
        argv += ["-md", str(tb.models["Q2_K"]), "--spec-type", "draft-simple",
                 "--spec-draft-n-max", "7"]
    return (LaunchPlan(f"ruler-accuracy-bench-{port}", argv, {}, {}, port),
            f"llama-server {tb.version}, SmolLM2-135M Q8_0{' + Q2_K drafter' if drafter else ''}, "
            f"-np 4 -t {threads}")


def command_plan(command: str) -> tuple[LaunchPlan, str]:
    port = free_port()
    argv = [*shlex.split(command), *LlamaCppAdapter().listen_args("127.0.0.1", port)]
    return LaunchPlan(f"ruler-accuracy-bench-{port}", argv, {}, {}, port), command


def campaign_plan(path: str, window: str, variables: dict[str, str]) -> tuple[LaunchPlan, str]:
    """The window's server exactly as ``ruler run --runtime process`` starts it."""
    campaign = load_campaign(path)
    plan = plan_launch(campaign, LlamaCppAdapter(),
                       WindowStart("process", "accuracy-bench", "bench", window, variables))
    return plan, f"{campaign.name} {window}: {' '.join(plan.argv)}"


def start_server(plan: LaunchPlan, log: list[str]) -> rp.ProcessServer:
    server = rp.ProcessServer(plan)
    # Drain the log: an unread pipe fills up and stalls the server mid-benchmark.
    threading.Thread(target=lambda: log.extend(server.lines()), daemon=True).start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(server.base_url + "/health", timeout=5).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if not server.alive():
            break
        time.sleep(0.3)
    server.stop()
    raise SystemExit("llama-server did not become ready:\n" + "\n".join(log[-20:]))


def per_request(records: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """Each request's tok/s by ruler's clock and by the server's own timings (TimingsAdapter keeps
    them under ``acceptance``)."""
    out = []
    for r in records:
        t = (r.get("acceptance") or {}).get("timings") or {}
        if r.get("error") or not t or not r.get("first_token") or r["completion_tokens"] < 2:
            continue
        ruler = (r["completion_tokens"] - 1) / (r["end"] - r["first_token"])
        out.append({"tokens": r["completion_tokens"], "server_tokens": t["predicted_n"],
                    "ruler_tps": ruler, "server_tps": t["predicted_per_second"],
                    "ratio": ruler / t["predicted_per_second"]})
    return out


def measure(server: rp.ProcessServer, c: int, n: int, max_tokens: int) -> dict[str, Any]:
    adapter = TimingsAdapter()
    # The passes run as Measurement runs them (engine.run.loadgen.measure_pass, on uvloop).
    measure_pass(PassPlan(server.base_url, adapter, ITEMS, c, max(2 * c, 4), max_tokens,
                          {"temperature": 0, "seed": 1234}, {}, 300))  # warm pass, discarded
    res = measure_pass(PassPlan(server.base_url, adapter, ITEMS, c, n, max_tokens,
                                {"temperature": 0, "seed": 1234}, {}, 300))
    reqs = per_request(res.records)
    rep = stats.rep_figures(res.records, c)
    server_median = statistics.median(q["server_tps"] for q in reqs)
    ratios = [q["ratio"] for q in reqs]
    return {"c": c, "requests": len(res.records), "compared": len(reqs),
            "tokens": sum(q["tokens"] for q in reqs),
            "server_tokens": sum(q["server_tokens"] for q in reqs),
            "equal": sum(q["tokens"] == q["server_tokens"] for q in reqs),
            "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "rep_ruler": rep["decode_tok_s"], "rep_server": server_median,
            "rep_ratio": rep["decode_tok_s"] / server_median, "client_bound": res.client_bound,
            "lag_p99_ms": res.lag_p99_ms}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--requests", type=int, default=8, help="per concurrency (at least 2 x C)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    p.add_argument("--drafter", action="store_true", help="with the Q2_K drafter (bursty streams)")
    # One server thread leaves the other core of a 2-core box to the client, whose clock is judged.
    p.add_argument("--threads", type=int, default=1, help="llama-server -t")
    p.add_argument("--server", help="a llama-server command with its model and flags, instead of "
                                    "the testbed's (ruler adds --host and --port)")
    p.add_argument("--campaign", help="boot this campaign's window instead (process runtime)")
    p.add_argument("--window", default=CONTROL, help="with --campaign (default: the control)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="with --campaign: a ${NAME} it uses (repeatable)")
    args = p.parse_args()
    if args.campaign:
        plan, label = campaign_plan(args.campaign, args.window,
                                    dict(v.split("=", 1) for v in args.var))
    elif args.server:
        plan, label = command_plan(args.server)
    else:
        plan, label = testbed_plan(args.drafter, args.threads)
    log: list[str] = []
    server = start_server(plan, log)
    try:
        rows = [measure(server, c, max(args.requests, 2 * c), args.max_tokens)
                for c in args.concurrency]
    finally:
        server.stop()
    print(f"{label}, max_tokens {args.max_tokens}")
    print(f"{'C':>3} {'reqs':>5} {'tokens ruler/server':>20} {'equal':>6} "
          f"{'decode ratio median [min, max]':>31} {'rep decode ruler/server':>26} {'lag p99':>8}  verdict")
    worst = 0.0
    for r in rows:
        off = max(abs(r["median"] - 1), abs(r["rep_ratio"] - 1))
        worst = max(worst, off)
        print(f"C{r['c']:<2} {r['compared']:>5} {r['tokens']:>9}/{r['server_tokens']:<10} "
              f"{r['equal']:>3}/{r['compared']:<2} {r['median']:>14.4f} [{r['min']:.4f}, "
              f"{r['max']:.4f}] {r['rep_ruler']:>10.3f}/{r['rep_server']:<8.3f}"
              f"={r['rep_ratio']:.4f} {r['lag_p99_ms']:>5.1f} ms  "
              f"{'within' if off <= TARGET else 'OUTSIDE'} 2 %"
              + ("  (client bound!)" if r["client_bound"] else ""))
    return 0 if worst <= TARGET and not any(r["client_bound"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
