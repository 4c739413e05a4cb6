"""The load generator: streamed OpenAI chat completions, one record per request, in closed loop
(C workers, each sending its next request when its last one ends) or open loop (requests sent at
their arrival times, a seeded Poisson process, whatever is in flight).

Each request goes through :mod:`engine.run.client`, which does the least work per network read
(an arrival time and the bytes) and parses in bulk.

It watches itself too: event-loop lag and the client's CPU time per pass, so a rep where the
client, not the server, may be the bottleneck is flagged rather than believed. Above what one
event loop can keep honest (:func:`shard_count`), a pass runs on several worker processes
(engine.run.shards), each with its own loop and its share of the workers; their records merge
into the pass's, and each one's lag and CPU is judged on its own.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import random
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import uvloop

from engine.record.request import RequestRecord
from engine.run.client.http import Target
from engine.run.client.record import new_record, token_limit
from engine.run.client.transport import Client
from engine.servers.client import ServerClient, request_body

if TYPE_CHECKING:  # a TypedDict: the shard processes this module preloads need no campaign code
    from engine.campaign.sources.item import Item

LAG_TICK = 0.005  # the lag monitor's sleep; lag = how late it wakes
CLIENT_BOUND_LAG_MS = 20.0
CLIENT_BOUND_CPU = 0.8  # client CPU seconds per wall second on its one thread
# The client's own loop lost this long at once (the engine stopped: SIGSTOP, a suspended VM, a
# swap storm): its rep timed the client, not the server. No GC or busy loop comes near it; two
# seconds leaves a busy host's scheduling room, and a stopped engine (6-10 s when it was found) none.
STALL_S = 2.0


@dataclass
class PassResult:
    records: list[RequestRecord]
    lag_p99_ms: float
    client_cpu_s: float
    wall_s: float
    achieved_concurrency: float
    stall_s: float = 0.0  # the longest the client's loop woke late: a stop of the engine itself
    extra: dict[str, Any] = field(default_factory=dict)
    shards: list[PassResult] = field(default_factory=list)  # a sharded pass: each shard's figures

    @property
    def client_bound(self) -> bool:
        """Whether a loop of this pass may have been the bottleneck: each shard judged alone. A
        loop that stopped for seconds (:attr:`stalled`) was, whatever its lag's p99 and CPU say
        (a stopped process spends no CPU, and one late wake is no percentile of thousands)."""
        if self.shards:
            return any(s.client_bound for s in self.shards)
        return (self.stalled or self.lag_p99_ms > CLIENT_BOUND_LAG_MS
                or self.client_cpu_s > CLIENT_BOUND_CPU * max(self.wall_s, 1e-9))

    @property
    def stalled(self) -> bool:
        """Whether the client itself stopped mid-pass (STALL_S): the rep is the client's."""
        return self.stall_s >= STALL_S

    def summary(self) -> dict[str, Any]:
        loops = self.shards or [self]
        return {"lag_p99_ms": round(self.lag_p99_ms, 3), "stall_s": round(self.stall_s, 3),
                "client_cpu_s": round(self.client_cpu_s, 4),
                "wall_s": round(self.wall_s, 4), "client_bound": self.client_bound,
                "achieved_concurrency": round(self.achieved_concurrency, 3),
                "shards": len(loops), "shard_lag_p99_ms": [round(s.lag_p99_ms, 3) for s in loops],
                "shard_client_bound": [s.client_bound for s in loops], **self.extra}


def shard_count(concurrency: int, per_shard: int, chunk_rate: float, last_rate: float | None) -> int:
    """Shards for a pass: enough that none carries more than ``per_shard`` streams, nor more than
    ``chunk_rate`` chunks a second at the rate the shape's previous pass streamed (``last_rate``);
    at most one per worker and one per core this process may run on."""
    need = max(math.ceil(concurrency / per_shard), math.ceil((last_rate or 0.0) / chunk_rate), 1)
    return max(1, min(need, concurrency, len(os.sched_getaffinity(0))))


def chunk_rate(res: PassResult) -> float:
    """Stream chunks per second over a pass: what the next pass's shard count is judged on."""
    return sum(r["chunks"] for r in res.records) / res.wall_s if res.wall_s > 0 else 0.0


