"""Client benchmark: the client figures of issue 17, ruler's load generator beside a reference client.

A local server streams OpenAI-style SSE chunks (one HTTP chunk per token, as real servers flush),
either as fast as it can (flat out) or paced at 100 tokens/s per stream; it is the thing under the
clients, not under test. Each client runs in its own process, for ``--seconds`` per figure, and
reports streamed chunks per second, its CPU microseconds per chunk (user + system, its shard
processes included) and its event-loop lag p99 (a 5 ms timer, how late it wakes).

The reference is an aiohttp client written the way vLLM's and SGLang's benchmark clients are
(ClientSession, iterate response lines, strip ``data: ``, json.loads, perf_counter per chunk), plus
the same lag timer as ruler's. Ruler runs as a campaign runs it: passes of ``measure_pass``, the
first one a warm pass (discarded), each later one sharded by the campaign default policy
(``workload.shard``) on the chunk rate of the one before.

On a shared machine the figures are noisy: each client runs ``--rounds`` times, alternating, and
keeps its cheapest (CPU figures) or its best (rate, lag). Nothing here is asserted.

    .venv/bin/python bench/client_bench.py [--seconds 8] [--rounds 3]

``--server`` streams from a real llama-server instead (its command, model and flags; ruler adds
``--host``/``--port``): ruler's client alone, flat out, its chunk rate, CPU per chunk and
event-loop lag on a GPU box's server (the reference client keeps connections alive, which
llama-server breaks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHUNKS_PER_REQUEST = 200
PACED_GAP = 0.01  # 100 tokens/s per stream
LAG_TICK = 0.005


def _chunk(i: int) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FINAL = (b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                                 "usage": {"completion_tokens": CHUNKS_PER_REQUEST,
                                           "prompt_tokens": 5}}).encode() + b"\n\ndata: [DONE]\n\n")
CHUNKS = [b"%x\r\n%s\r\n" % (len(ev), ev) for ev in map(_chunk, range(CHUNKS_PER_REQUEST))]


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     gap: float = 0.0) -> None:
    try:
        while True:  # keep-alive: one request after the other on the connection
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            for i, chunk in enumerate(CHUNKS):  # one write (one segment) per token
                writer.write(chunk)
                if gap:
                    await writer.drain()
                    await asyncio.sleep(gap)
                elif i % 16 == 0:
                    await writer.drain()
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(FINAL), FINAL))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def serve(port: int, ready: Any, gap: float = 0.0) -> None:
    import uvloop  # the server is not under test: the cheaper it is, the more CPU the clients get

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _serve_one(r, w, gap), "127.0.0.1", port,
                                            backlog=1024)
        ready.set()
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ruler_client(port: int, c: int, seconds: float, out: Any, server: str = "vllm") -> None:
    from engine.campaign.sources.item import plain_item
    from engine.campaign.spec import Shard
    from engine.run.load import chunk_rate, measure_pass, shard_count
    from engine.servers import get_adapter

    # The bench server keeps connections alive properly, as vLLM and SGLang do (llama-server
    # does not: its adapter opens one per request).
    adapter = get_adapter(server)
    policy = Shard()
    n = c * (2 if c > 64 else 4)

    def one(shards: int) -> Any:
        res = measure_pass(f"http://127.0.0.1:{port}", adapter, [plain_item("hi")], c, n, 256,
                           {"temperature": 0}, {}, 60.0, shards=shards)
        assert not any(r["error"] for r in res.records), res.records[0]["error"]
        return res

    warm = one(1)  # as a campaign's warm pass: its chunk rate decides the reps' shards
    rate, chunks, requests, shard_cpu, passes = chunk_rate(warm), 0, 0, 0.0, []
    cpu0, t0 = _cpu(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        res = one(shard_count(c, policy.concurrency, policy.chunk_rate, rate))
        rate = chunk_rate(res)
        chunks += sum(r["chunks"] for r in res.records)
        requests += len(res.records)
        if res.shards:  # their CPU is theirs, not this process's
            shard_cpu += res.client_cpu_s
        passes.append(res)
    worst = max(passes, key=lambda p: p.lag_p99_ms)
    out.put({"chunks": chunks, "requests": requests, "cpu": _cpu() - cpu0 + shard_cpu,
             "wall": time.monotonic() - t0, "lag_p99_ms": worst.lag_p99_ms,
             "shard_lags": [s.lag_p99_ms for s in worst.shards], "passes": len(passes)})


def aiohttp_client(port: int, c: int, seconds: float, out: Any) -> None:
    import aiohttp

    lags: list[float] = []

    async def monitor() -> None:  # the same timer as ruler's
        while True:
            t = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            lags.append(time.monotonic() - t - LAG_TICK)

    async def one(session: aiohttp.ClientSession, counts: list[int]) -> None:
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
                data = json.loads(chunk)
                timestamps.append(time.perf_counter())
                if data.get("usage") or data["choices"][0]["delta"].get("content"):
                    counts[0] += 1  # every JSON chunk, as ruler's count does

    async def main() -> tuple[int, int]:
        counts, requests, n = [0], 0, c * (2 if c > 64 else 4)
        conn = aiohttp.TCPConnector(limit=c)
        async with aiohttp.ClientSession(connector=conn) as session:
            await asyncio.gather(*(one(session, [0]) for _ in range(n)))  # warm, as ruler's
            mon = asyncio.create_task(monitor())
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                await asyncio.gather(*(one(session, counts) for _ in range(n)))
                requests += n
            mon.cancel()
        return counts[0], requests

    cpu0, t0 = _cpu(), time.monotonic()
    chunks, requests = asyncio.run(main())
    ms = sorted(x * 1000 for x in lags) or [0.0]
    out.put({"chunks": chunks, "requests": requests, "cpu": _cpu() - cpu0,
             "wall": time.monotonic() - t0, "lag_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
             "shard_lags": []})


def measure(fn: Any, port: int, c: int, seconds: float, *extra: Any) -> dict[str, Any]:
    q: Any = mp.Queue()
    p = mp.Process(target=fn, args=(port, c, seconds, q, *extra))
    p.start()
    res = dict(q.get(timeout=seconds * 20 + 120))
    p.join()
    res["rate"] = res["chunks"] / res["wall"]
    res["us"] = res["cpu"] / max(res["chunks"], 1) * 1e6
    return res


def best(rounds: int, port: int, c: int, seconds: float) -> dict[str, dict[str, Any]]:
    """Each client's best of ``rounds`` runs, alternating: on a shared machine the load drifts,
    and alternating exposes both clients to the same drift."""
    rows: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, fn in (("ruler", ruler_client), ("aiohttp", aiohttp_client)):
            r = measure(fn, port, c, seconds)
            if name not in rows:
                rows[name] = r
            else:
                rows[name]["us"] = min(rows[name]["us"], r["us"])
                rows[name]["rate"] = max(rows[name]["rate"], r["rate"])
                if r["lag_p99_ms"] < rows[name]["lag_p99_ms"]:
                    rows[name]["lag_p99_ms"], rows[name]["shard_lags"] = r["lag_p99_ms"], r["shard_lags"]
    return rows


def _lag(r: dict[str, Any]) -> str:
    shards = r["shard_lags"]
    if len(shards) > 1:
        return f"{r['lag_p99_ms']:.2f} ({len(shards)} shards: {', '.join(f'{x:.2f}' for x in shards)})"
    return f"{r['lag_p99_ms']:.2f}"


def server(gap: float) -> tuple[int, Any]:
    from engine.runtime.base import free_port

    port, ready = free_port(), mp.Event()
    proc = mp.Process(target=serve, args=(port, ready, gap), daemon=True)
    proc.start()
    ready.wait(10)
    return port, proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 64])
    ap.add_argument("--paced", type=int, nargs="*", default=[64, 256])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server", help="a llama-server command to stream from (instead of the local "
                                     "SSE server)")
    args = ap.parse_args()
    if args.server:
        return real_server(args)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start "
          f"(a shared machine: every figure is noisy); {args.seconds:g} s per run, best of "
          f"{args.rounds}")
    print(f"{'':26} {'chunks/s':>10} {'cpu us/chunk':>13}  lag p99 ms")
    table: list[tuple[str, str, str, str]] = []
    port, proc = server(0.0)
    for c in args.concurrency:
        rows = best(args.rounds, port, c, args.seconds)
        for name, r in rows.items():
            print(f"flat out C={c:<3} {name:10} {r['rate']:>10.0f} {r['us']:>13.1f}  {_lag(r)}")
        ruler, ref = rows["ruler"], rows["aiohttp"]
        table.append((f"CPU per chunk, C={c}", f"{ruler['us']:.1f} us", f"{ref['us']:.1f} us",
                      f"ratio {ruler['us'] / ref['us']:.2f} (target <= 0.5)"))
        if c == 1:
            table.append(("chunks/s flat out, C=1", f"{ruler['rate']:.0f}", f"{ref['rate']:.0f}",
                          f"{'>=' if ruler['rate'] >= ref['rate'] else '<'} reference "
                          "(target >=)"))
        if c == 64:
            table.append(("lag p99 flat out, C=64", f"{_lag(ruler)} ms", f"{_lag(ref)} ms",
                          "target < 5 ms"))
    proc.terminate()
    port, proc = server(PACED_GAP)
    for c in args.paced:
        rows = best(1, port, c, args.seconds)
        for name, r in rows.items():
            print(f"paced C={c:<3}    {name:10} {r['rate']:>10.0f} {r['us']:>13.1f}  {_lag(r)}")
        table.append((f"lag p99 paced 100 tok/s, C={c}", f"{_lag(rows['ruler'])} ms",
                      f"{_lag(rows['aiohttp'])} ms", "target < 5 ms"))
    proc.terminate()
    print()
    print(f"{'figure':32} {'ruler':36} {'aiohttp reference':22} verdict")
    for fig, ruler_v, ref_v, verdict in table:
        print(f"{fig:32} {ruler_v:36} {ref_v:22} {verdict}")


def real_server(args: argparse.Namespace) -> None:
    """Ruler's client alone against a real llama-server, flat out at each concurrency."""
    from bench.accuracy_bench import command_plan, start_server

    plan, _ = command_plan(args.server)
    real, port = start_server(plan, []), plan.host_port
    try:
        print(f"{'':26} {'chunks/s':>10} {'cpu us/chunk':>13}  lag p99 ms")
        for c in args.concurrency:
            rs = [measure(ruler_client, port, c, args.seconds, "llamacpp") for _ in range(args.rounds)]
            r = min(rs, key=lambda x: x["us"])
            print(f"llama-server C={c:<3} ruler {r['rate']:>10.0f} {r['us']:>13.1f}  {_lag(r)}")
    finally:
        real.stop()


if __name__ == "__main__":
    main()
