"""bench/client_bench.py's local table: the fake streaming server of the tests (tests/sse.py)
in a process of its own, pinned, either flat out or paced; ruler's load generator and the
aiohttp reference in a process each beside the peers' clients."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import time
from dataclasses import dataclass
from typing import Any

from bench.client_common import (
    CHUNKS_PER_REQUEST,
    LAG_TICK,
    TOOLS,
    NotRun,
    Sampler,
    fmt,
    lag_cell,
    load_average,
    of,
    p99,
    ratio,
    split_cpus,
    steady,
)
from bench.client_peers import Peers, run_peer
from tests.sse import DONE, LAST_CHUNK, Answer, Reply, Request, SseServer, chunk, event

PACED_GAP = 0.01  # 100 tokens/s per stream


# -- the local server ---------------------------------------------------------------------------


def _event(i: int) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}
    return event(body)


FINAL = event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
               "usage": {"completion_tokens": CHUNKS_PER_REQUEST, "prompt_tokens": 5}}) + DONE
CHUNKS = [chunk(_event(i)) for i in range(CHUNKS_PER_REQUEST)]
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


def streams(gap: float, served: Any) -> Answer:
    """The server's answer: a readiness probe's model list, or a chunked stream of
    CHUNKS_PER_REQUEST tokens, one write (one segment) per token, each counted in ``served``."""

    async def answer(req: Request, reply: Reply) -> None:
        if req.method == "GET":  # readiness probes (/health, /v1/models)
            reply.send(200, MODELS)
            return
        reply.stream(chunked=True)
        for i, data in enumerate(CHUNKS):
            reply.write(data)
            served.value += 1
            if gap:
                await reply.drain()
                await asyncio.sleep(gap)
            elif i % 16 == 0:
                await reply.drain()
        reply.write(chunk(FINAL) + LAST_CHUNK)

    return answer


def serve(port: int, ready: Any, gap: float, served: Any, cpus: set[int]) -> None:
    import uvloop  # the server is not under test: the cheaper it is, the more CPU the clients get

    if cpus:
        os.sched_setaffinity(0, cpus)
    uvloop.run(SseServer(streams(gap, served), port).serve(ready.set))


@dataclass
class LocalServer:
    port: int
    proc: Any
    served: Any  # chunks written, shared with the server process
    gap: float

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(5)


def local_server(gap: float, cpus: set[int]) -> LocalServer:
    from engine.runtime.base import free_port

    port, ready, served = free_port(), mp.Event(), mp.RawValue("Q", 0)
    proc = mp.Process(target=serve, args=(port, ready, gap, served, cpus), daemon=True)
    proc.start()
    ready.wait(10)
    return LocalServer(port, proc, served, gap)


# -- ruler and the reference, in a process each -------------------------------------------------


def ruler_client(port: int, c: int, n: int, seconds: float, out: Any, cpus: set[int],
                 server: str = "vllm") -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    from engine.campaign.sources.item import plain_item
    from engine.campaign.workload import Shard
    from engine.run.loadgen import PassPlan, chunk_rate, shard_count
    from engine.run.shards import measure_pass
    from engine.servers import get_adapter

    # The bench server keeps connections alive properly, as vLLM and SGLang do.
    adapter = get_adapter(server)
    policy = Shard()

    def one(shards: int) -> Any:
        res = measure_pass(PassPlan(f"http://127.0.0.1:{port}", adapter, [plain_item("hi")], c, n, 256,
                                    {"temperature": 0}, {}, 60.0), shards=shards)
        assert not any(r["error"] for r in res.records), res.records[0]["error"]
        return res

    warm = one(1)  # as a campaign's warm pass: its chunk rate decides the reps' shards
    rate, lags, shards = chunk_rate(warm), [], 1
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        shards = shard_count(c, policy.concurrency, policy.chunk_rate, rate)
        res = one(shards)
        rate = chunk_rate(res)
        lags.append(res.lag_p99_ms)
    out.put({"lag_p99_ms": max(lags), "shards": shards, "failed": 0})


def aiohttp_client(port: int, c: int, n: int, seconds: float, out: Any, cpus: set[int]) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    import aiohttp

    lags: list[float] = []

    async def monitor() -> None:  # the same timer as ruler's
        while True:
            t = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            lags.append(max(0.0, time.monotonic() - t - LAG_TICK))

    async def one(session: aiohttp.ClientSession) -> None:
        payload = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 256,
                   "stream": True, "stream_options": {"include_usage": True}, "temperature": 0}
        async with session.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                json=payload) as response:
            timestamps = []
            async for raw in response.content:
                chunk = raw.strip()
                if not chunk:
                    continue
                chunk = chunk.removeprefix(b"data: ")
                if chunk == b"[DONE]":
                    continue
                json.loads(chunk)
                timestamps.append(time.perf_counter())

    async def main() -> None:
        conn = aiohttp.TCPConnector(limit=c)
        async with aiohttp.ClientSession(connector=conn) as session:
            await asyncio.gather(*(one(session) for _ in range(n)))  # warm, as ruler's
            mon = asyncio.create_task(monitor())
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                await asyncio.gather(*(one(session) for _ in range(n)))
            mon.cancel()

    asyncio.run(main())
    out.put({"lag_p99_ms": p99([x * 1000 for x in lags]), "shards": 1, "failed": 0})


def run_inprocess(fn: Any, srv: LocalServer, c: int, n: int, seconds: float,
                  cpus: set[int]) -> dict[str, Any]:
    """Passes of ``n`` requests, as many as ``seconds`` hold, after a warm one."""
    q: Any = mp.Queue()
    p = mp.Process(target=fn, args=(srv.port, c, n, seconds, q, cpus))
    p.start()
    sampler = Sampler(p.pid or 0, lambda: float(srv.served.value))
    try:
        res = dict(q.get(timeout=seconds * 20 + 300))
    finally:
        samples = sampler.stop()
        p.join()
    fig = steady(samples)
    if fig is None:
        raise RuntimeError("too few chunks for a steady window")
    return {**res, **fig}


# -- the local table ----------------------------------------------------------------------------


def keep_best(rows: dict[str, dict[str, Any]], name: str, r: dict[str, Any]) -> None:
    """A tool's best over rounds: its cheapest CPU, its best rate and lag."""
    if name not in rows:
        rows[name] = r
        return
    row = rows[name]
    row["us"] = min(row["us"], r["us"])
    row["rate"] = max(row["rate"], r["rate"])
    if r["lag_p99_ms"] is not None and (row["lag_p99_ms"] is None
                                        or r["lag_p99_ms"] < row["lag_p99_ms"]):
        row["lag_p99_ms"] = r["lag_p99_ms"]


