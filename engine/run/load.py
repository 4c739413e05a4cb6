"""The load generator: C workers streaming OpenAI chat completions, one record per request.

It watches itself too: event-loop lag and the client's CPU time per pass, so a rep where the
client, not the server, may be the bottleneck is flagged rather than believed.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import uvloop

from engine.servers.client import ServerClient, request_body
from engine.servers.data import BadServerData, mapping, optional_count, reading, show, text

LAG_TICK = 0.005  # the lag monitor's sleep; lag = how late it wakes
CLIENT_BOUND_LAG_MS = 20.0
CLIENT_BOUND_CPU = 0.8  # client CPU seconds per wall second on its one thread
# A server may batch tokens into one chunk (speculative steps, a stream interval), but not
# thousands: a count beyond this per chunk is not a count the stream carried.
MAX_TOKENS_PER_CHUNK = 1024
_CR = re.compile(rb"\r\n?")


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


def _handle(payload: bytes, now: float, adapter: ServerClient, record: dict[str, Any],
            state: list[Any]) -> bool:
    """One SSE data payload; False ends the stream. ``state`` = [last arrival, gaps, text_len].

    Whatever the payload, the outcome is the record's fields or its error, never an exception.
    """
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
    try:
        _read_chunk(chunk, now, adapter, record, state)
    except BadServerData as e:
        record["error"] = f"bad stream chunk: {e}"[:300]
        return False
    return True


def _read_chunk(chunk: dict[str, Any], now: float, adapter: ServerClient, record: dict[str, Any],
                state: list[Any]) -> None:
    record["chunks"] += 1
    choices = chunk.get("choices")
    if not isinstance(choices, list | None):
        raise BadServerData(f"choices is {show(choices)}, not a list")
    for i, choice in enumerate(choices or ()):
        choice = mapping(choice, f"choices[{i}]")
        delta = mapping(choice.get("delta"), f"choices[{i}].delta")
        n = (len(text(delta.get("content"), "delta.content"))
             + len(text(delta.get("reasoning_content"), "delta.reasoning_content")))
        if n:
            state[2] += n
            if record["first_token"] is None:
                record["first_token"] = now
            else:
                state[1].append(now - state[0])
            state[0] = now
        if choice.get("finish_reason"):
            record["finish_reason"] = text(choice["finish_reason"], "finish_reason")
    usage = mapping(chunk.get("usage"), "usage")
    if usage:
        tokens = optional_count(usage.get("completion_tokens"), "usage.completion_tokens")
        if tokens is not None:
            record["completion_tokens"] = tokens
        record["prompt_tokens"] = optional_count(usage.get("prompt_tokens"), "usage.prompt_tokens")
    with reading(f"{adapter.name} acceptance fields"):
        acc = adapter.request_acceptance(chunk)
    if acc:
        record["acceptance"] = acc


def _token_limit(body: dict[str, Any]) -> int | None:
    """The most completion tokens the request allows (a knob may set either OpenAI name)."""
    limits = [v for k in ("max_tokens", "max_completion_tokens")
              if isinstance(v := body.get(k), int) and not isinstance(v, bool) and v > 0]
    return min(limits) if limits else None


def implausible(record: dict[str, Any], limit: int | None) -> str | None:
    """Why a finished request's token count cannot be true, or None.

    A request cannot return more tokens than it allowed, nor many more than its chunks could
    carry: such a count (10^12 for a two-chunk reply) would otherwise be a row of 10^13 tok/s.
    """
    tokens = record["completion_tokens"]
    if limit is not None and tokens > limit:
        return f"usage says {tokens} completion tokens, more than the request's limit of {limit}"
    if tokens > MAX_TOKENS_PER_CHUNK * max(record["chunks"], 1):
        return (f"usage says {tokens} completion tokens, more than {record['chunks']} stream "
                f"chunks can carry")
    return None


def _events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events' data payloads in ``buf`` and the unfinished rest.

    Events end at a blank line; a payload of several ``data:`` lines is joined with newlines.
    Lines end in CRLF, LF or CR (the SSE spec); the rest comes back with its line ends already
    LF, so the events are the same wherever the network cut the stream.
    """
    if b"\r" in buf:
        held = b"\r" if buf.endswith(b"\r") else b""  # may be the first half of a CRLF
        buf = _CR.sub(b"\n", buf[:len(buf) - len(held)]) + held
    *events, rest = buf.split(b"\n\n")
    out = []
    for event in events:
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            out.append(data[0] if len(data) == 1 else b"\n".join(data))
    return out, rest


async def _one(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
               adapter: ServerClient, record: dict[str, Any]) -> None:
    record["start"] = time.monotonic()
    state: list[Any] = [record["start"], [], 0]
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                answer = await response.text(errors="replace")
                record["error"] = f"HTTP {response.status}: {answer[:300]}"
                return
            # SSE by hand on whole network reads, not line by line: one await per read and one
            # timestamp per read (when the bytes arrived), whatever the number of events in it.
            buf = b""
            async for block in response.content.iter_any():
                buf, more = read_stream(buf + block, time.monotonic(), adapter, record, state)
                if not more:
                    return
    except (TimeoutError, aiohttp.ClientError) as e:
        record["error"] = f"{type(e).__name__}: {e}"[:300]
    except asyncio.CancelledError:
        record["error"] = "cancelled: the pass was stopped (operator abort or window timeout)"
        raise
    except Exception as e:  # noqa: BLE001
        # The server's bytes also pass through aiohttp's HTTP parser, which has errors of its own
        # beyond ClientError; whatever a server sends, the request is an error and the pass's
        # receipt is still written.
        record["error"] = f"unreadable answer: {type(e).__name__}: {e}"[:300]
    finally:
        finish(record, state, time.monotonic(), body)


def new_record(worker: int, index: int, prompt_index: int) -> dict[str, Any]:
    return {"worker": worker, "index": index, "prompt_index": prompt_index, "first_token": None,
            "completion_tokens": None, "chunks": 0, "error": None}


def read_stream(buf: bytes, now: float, adapter: ServerClient, record: dict[str, Any],
                state: list[Any]) -> tuple[bytes, bool]:
    """The complete events in ``buf`` into ``record``: the unfinished rest, and False once the
    stream has ended (``[DONE]`` or an error)."""
    payloads, rest = _events(buf)
    for payload in payloads:
        if not _handle(payload, now, adapter, record, state):
            return rest, False
    return rest, True


def finish(record: dict[str, Any], state: list[Any], now: float, body: dict[str, Any]) -> None:
    """A request's record once its stream ended: no usage or an implausible one is its error."""
    record["end"] = now
    record["text_chars"] = state[2]
    record["gaps_ms"] = [round(g * 1000, 2) for g in state[1]]
    if not record.get("error"):
        if record.get("completion_tokens") is None:
            record["error"] = "no usage in the stream: completion tokens unknown"
        else:
            record["error"] = implausible(record, _token_limit(body))


async def _lag_monitor(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(LAG_TICK)
        samples.append(time.monotonic() - t - LAG_TICK)


async def run_pass(base_url: str, adapter: ServerClient, prompts: Sequence[str], concurrency: int,
                   n_requests: int, max_tokens: int, sampling: dict[str, Any],
                   knobs: dict[str, Any], timeout: float,
                   stop: Callable[[], bool] = lambda: False) -> PassResult:
    """n_requests requests over exactly ``concurrency`` workers; every rep sends the same prompts.

    ``stop()`` turning true (abort, SIGTERM, the window timeout) cancels the requests in flight;
    they are recorded as cancelled rather than left to finish.
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
            rec = new_record(w, i, i % len(prompts))
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