def arrival_times(rate: float, n: int, seed: int, shape: float = 1.0) -> list[float]:
    """Send times of an open-loop pass, in seconds from its start: the first at 0, then gaps drawn
    from a gamma distribution of mean 1/rate and shape ``shape`` (vLLM's burstiness): 1 is an
    exponential (a Poisson process), below 1 burstier (the gaps' coefficient of variation is
    1/sqrt(shape)), above 1 steadier. Seeded by the seed and the rate, so every rep and every
    window of a campaign sends the same schedule."""
    rng = random.Random(f"{seed}:{rate!r}")  # a str seed hashes the same in every process
    scale = 1.0 / (rate * shape)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        # Shape 1 is Poisson, drawn by expovariate: gammavariate(1) draws other numbers from the
        # same seed, and a Poisson campaign's schedule must stay the one its recorded runs sent.
        t += rng.expovariate(rate) if shape == 1.0 else rng.gammavariate(shape, scale)
    return out


async def _lag_monitor(samples: list[float]) -> None:
    while True:
        t = time.monotonic()
        await asyncio.sleep(LAG_TICK)
        # libuv's timers run on its loop time, cached at the start of an iteration and kept in
        # whole milliseconds: a timer can fire up to a millisecond before LAG_TICK has passed by
        # this clock. Early is not lag (a shard at rest showed a p99 of -0.67 ms).
        samples.append(max(0.0, time.monotonic() - t - LAG_TICK))


@dataclass(frozen=True)
class PassPlan:
    """A pass: what to send, how many, and how. It travels whole to a sharded pass's worker
    processes, so it holds only what pickles.

    ``n_requests`` requests over exactly ``concurrency`` workers (closed loop); request i sends
    item i % len (every rep sends the same items). An item with its own ``max_tokens`` (an output
    length from the data) is sent with that limit and the adapter's
    :meth:`~ServerClient.exact_length_fields`, so the server generates that many tokens; the
    others with ``max_tokens``.

    With ``arrivals`` (:func:`arrival_times`) the pass is open loop: request i is sent at
    ``arrivals[i]`` seconds from the start, on a connection of its own or an idle kept one,
    whatever is in flight (``concurrency`` and a shard's workers are not used); its record's
    ``scheduled`` is that time, so a send the client made late shows. With ``seconds`` (a rep
    sized by time) no request is sent once that long has passed since the start; the pass ends
    with the requests then in flight; each worker then sends its own requests, worker w's k-th
    request index ``k * concurrency + w``, so every rep gives a worker the same sequence of items
    whatever the timing (a shared queue hands them to whichever worker is free first) and reps
    differ only in how far they get. With ``exact_output`` every request without its own length
    is sent as one of ``max_tokens`` (the adapter's exact-length fields, where the server has them):
    its output length is the same every rep, not where sampling met an end of sequence.

    With ``conversations`` (each a list of item indices, turn by turn) the pass is multi-turn:
    the next draw is a conversation, and the worker that drew it sends its turns in order on its
    connection, each after the item's ``think_s`` has passed since the previous turn's reply ended
    (``n_requests`` is then the number of conversations). A first turn is sent with
    ``first_turn``'s fields as well (a cache policy's per-request flush: the cache is emptied
    before a conversation, never between its turns). Each record says its conversation and turn.
    """

    base_url: str
    adapter: ServerClient
    items: Sequence[Item]
    concurrency: int
    n_requests: int
    max_tokens: int
    sampling: dict[str, Any]
    knobs: dict[str, Any]
    timeout: float
    arrivals: Sequence[float] | None = None
    seconds: float | None = None
    conversations: Sequence[Sequence[int]] | None = None
    first_turn: dict[str, Any] | None = None
    exact_output: bool = False


