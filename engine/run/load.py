"""The load generator: C workers streaming OpenAI chat completions, one record per request.

Each worker sends its requests one after the other through :mod:`engine.run.stream`, which does
the least work per network read (an arrival time and the bytes) and parses in bulk.

It watches itself too: event-loop lag and the client's CPU time per pass, so a rep where the
client, not the server, may be the bottleneck is flagged rather than believed.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvloop

from engine.run.stream import Client, Target, new_record, token_limit
from engine.servers.client import ServerClient, request_body

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


async def _lag_monitor(samples: list[float]) -> None:
    while True:
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
    fields = adapter.load_fields()
    target = Target.of(base_url + adapter.chat_path, adapter.keep_alive)
    limit = token_limit(request_body("", max_tokens, sampling, knobs, fields))
    requests: dict[int, bytes] = {}  # per prompt: encoded once per pass, sent many times
    indices = iter(range(n_requests))

    def take() -> int | None:
        return next(indices, None)

    records: list[dict[str, Any]] = []
    lag: list[float] = []
    in_flight = [0, 0.0]  # current, integral of in-flight over time

    async def worker(w: int) -> None:
        client = Client(target, adapter.keep_alive, timeout)
        try:
            while (i := take()) is not None:
                p = i % len(prompts)
                if p not in requests:
                    requests[p] = target.request(request_body(prompts[p], max_tokens, sampling,
                                                              knobs, fields))
                rec = new_record(w, i, p)
                records.append(rec)
                in_flight[0] += 1
                try:
                    await client.send(requests[p], rec, adapter, limit)
                finally:
                    in_flight[0] -= 1
        finally:
            client.close()

    async def sampler() -> None:
        while True:
            await asyncio.sleep(0.05)
            in_flight[1] += in_flight[0] * 0.05

    cpu0, t0 = time.thread_time(), time.monotonic()
    mon = asyncio.create_task(_lag_monitor(lag))
    samp = asyncio.create_task(sampler())
    tasks = [asyncio.create_task(worker(w)) for w in range(concurrency)]
    while not all(t.done() for t in tasks):
        if stop():
            for t in tasks:
                t.cancel()
        await asyncio.wait(tasks, timeout=0.1)
    await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.monotonic() - t0
    # Stopped, not awaited to their next tick: the sampler's is 50 ms away, the pass ends now.
    mon.cancel()
    samp.cancel()
    await asyncio.gather(mon, samp, return_exceptions=True)
    lag_ms = sorted(x * 1000 for x in lag) or [0.0]
    p99 = lag_ms[min(len(lag_ms) - 1, int(0.99 * len(lag_ms)))]
    records.sort(key=lambda r: r["index"])
    return PassResult(records, p99, time.thread_time() - cpu0, wall,
                      in_flight[1] / wall if wall > 0 else 0.0)


def measure_pass(*args: Any, **kwargs: Any) -> PassResult:
    """:func:`run_pass` from synchronous code, on a uvloop event loop.

    uvloop, not the default loop: its per-event cost is about half, and at C=64 the loop's lag is
    what keeps the per-chunk timestamps honest (bench/client_bench.py prints both).
    """
    return _run(run_pass(*args, **kwargs))


_thread = threading.local()


def _run(coro: Coroutine[Any, Any, PassResult]) -> PassResult:
    """Run a pass on this thread's uvloop loop, made once: a fresh loop per pass set up and tore
    down libuv's io_uring rings each time (a few percent of a short pass's CPU). The objects that
    exist before the pass are frozen out of the cyclic GC meanwhile: its full collections
    scanned the whole engine's heap while chunks arrived."""
    loop = getattr(_thread, "loop", None)
    if loop is None or loop.is_closed():
        loop = _thread.loop = uvloop.new_event_loop()
    gc.freeze()
    try:
        return loop.run_until_complete(coro)
    finally:
        gc.unfreeze()