def one_c(tools: list[str], peers: Peers, srv: LocalServer, c: int, args: argparse.Namespace,
          cpus: set[int], rounds: int, reasons: dict[str, str]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    n = max(4 * c, args.paced_requests if srv.gap else args.requests)
    for _ in range(rounds):
        for name in tools:
            if name in reasons:
                continue
            try:
                if name == "ruler":
                    r = run_inprocess(ruler_client, srv, c, n, args.seconds, cpus)
                elif name == "aiohttp":
                    r = run_inprocess(aiohttp_client, srv, c, n, args.seconds, cpus)
                else:
                    r = run_peer(peers, name, f"http://127.0.0.1:{srv.port}", c, n,
                                 CHUNKS_PER_REQUEST, cpus, lambda: float(srv.served.value))
            except Exception as e:  # noqa: BLE001 - one tool's failure ends its runs, not the bench's
                # Not tried again: its later figures are left out.
                why = str(e) if isinstance(e, NotRun) else f"the bench failed on its run: {e!r}"
                reasons[name] = f"at C={c} {'paced' if srv.gap else 'flat out'}: {why}"
                continue
            keep_best(rows, name, r)
    return rows


def local_table(args: argparse.Namespace) -> None:
    tools = [t for t in TOOLS if t in args.peers]
    peers = Peers.find(args)
    reasons: dict[str, str] = {}
    clients, server_cpus = split_cpus(args.client_cpus)
    print(f"{os.cpu_count()} cores; clients on cores {sorted(clients) or 'all'}, the server on "
          f"{sorted(server_cpus) or 'all'}; {load_average()} at the start; passes of max(4 C, "
          f"{args.requests}) requests (paced: max(4 C, {args.paced_requests})) of "
          f"{CHUNKS_PER_REQUEST} chunks (ruler and aiohttp: a warm "
          f"one, then as many as {args.seconds:g} s hold; a peer: one run of its CLI); best of "
          f"{args.rounds}", flush=True)
    flat: dict[int, dict[str, dict[str, Any]]] = {}
    paced: dict[int, dict[str, dict[str, Any]]] = {}
    srv = local_server(0.0, server_cpus)
    try:
        for c in args.concurrency:
            flat[c] = one_c(tools, peers, srv, c, args, clients, args.rounds, reasons)
            for name, r in flat[c].items():
                print(f"  flat out C={c:<3} {name:9} {r['rate']:>9.0f} chunks/s "
                      f"{r['us']:>7.1f} us/chunk  lag p99 {lag_cell(r)} ms", flush=True)
    finally:
        srv.stop()
    print(f"flat out done, {load_average()}", flush=True)
    srv = local_server(PACED_GAP, server_cpus)
    try:
        for c in args.paced:
            paced[c] = one_c(tools, peers, srv, c, args, clients, 1, reasons)
            for name, r in paced[c].items():
                print(f"  paced C={c:<3} {name:9} {r['rate']:>9.0f} chunks/s "
                      f"{r['us']:>7.1f} us/chunk  lag p99 {lag_cell(r)} ms", flush=True)
    finally:
        srv.stop()
    print(f"paced done, {load_average()}")
    print()
    print("Each peer's figure over ruler's (CPU: < 1 is cheaper than ruler; rate: > 1 faster). "
          "Targets: ruler's CPU/chunk <= 0.5 x the best peer's, its rate >= the best peer's, "
          "its paced lag p99 < 5 ms at C=256.")
    head = f"{'C':>4} {'tool':9} {'us/chunk':>9} {'ratio':>6} {'chunks/s':>9} {'ratio':>6} " \
           f"{'lag p99 flat':>12} {'lag p99 paced':>13} {'ratio':>6}"
    print(head)
    for c in sorted({*flat, *paced}):
        base = flat.get(c, {}).get("ruler")
        base_p = paced.get(c, {}).get("ruler")
        for name in tools:
            row, p = flat.get(c, {}).get(name), paced.get(c, {}).get(name)
            if row is None and p is None:
                continue
            us, rate = of(row, "us"), of(row, "rate")
            print(f"{c:>4} {name:9} {fmt(us, '.1f'):>9} {ratio(us, of(base, 'us')):>6} "
                  f"{fmt(rate, '.0f'):>9} {ratio(rate, of(base, 'rate')):>6} "
                  f"{lag_cell(row):>12} {lag_cell(p):>13} "
                  f"{ratio(of(p, 'lag_p99_ms'), of(base_p, 'lag_p99_ms')):>6}")
        if c not in flat:
            continue
        # The aiohttp reference counts as a peer here: it is written as vLLM's client is.
        others = [flat[c][t] for t in tools if t != "ruler" and t in flat[c]]
        if base and others:
            cheapest = min(p["us"] for p in others)
            fastest = max(p["rate"] for p in others)
            print(f"{'':4} verdict: CPU {base['us'] / cheapest:.2f} x the cheapest other's "
                  f"({'met' if base['us'] <= 0.5 * cheapest else 'NOT met'}, target <= 0.5); "
                  f"rate {base['rate'] / fastest:.2f} x the fastest other's "
                  f"({'met' if base['rate'] >= fastest else 'NOT met'}, target >= 1)")
    for c in args.paced:
        got = paced.get(c, {}).get("ruler")
        if got and got["lag_p99_ms"] is not None:
            print(f"ruler paced lag p99 at C={c}: {got['lag_p99_ms']:.2f} ms "
                  f"({'met' if got['lag_p99_ms'] < 5 else 'NOT met'}, target < 5 ms)")
    for name in tools:
        if name in reasons:
            print(f"not run: {name}: {reasons[name]}")
            continue
        ran = [d[name] for d in (*flat.values(), *paced.values()) if name in d]
        if ran and all(r["lag_p99_ms"] is None for r in ran):
            print(f"no lag figure: {name}: none of its processes ran an asyncio.Runner loop "
                  "the hook could time")
