"""The load generator: C workers streaming OpenAI chat completions, one record per request.

It watches itself too: event-loop lag and the client's CPU time per pass, so a rep where the
client, not the server, may be the bottleneck is flagged rather than believed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import uvloop

from engine.servers.adapter import ServerAdapter
from engine.servers.client import request_body

LAG_TICK = 0.005  # the lag monitor's sleep; lag = how late it wakes
CLIENT_BOUND_LAG_MS = 20.0
CLIENT_BOUND_CPU = 0.8  # client CPU seconds per wall second on its one thread


@dataclass
class PassResult:
    records: list[dict[str, Any]]
    lag_p99_ms: float
    client_cpu_s: float
    wall_s: float
    achieved_concurrency: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def client_bound(self) -> bool:
        return (self.lag_p99_ms > CLIENT_BOUND_LAG_MS
                or self.client_cpu_s > CLIENT_BOUND_CPU * max(self.wall_s, 1e-9))

    def summary(self) -> dict[str, Any]:
        return {"lag_p99_ms": round(self.lag_p99_ms, 3), "client_cpu_s": round(self.client_cpu_s, 4),
                "wall_s": round(self.wall_s, 4), "client_bound": self.client_bound,
                "achieved_concurrency": round(self.achieved_concurrency, 3), **self.extra}


def _handle(payload: bytes, now: float, adapter: ServerAdapter, record: dict[str, Any],
            state: list[Any]) -> bool:
    """One SSE data payload; False ends the stream. ``state`` = [last arrival, gaps, text_len]."""
    if payload == b"[DONE]":
        return False
    try:
        chunk = orjson.loads(payload)
    except orjson.JSONDecodeError:
        record["error"] = f"malformed stream chunk: {payload[:200]!r}"
        return False
    if not isinstance(chunk, dict):
        record["error"] = f"malformed stream chunk (not an object): {payload[:200]!r}"
        return False
    if "error" in chunk:
        record["error"] = f"stream error: {json.dumps(chunk['error'])[:300]}"
        return False
    record["chunks"] += 1
    for choice in chunk.get("choices") or ():
        delta = choice.get("delta") or {}
        n = len(delta.get("content") or "") + len(delta.get("reasoning_content") or "")
        if n:
            state[2] += n
            if record["first_token"] is None:
                record["first_token"] = now
            else:
                state[1].append(now - state[0])
            state[0] = now
        if choice.get("finish_reason"):
            record["finish_reason"] = choice["finish_reason"]
    usage = chunk.get("usage")
    if usage:
        record["completion_tokens"] = usage.get("completion_tokens")
        record["prompt_tokens"] = usage.get("prompt_tokens")
    acc = adapter.request_acceptance(chunk)
    if acc:
        record["acceptance"] = acc
    return True


def _events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events' data payloads in ``buf`` and the unfinished rest.

    Events end at a blank line; a payload of several ``data:`` lines is joined with newlines.
    """
    if b"\r" in buf:
        buf = buf.replace(b"\r\n", b"\n")  # a lone trailing \r waits for its \n in the rest
    *events, rest = buf.split(b"\n\n")
    out = []
    for event in events:
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            out.append(data[0] if len(data) == 1 else b"\n".join(data))
    return out, rest


async def _one(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
               adapter: ServerAdapter, record: dict[str, Any]) -> None:
    record["start"] = time.monotonic()
    state: list[Any] = [record["start"], [], 0]
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                text = await response.text(errors="replace")
                record["error"] = f"HTTP {response.status}: {text[:300]}"
                return
            # SSE by hand on whole network reads, not line by line: one await per read and one
            # timestamp per read (when the bytes arrived), whatever the number of events in it.
            buf = b""
            async for block in response.content.iter_any():
                now = time.monotonic()
                payloads, buf = _events(buf + block)
                for payload in payloads:
                    if not _handle(payload, now, adapter, record, state):
                        return
    except (TimeoutError, aiohttp.ClientError) as e:
        record["error"] = f"{type(e).__name__}: {e}"[:300]
    except asyncio.CancelledError:
        record["error"] = "cancelled: the operator stopped the pass"
        raise
    finally:
        record["end"] = time.monotonic()
        record["text_chars"] = state[2]
        record["gaps_ms"] = [round(g * 1000, 2) for g in state[1]]
        if record.get("completion_tokens") is None and not record.get("error"):
            record["error"] = "no usage in the stream: completion tokens unknown"