class _Pass:
    """One pass running on this thread's loop: its plan, the requests it has encoded, its records,
    and the figures it keeps on itself (loop lag, requests in flight)."""

    def __init__(self, plan: PassPlan, take: Callable[[], int | None] | None) -> None:
        self.plan = plan
        self.fields = plan.adapter.load_fields()
        self.target = Target.of(plan.base_url + plan.adapter.chat_path, plan.adapter.keep_alive)
        # Per item: the request encoded once per pass (sent many times) and its token limit.
        self.requests: dict[int, tuple[bytes, int | None]] = {}
        if take is None:
            indices = iter(range(plan.n_requests))

            def take() -> int | None:
                return next(indices, None)
        self.untimed = take
        self.records: list[RequestRecord] = []
        self.lag: list[float] = []
        self.in_flight = 0
        self.busy = 0.0  # the integral of in-flight over time
        self.idle: list[Client] = []  # open loop: kept connections free for the next arrival
        self.t0 = time.monotonic()

    def request(self, p: int) -> tuple[bytes, int | None]:
        if p not in self.requests:
            plan, item = self.plan, self.plan.items[p]
            own = (item["max_tokens"] if item["max_tokens"] is not None or not plan.exact_output
                   else plan.max_tokens)
            extra = self.fields if own is None else {**self.fields,
                                                     **plan.adapter.exact_length_fields(own)}
            flush = plan.first_turn if plan.first_turn and item.get("turn") == 0 else {}
            body = request_body(item["messages"], plan.max_tokens if own is None else own,
                                plan.sampling, {**plan.knobs, **flush}, extra)
            self.requests[p] = self.target.request(body), token_limit(body)
        return self.requests[p]

    def take(self) -> int | None:
        """The pass's next request index (None: no more), none once a rep sized by time is over."""
        if self.plan.seconds is not None and time.monotonic() - self.t0 >= self.plan.seconds:
            return None
        return self.untimed()

    def own_sequence(self, w: int, limit: float) -> Callable[[], int | None]:
        """Worker w's next request index in a rep sized by time: its own, the same every rep."""
        mine = iter(range(w, self.plan.n_requests, self.plan.concurrency))

        def take_own() -> int | None:
            return None if time.monotonic() - self.t0 >= limit else next(mine, None)
        return take_own

    def draw(self, w: int) -> Callable[[], int | None]:
        seconds = self.plan.seconds
        return self.own_sequence(w, seconds) if seconds is not None else self.take

    def client(self) -> Client:
        return Client(self.target, self.plan.adapter.keep_alive, self.plan.timeout)

    async def send(self, client: Client, p: int, rec: RequestRecord) -> None:
        """Item ``p`` on ``client``, recorded in ``rec`` (kept among the pass's records)."""
        body, limit = self.request(p)
        self.records.append(rec)
        self.in_flight += 1
        try:
            await client.send(body, rec, self.plan.adapter, limit)
        finally:
            self.in_flight -= 1

    async def worker(self, w: int) -> None:
        client = self.client()
        draw = self.draw(w)
        try:
            while (i := draw()) is not None:
                p = i % len(self.plan.items)
                await self.send(client, p, new_record(w, i, p))
        finally:
            client.close()

    async def talker(self, w: int, convs: Sequence[Sequence[int]]) -> None:
        """A worker of a multi-turn pass: conversation after conversation, turns in order."""
        client = self.client()
        draw, seconds = self.draw(w), self.plan.seconds
        try:
            while (j := draw()) is not None:
                ended: float | None = None
                for p in convs[j]:
                    item = self.plan.items[p]
                    if ended is not None:  # think, then the next turn; the timer may wake early
                        while (wait := ended + (item.get("think_s") or 0.0) - time.monotonic()) > 0:
                            await asyncio.sleep(wait)
                    if seconds is not None and time.monotonic() - self.t0 >= seconds:
                        return
                    rec = new_record(w, p, p)  # every item once a pass: its index is the item's
                    rec["conversation"] = item.get("conversation", j)
                    rec["turn"] = item.get("turn", 0)
                    await self.send(client, p, rec)
                    ended = time.monotonic()
        finally:
            client.close()

    async def arrival(self, i: int, scheduled: float) -> None:
        p = i % len(self.plan.items)
        rec = new_record(-1, i, p)  # no worker: each request is its own
        rec["scheduled"] = scheduled
        client = self.idle.pop() if self.idle else self.client()
        try:
            await self.send(client, p, rec)
        finally:
            if client.conn is not None:
                self.idle.append(client)
            else:
                client.close()

    async def dispatcher(self, arrivals: Sequence[float]) -> None:
        """Each request at its time, not when another ends: an open loop; cancelled, it cancels
        every request it sent that is still in flight."""
        sent: set[asyncio.Task[None]] = set()
        try:
            while (i := self.take()) is not None:
                at = self.t0 + arrivals[i]
                while (wait := at - time.monotonic()) > 0:  # the loop's timer may wake a little early
                    await asyncio.sleep(wait)
                task = asyncio.create_task(self.arrival(i, at))
                sent.add(task)
                task.add_done_callback(sent.discard)
            while sent:
                await asyncio.wait(set(sent))
        finally:
            for task in sent:
                task.cancel()
            await asyncio.gather(*sent, return_exceptions=True)
            for client in self.idle:
                client.close()

    async def sampler(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self.busy += self.in_flight * 0.05

    def tasks(self, workers: Sequence[int] | None) -> list[asyncio.Task[None]]:
        """The pass's senders: one dispatcher (open loop), or a talker (multi-turn) or a worker
        (closed loop) for each of its workers."""
        plan = self.plan
        ws = range(plan.concurrency) if workers is None else workers
        if plan.arrivals is not None:
            return [asyncio.create_task(self.dispatcher(plan.arrivals))]
        if plan.conversations is not None:
            convs = plan.conversations
            return [asyncio.create_task(self.talker(w, convs)) for w in ws]
        return [asyncio.create_task(self.worker(w)) for w in ws]

    async def run(self, stop: Callable[[], bool], workers: Sequence[int] | None) -> PassResult:
        cpu0, self.t0 = time.thread_time(), time.monotonic()
        mon = asyncio.create_task(_lag_monitor(self.lag))
        samp = asyncio.create_task(self.sampler())
        tasks = self.tasks(workers)
        while not all(t.done() for t in tasks):
            if stop():
                for t in tasks:
                    t.cancel()
            await asyncio.wait(tasks, timeout=0.1)
        await asyncio.gather(*tasks, return_exceptions=True)
        wall = time.monotonic() - self.t0
        # Stopped, not awaited to their next tick: the sampler's is 50 ms away, the pass ends now.
        mon.cancel()
        samp.cancel()
        await asyncio.gather(mon, samp, return_exceptions=True)
        lag_ms = sorted(x * 1000 for x in self.lag) or [0.0]
        p99 = lag_ms[min(len(lag_ms) - 1, int(0.99 * len(lag_ms)))]
        self.records.sort(key=lambda r: r["index"])
        return PassResult(self.records, p99, time.thread_time() - cpu0, wall,
                          self.busy / wall if wall > 0 else 0.0, stall_s=max(self.lag, default=0.0))


async def run_pass(plan: PassPlan, *, stop: Callable[[], bool] = lambda: False,
                   workers: Sequence[int] | None = None,
                   take: Callable[[], int | None] | None = None) -> PassResult:
    """The pass ``plan`` says, on this thread's running loop.

    ``stop()`` turning true (abort, SIGTERM, the window timeout) cancels the requests in flight;
    they are recorded as cancelled rather than left to finish. A shard runs ``workers`` (their
    numbers among all the pass's) and draws the next request index from ``take`` (None: no more);
    a multi-turn pass draws a conversation.
    """
    return await _Pass(plan, take).run(stop, workers)


_thread = threading.local()
# Passes running in this process now (places run theirs on threads of one engine): a full collection
# holds the interpreter for its whole length, so it is made only when no other pass's loop would
# stall behind it (a stalled loop voids its rep as client stalled).
_passes = 0
_passes_lock = threading.Lock()


def run_on_loop(coro: Coroutine[Any, Any, PassResult]) -> PassResult:
    """Run a pass on this thread's uvloop loop, made once: a fresh loop per pass set up and tore
    down libuv's io_uring rings each time (a few percent of a short pass's CPU). The objects that
    exist before the pass are frozen out of the cyclic GC meanwhile: its full collections
    scanned the whole engine's heap while chunks arrived."""
    loop = getattr(_thread, "loop", None)
    if loop is None or loop.is_closed():
        loop = _thread.loop = uvloop.new_event_loop()
    global _passes
    with _passes_lock:
        alone = _passes == 0
        _passes += 1
    # Collected first: frozen, an earlier pass's garbage (its records, a hostile server's huge
    # buffers) would be kept for good, pass after pass.
    if alone:
        gc.collect()
    gc.freeze()
    try:
        return loop.run_until_complete(coro)
    finally:
        with _passes_lock:
            _passes -= 1
        gc.unfreeze()
