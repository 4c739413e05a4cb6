"""bench/client_bench.py's real-server table: the same tools against a real llama-server, each
tool's output tok/s over the server's own figure and its CPU per token over the server's busy
window."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import tempfile
from pathlib import Path
from typing import Any

from bench.client_common import (
    PROMPTS,
    SAMPLE,
    TOOLS,
    NotRun,
    Sampler,
    fmt,
    load_average,
    of,
    ratio,
    split_cpus,
)
from bench.client_peers import Peers, peer_argv, peer_tok_s, sampled


class Busy:
    """The server's own figures over a run: ``llamacpp:requests_processing`` polled every
    :data:`SAMPLE` seconds (its busy window) and ``llamacpp:tokens_predicted_total``."""

    def __init__(self, base_url: str) -> None:
        import httpx

        self.client = httpx.Client(base_url=base_url, timeout=10)
        self.processing = 0.0

    def metrics(self) -> dict[str, float]:
        from engine.servers.prometheus import summed_samples

        return summed_samples(self.client.get("/metrics").text)

    def poll(self) -> float:
        with contextlib.suppress(Exception):  # a failed scrape keeps the last value
            self.processing = self.metrics().get("llamacpp:requests_processing", 0.0)
        return self.processing


def real_run(name: str, peers: Peers, base_url: str, c: int, n: int, max_tokens: int,
             cpus: set[int]) -> dict[str, Any]:
    busy = Busy(base_url)
    before = busy.metrics()["llamacpp:tokens_predicted_total"]
    if name == "ruler":
        q: Any = mp.Queue()
        p = mp.Process(target=_ruler_real, args=(base_url, c, n, max_tokens, q, cpus))
        p.start()
        sampler = Sampler(p.pid or 0, busy.poll)
        try:
            res = dict(q.get(timeout=1800))
        finally:
            samples = sampler.stop()
            p.join()
    else:
        with tempfile.TemporaryDirectory(prefix=f"ruler-{name}-") as tmp:
            work = Path(tmp)
            argv, env = peer_argv(peers, name, base_url, c, n, max_tokens, work, True)
            samples = sampled(argv, {**os.environ, **env}, work, cpus, busy.poll)
            tok_s, failed = peer_tok_s(name, work)
            res = {"tok_s": tok_s, "failed": failed}
    tokens = busy.metrics()["llamacpp:tokens_predicted_total"] - before
    on = [s for s in samples if s[2] > 0]
    if len(on) < 2:
        raise NotRun("the server was seen busy in fewer than two samples")
    # The busy window is known to a sample's period at each end: half a period each side.
    window = on[-1][0] - on[0][0] + SAMPLE
    cpu = on[-1][1] - on[0][1]
    return {**res, "server_tokens": tokens, "server_tok_s": tokens / window, "window": window,
            "us_per_token": cpu / max(tokens, 1) * 1e6}


def _ruler_real(base_url: str, c: int, n: int, max_tokens: int, out: Any, cpus: set[int]) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    from engine.campaign.sources.item import plain_item
    from engine.method import stats
    from engine.run.loadgen import PassPlan
    from engine.run.shards import measure_pass
    from engine.servers.llamacpp import LlamaCppAdapter

    res = measure_pass(PassPlan(base_url, LlamaCppAdapter(), [plain_item(p) for p in PROMPTS], c, n,
                                max_tokens, {"temperature": 0, "seed": 1234}, {"ignore_eos": True}, 600))
    fig = stats.rep_figures(res.records, c)
    out.put({"tok_s": fig["agg_tok_s"], "failed": fig["failed"]})


def real_table(args: argparse.Namespace) -> None:
    from bench.accuracy_bench import command_plan, start_server, testbed_plan

    if args.server == "testbed":
        plan, label = testbed_plan(False, args.threads)
        plan.argv.append("--metrics")
    else:
        plan, label = command_plan(args.server + " --metrics")
    tools = [t for t in TOOLS if t in args.peers and t != "aiohttp"]
    peers = Peers.find(args)
    clients, _ = split_cpus(args.client_cpus)
    reasons: dict[str, str] = {}
    log: list[str] = []
    server = start_server(plan, log)
    rows: dict[int, dict[str, list[dict[str, Any]]]] = {}
    print(f"{label}; {args.max_tokens} tokens a request (ignore_eos); clients on cores "
          f"{sorted(clients) or 'all'}; {load_average()} at the start", flush=True)
    try:
        for c in args.concurrency:
            n = max(args.requests, 4 * c)
            rows[c] = {}
            # A warm pass of ruler's, outside every measurement.
            _ruler_real_warm(server.base_url, c, args.max_tokens)
            for _ in range(args.rounds):
                for name in tools:
                    if name in reasons:
                        continue
                    try:
                        r = real_run(name, peers, server.base_url, c, n, args.max_tokens, clients)
                    except NotRun as e:  # not tried again: its later figures are left out
                        reasons[name] = f"at C={c}: {e}"
                        continue
                    rows[c].setdefault(name, []).append(r)
                    print(f"  C={c} {name:9} tok/s {fmt(r['tok_s'])} server {r['server_tok_s']:.2f}"
                          f" failed {r['failed']} cpu {r['us_per_token']:.0f} us/token", flush=True)
    finally:
        server.stop()
    print(f"done, {load_average()}")
    print()
    print(f"{'C':>3} {'tool':9} {'tok/s':>9} {'server':>9} {'tool/srv':>8} {'failed':>6} "
          f"{'us/token':>9} {'ratio':>6}")
    for c in args.concurrency:
        base = min(rows[c].get("ruler", []), key=lambda r: r["us_per_token"], default=None)
        for name in tools:
            for r in rows[c].get(name, []):
                print(f"{c:>3} {name:9} {fmt(r['tok_s']):>9} {r['server_tok_s']:>9.2f} "
                      f"{ratio(r['tok_s'], r['server_tok_s'], '.4f'):>8} {r['failed']:>6} "
                      f"{r['us_per_token']:>9.0f} "
                      f"{ratio(r['us_per_token'], of(base, 'us_per_token')):>6}")
    for name, why in reasons.items():
        print(f"not run: {name}: {why}")


def _ruler_real_warm(base_url: str, c: int, max_tokens: int) -> None:
    from engine.campaign.sources.item import plain_item
    from engine.run.loadgen import PassPlan
    from engine.run.shards import measure_pass
    from engine.servers.llamacpp import LlamaCppAdapter

    measure_pass(PassPlan(base_url, LlamaCppAdapter(), [plain_item(p) for p in PROMPTS], c, 2 * c,
                          max_tokens, {"temperature": 0, "seed": 1234}, {"ignore_eos": True}, 600))