async def _lag_monitor(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(LAG_TICK)
        samples.append(time.monotonic() - t - LAG_TICK)


async def run_pass(base_url: str, adapter: ServerAdapter, prompts: Sequence[str], concurrency: int,
                   n_requests: int, max_tokens: int, sampling: dict[str, Any],
                   knobs: dict[str, Any], timeout: float,
                   stop: Callable[[], bool] = lambda: False) -> PassResult:
    """n_requests requests over exactly ``concurrency`` workers; every rep sends the same prompts.

    ``stop()`` turning true (abort, SIGTERM) cancels the requests in flight; they are recorded as
    cancelled rather than left to finish.
    """
    url = base_url + adapter.chat_path
    fields = adapter.load_fields()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n_requests):
        queue.put_nowait(i)
    records: list[dict[str, Any]] = []
    lag: list[float] = []
    done = asyncio.Event()
    in_flight = [0, 0.0]  # current, integral of in-flight over time

    async def worker(w: int, client: aiohttp.ClientSession) -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            rec: dict[str, Any] = {"worker": w, "index": i, "prompt_index": i % len(prompts),
                                   "first_token": None, "completion_tokens": None, "chunks": 0,
                                   "error": None}
            records.append(rec)
            body = request_body(prompts[i % len(prompts)], max_tokens, sampling, knobs, fields)
            in_flight[0] += 1
            await _one(client, url, body, adapter, rec)
            in_flight[0] -= 1

    async def sampler() -> None:
        while not done.is_set():
            await asyncio.sleep(0.05)
            in_flight[1] += in_flight[0] * 0.05

    cpu0, t0 = time.thread_time(), time.monotonic()
    # aiohttp, not httpx, on this hot path: its C HTTP parser costs a fraction of h11's per
    # streamed chunk (bench/client_bench.py measured both), and the client must not be the bottleneck.
    # One connection per request: llama-server drops kept-alive connections after some streamed
    # responses and aiohttp then writes into a closed socket ("Can not write request body", seen
    # on every fourth request here). A loopback connect costs far less than a request.
    connector = aiohttp.TCPConnector(limit=concurrency + 2, force_close=True)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(
            total=timeout, sock_connect=10.0)) as client:
        mon = asyncio.create_task(_lag_monitor(lag, done))
        samp = asyncio.create_task(sampler())
        workers = [asyncio.create_task(worker(w, client)) for w in range(concurrency)]
        while not all(w.done() for w in workers):
            if stop():
                for w in workers:
                    w.cancel()
            await asyncio.wait(workers, timeout=0.1)
        await asyncio.gather(*workers, return_exceptions=True)
        done.set()
        await asyncio.gather(mon, samp)
    wall = time.monotonic() - t0
    lag_ms = sorted(x * 1000 for x in lag) or [0.0]
    p99 = lag_ms[min(len(lag_ms) - 1, int(0.99 * len(lag_ms)))]
    records.sort(key=lambda r: r["index"])
    return PassResult(records, p99, time.thread_time() - cpu0, wall,
                      in_flight[1] / wall if wall > 0 else 0.0)


def measure_pass(*args: Any, **kwargs: Any) -> PassResult:
    """:func:`run_pass` on its own uvloop event loop, from synchronous code.

    uvloop, not the default loop: its per-event cost is about half, and at C=64 the loop's lag is
    what keeps the per-chunk timestamps honest (bench/client_bench.py prints both).
    """
    return uvloop.run(run_pass(*args, **kwargs))
