"""Client benchmark: is ruler's load generator cheaper than the peers' aiohttp clients?

A local server streams OpenAI-style SSE chunks as fast as it can (it is the thing under the client,
not under test). Each client runs in its own process at C = 1, 8, 64 and reports streamed chunks
per second and its own CPU microseconds per chunk; ruler's also reports its event-loop lag p99.
The reference is an aiohttp client written the way vLLM's and SGLang's benchmark clients are
(ClientSession, iterate response lines, strip ``data: ``, json.loads, perf_counter per chunk).

    .venv/bin/python bench/client_bench.py [--seconds 8] [--rounds 3]

``--server`` streams from a real llama-server instead (its command, model and flags; ruler adds
``--host``/``--port``): ruler's client alone, its chunk rate, CPU per chunk and event-loop lag on
a GPU box's server (the reference client keeps connections alive, which llama-server breaks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHUNKS_PER_REQUEST = 200


def _chunk(i: int) -> bytes:
    body = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


FINAL = (b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                                 "usage": {"completion_tokens": CHUNKS_PER_REQUEST,
                                           "prompt_tokens": 5}}).encode() + b"\n\ndata: [DONE]\n\n")
BODY = b"".join(_chunk(i) for i in range(CHUNKS_PER_REQUEST)) + FINAL


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     gap: float = 0.0) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            # One HTTP chunk per SSE event, as real servers flush per token.
            for i in range(CHUNKS_PER_REQUEST):
                ev = _chunk(i)
                writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
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
    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _serve_one(r, w, gap), "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def ruler_client(port: int, c: int, seconds: float, out: Any) -> None:
    from engine.run.load import measure_pass
    from engine.servers import get_adapter

    adapter = get_adapter("llamacpp")
    chunks = requests = 0
    lags: list[float] = []
    cpu0, t0 = _cpu(), time.monotonic()
    while time.monotonic() - t0 < seconds:
        res = measure_pass(f"http://127.0.0.1:{port}", adapter, ["hi"], c, c * 4, 256,
                           {"temperature": 0}, {}, 60.0)
        chunks += sum(r["chunks"] for r in res.records)
        requests += len(res.records)
        lags.append(res.lag_p99_ms)
        assert not any(r["error"] for r in res.records), res.records[0]["error"]
    out.put({"chunks": chunks, "requests": requests, "cpu": _cpu() - cpu0,
             "wall": time.monotonic() - t0, "lag_p99_ms": max(lags)})


def aiohttp_client(port: int, c: int, seconds: float, out: Any) -> None:
    import aiohttp

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
        counts, requests = [0], 0
        t0 = time.monotonic()
        conn = aiohttp.TCPConnector(limit=c)
        async with aiohttp.ClientSession(connector=conn) as session:
            while time.monotonic() - t0 < seconds:
                await asyncio.gather(*(one(session, counts) for _ in range(c * 4)))
                requests += c * 4
        return counts[0], requests

    cpu0, t0 = _cpu(), time.monotonic()
    chunks, requests = asyncio.run(main())
    out.put({"chunks": chunks, "requests": requests, "cpu": _cpu() - cpu0,
             "wall": time.monotonic() - t0, "lag_p99_ms": None})


def measure(fn: Any, port: int, c: int, seconds: float) -> dict[str, Any]:
    q: Any = mp.Queue()
    p = mp.Process(target=fn, args=(port, c, seconds, q))
    p.start()
    res = q.get(timeout=seconds * 10 + 60)
    p.join()
    return dict(res)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 8, 64])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server", help="a llama-server command to stream from (instead of the local "
                                     "SSE server)")
    args = ap.parse_args()
    from engine.runtime.base import free_port

    if args.server:
        from bench.accuracy_bench import command_plan, start_server

        plan, _ = command_plan(args.server)
        real, port = start_server(plan, []), plan.host_port
    else:
        port = free_port()
        ready = mp.Event()
        server = mp.Process(target=serve, args=(port, ready), daemon=True)
        server.start()
        ready.wait(10)
    print(f"{'C':>3} {'client':8} {'chunks/s':>10} {'cpu us/chunk':>13} {'lag p99 ms':>10}")
    for c in args.concurrency:
        rows: dict[str, dict[str, Any]] = {}
        # Alternate the clients for --rounds rounds and keep each one's cheapest: on a shared
        # machine the load drifts, and alternating exposes both clients to the same drift.
        for _ in range(args.rounds):
            # The reference keeps connections alive, and llama-server drops kept-alive connections
            # mid-stream ("Can not write request body"): on a real server ruler's client runs alone.
            clients = [("ruler", ruler_client)] + ([] if args.server else [("aiohttp", aiohttp_client)])
            for name, fn in clients:
                r = measure(fn, port, c, args.seconds)
                r["rate"] = r["chunks"] / r["wall"]
                r["us"] = r["cpu"] / max(r["chunks"], 1) * 1e6
                if name not in rows or r["us"] < rows[name]["us"]:
                    rows[name] = r
        for name, r in rows.items():
            lag = f"{r['lag_p99_ms']:.2f}" if r["lag_p99_ms"] is not None else "-"
            print(f"{c:>3} {name:8} {r['rate']:>10.0f} {r['us']:>13.1f} {lag:>10}")
        if args.server:
            continue
        ratio = rows["ruler"]["us"] / rows["aiohttp"]["us"]
        print(f"{c:>3} ratio    cpu/chunk ruler/aiohttp = {ratio:.2f} "
              f"({'ruler cheaper' if ratio < 1 else 'ruler costs more'})")
    if args.server:
        real.stop()
        return
    server.terminate()
    # Honest timestamps need an idle loop: pace each stream like a fast real server (100 tok/s per
    # stream, 6,400 chunks/s at C=64) and report ruler's event-loop lag there.
    paced = free_port()
    ready = mp.Event()
    server = mp.Process(target=serve, args=(paced, ready, 0.01), daemon=True)
    server.start()
    ready.wait(10)
    for c in (8, 64):
        r = measure(ruler_client, paced, c, args.seconds)
        print(f"paced 100 tok/s per stream, C={c}: ruler {r['chunks'] / r['wall']:.0f} chunks/s, "
              f"event-loop lag p99 {r['lag_p99_ms']:.2f} ms, "
              f"cpu {r['cpu'] / max(r['chunks'], 1) * 1e6:.1f} us/chunk")
    server.terminate()


if __name__ == "__main__":
    main()
