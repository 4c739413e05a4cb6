"""engine.run.loadgen and engine.run.client: SSE framing, and failures recorded per request without
crashing the pass.

The failure cases use a fake server: a real llama-server cannot be made to send a malformed chunk,
cut a stream mid-way, answer one request in four with HTTP 500 or send a usage count that is not a
count on cue (fault injection). The happy path is tested against the real testbed server in
test_run.py and test_leak.py; bad server data in a whole campaign in
tests/integration/test_bad_server_campaign.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.campaign.sources.item import Item, plain_item
from engine.run import loadgen, shards
from engine.run.client import transport
from engine.run.client.http import Response, Unreadable
from engine.run.client.record import new_record
from engine.run.client.sse import sse_events as _events
from engine.run.client.transport import BULK, Connection
from engine.run.loadgen import PassPlan, PassResult, run_pass, shard_count
from engine.run.shards import measure_pass
from engine.servers import get_adapter
from engine.servers.client import request_body
from engine.servers.llamacpp import LlamaCppAdapter
from tests.sse import DONE, Reply, Request, SseServer, event


def test_events_frame_sse_across_reads() -> None:
    payloads, rest = _events(b'data: {"a":1}\n\ndata: x\r\ndata: y\r\n\r\ndata: [DO')
    assert payloads == [b'{"a":1}', b"x\ny"] and rest == b"data: [DO"
    payloads, rest = _events(rest + b"NE]\n\n")
    assert payloads == [b"[DONE]"] and rest == b""
    # Comments and other fields are not data; a \r\n split across two reads still frames.
    assert _events(b": keep-alive\n\nevent: e\ndata: 1\r")[0] == []
    assert _events(b"event: e\ndata: 1\r" + b"\n\r\n")[0] == [b"1"]


def test_request_body_is_explicit() -> None:
    body = request_body("hi", 16, {"temperature": 0, "seed": 1}, {"reasoning_effort": "low"})
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0 and body["seed"] == 1 and body["reasoning_effort"] == "low"
    assert body["messages"] == [{"role": "user", "content": "hi"}] and body["max_tokens"] == 16


GOOD = (event({"choices": [{"delta": {"content": "Hello"}}]})
        + event({"choices": [{"delta": {"content": " world"}, "finish_reason": "length"}]})
        + event({"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 3}}) + DONE)
FAULTS = ["good", "http500", "malformed", "cut", "nousage", "hang", "usagestring", "usagehuge",
          "choicesstring"]


async def faults(req: Request, reply: Reply) -> None:
    """Answers each request with the fault its prompt names (FAULTS): good, HTTP 500, malformed
    chunk, cut mid-stream, no usage, hang, a usage count that is a string or 10^12, choices not a
    list; every stream to the connection's close."""
    fault = req.json()["messages"][0]["content"]
    first = event({"choices": [{"delta": {"content": "a"}}]})
    if fault == "http500":
        reply.send(500, b'{"error": "boom"}', close=True)
        return
    reply.stream()
    if fault == "malformed":
        reply.write(first + b"data: {not json\n\n")
    elif fault == "cut":
        reply.write(first)
    elif fault == "nousage":
        reply.write(first + DONE)
    elif fault in ("usagestring", "usagehuge"):
        tokens = "2" if fault == "usagestring" else 10**12
        reply.write(first + event({"choices": [], "usage": {"completion_tokens": tokens}}) + DONE)
    elif fault == "choicesstring":
        reply.write(event({"choices": "oops"}) + DONE)
    elif fault == "hang":
        reply.write(first)
        await reply.drain()
        await asyncio.sleep(30)
    else:
        reply.write(GOOD)


@pytest.fixture
def faulty() -> Iterator[SseServer]:
    server = SseServer(faults).start()
    yield server
    server.stop()


def test_failures_are_recorded_per_request(faulty: SseServer) -> None:
    prompts = FAULTS
    res = asyncio.run(run_pass(PassPlan(faulty.url, get_adapter("llamacpp"),
                                        [plain_item(p) for p in prompts], concurrency=3,
                                        n_requests=len(prompts), max_tokens=8,
                                        sampling={"temperature": 0}, knobs={}, timeout=3.0)))
    by = {prompts[r["prompt_index"]]: r for r in res.records}
    assert len(res.records) == len(prompts)
    good = by["good"]
    assert good["error"] is None and good["completion_tokens"] == 2 and good["chunks"] == 3
    assert good["finish_reason"] == "length" and good["text_chars"] == len("Hello world")
    assert good["first_token"] is not None and len(good["gaps_ms"]) == 1
    errors = {prompt: str(r["error"]) for prompt, r in by.items()}
    assert errors["http500"].startswith("HTTP 500") and "boom" in errors["http500"]
    assert errors["malformed"].startswith("malformed stream chunk") and by["malformed"]["chunks"] == 1
    assert by["cut"]["error"] == "no usage in the stream: completion tokens unknown"
    assert by["nousage"]["error"] == "no usage in the stream: completion tokens unknown"
    assert "Timeout" in errors["hang"]
    assert by["usagestring"]["error"] == "bad stream chunk: usage.completion_tokens is '2', not a count"
    assert by["usagehuge"]["error"] == ("usage says 1000000000000 completion tokens, more than the "
                                        "request's limit of 8")
    assert by["choicesstring"]["error"] == "bad stream chunk: choices is 'oops', not a list"
    assert all(r["end"] >= r["start"] for r in res.records)


# -- the hot path and the bulk parse --------------------------------------------------------------


def _chunked(body: bytes, cuts: list[int]) -> tuple[bytes, list[int]]:
    """``body`` as an HTTP/1.1 chunked response cut into chunks at ``cuts``, and where each body
    byte lies in it (the oracle for timestamps)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw = bytearray(head)
    where: list[int] = []
    points = sorted({c for c in cuts if 0 < c < len(body)})
    for a, b in zip([0, *points], [*points, len(body)], strict=True):
        if a == b:
            continue
        raw += b"%x;ext=1\r\n" % (b - a) if a % 3 == 1 else b"%x\r\n" % (b - a)
        where += range(len(raw), len(raw) + b - a)
        raw += body[a:b] + b"\r\n"
    raw += b"0\r\nX-Trailer: 1\r\n\r\n" if len(points) % 2 else b"0\r\n\r\n"
    return bytes(raw), where


TOKENS = ["Hello", " wor", "ld", "!", " How", " are", " you", "?"]


def _stream_body(line_end: bytes) -> bytes:
    events = [event({"choices": [{"delta": {"content": t}}]}) for t in TOKENS]
    events.append(event({"choices": [{"delta": {}, "finish_reason": "length"}],
                        "usage": {"completion_tokens": len(TOKENS), "prompt_tokens": 3},
                        "timings": {"draft_n": 6, "draft_n_accepted": 4}}))
    events.append(b": a comment\n\n" + b"data: [DONE]\n\n")
    return b"".join(events).replace(b"\n", line_end)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([b"\n", b"\r\n"]), st.lists(st.integers(0, 2000), max_size=20),
       st.lists(st.integers(0, 2500), max_size=30), st.lists(st.integers(1, 5), max_size=30))
def test_bulk_parse_gives_each_token_the_arrival_time_of_its_read(
        line_end: bytes, chunk_cuts: list[int], read_cuts: list[int], batches: list[int]) -> None:
    """However the server chunks the stream, the network cuts it and the reads are batched for
    the bulk parse, each token's time is the arrival time of the read that completed its event."""
    body = _stream_body(line_end)
    raw, where = _chunked(body, chunk_cuts)
    points = sorted({c for c in read_cuts if 0 < c < len(raw)})
    reads = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    read_of = [k for k, r in enumerate(reads) for _ in r]  # raw byte -> the read it came in
    resp = Response(new_record(0, 0, 0), get_adapter("llamacpp"))
    k = 0
    for size in [*batches, len(reads)]:
        if k < len(reads):
            resp.feed(reads[k:k + size], [float(t) for t in range(k, k + size)][:len(reads) - k])
            k += size
    assert resp.complete and resp.keep
    resp.events.finish(resp.end, 8)
    record = resp.record
    # The oracle: the time of the read holding the last byte of each token's event.
    ends, off = [], 0
    for one in body.split(line_end * 2)[:len(TOKENS)]:
        off += len(one) + 2 * len(line_end)
        ends.append(float(read_of[where[off - 1]]))
    assert record["error"] is None and record["completion_tokens"] == len(TOKENS)
    assert record["chunks"] == len(TOKENS) + 1 and record["finish_reason"] == "length"
    assert record["text_chars"] == len("".join(TOKENS))
    assert record["acceptance"] == {"drafted": 6, "accepted": 4}
    assert record["first_token"] == ends[0]
    assert record["gaps_ms"] == [round((b - a) * 1000, 2) for a, b in zip(ends, ends[1:], strict=False)]
    assert record["end"] == float(len(reads) - 1)


@pytest.mark.parametrize(("tail", "keep"), [(b"", True), (b"xyz", False),
                                             (b"HTTP/1.1 200 OK\r\n", False)],
                         ids=["nothing", "garbage", "another response"])
def test_bytes_past_the_end_of_a_response_leave_it_whole_and_the_connection_unkept(
        tail: bytes, keep: bool) -> None:
    raw, _ = _chunked(_stream_body(b"\n"), [40, 300])
    resp = Response(new_record(0, 0, 0), get_adapter("llamacpp"))
    resp.feed([raw[:200], raw[200:] + tail], [1.0, 2.0])
    assert resp.complete and resp.keep is keep and resp.status == 200 and resp.mode == "chunked"
    assert resp.events.ended and resp.events.chunks == len(TOKENS) + 1


@pytest.mark.parametrize(("raw", "why"), [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "HTTP/"),
    (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000, "no end of the response head in 70025 bytes"),
], ids=["chunk size", "not http", "endless head"])
def test_an_answer_that_is_not_http_is_unreadable(raw: bytes, why: str) -> None:
    with pytest.raises(Unreadable, match=why):
        Response(new_record(0, 0, 0), get_adapter("llamacpp")).feed([raw], [1.0])


def test_the_hot_path_keeps_bytes_and_times_and_parses_at_the_end() -> None:
    """Per network read: a timestamp and the bytes. Nothing is parsed until the response ends
    (or BULK bytes wait); then the whole record at once, in the loop's parser's next turn."""
    raw, _ = _chunked(_stream_body(b"\n"), list(range(0, 2000, 40)))
    head = raw.index(b"\r\n\r\n") + 4
    reads = [raw[:head]] + [raw[i:i + 50] for i in range(head, len(raw), 50)]
    assert len(raw) < BULK and not any(r.endswith(b"\r\n\r\n") for r in reads[1:-1])
    conn = Connection()
    resp = Response(new_record(0, 0, 0), get_adapter("llamacpp"))

    async def exchange() -> None:
        conn.response, conn.waiter = resp, asyncio.get_running_loop().create_future()
        conn.check_at = 1
        conn.data_received(reads[0])  # the head: read at once, for the framing
        assert resp.status == 200 and resp.mode == "chunked"
        for data in reads[1:-1]:
            conn.data_received(data)
        assert conn.reads == reads[1:-1] and len(conn.times) == len(reads) - 2
        assert conn.times == sorted(conn.times)
        assert resp.events.chunks == 0 and resp.received == len(reads[0])  # nothing parsed
        conn.data_received(reads[-1])
        assert not conn.waiter.done() and conn.queued  # its turn comes when the loop turns
        await asyncio.wait_for(conn.waiter, 5)
        assert resp.complete and conn.reads == [] and not conn.queued
        assert resp.events.chunks == len(TOKENS) + 1

    asyncio.run(exchange())


def test_streams_ending_together_are_parsed_in_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of equal requests ends in the same loop iteration: their parses take turns, the
    loop reading sockets and running timers between them, rather than holding it for all."""
    monkeypatch.setattr(transport, "SLICE", 0.0)  # one connection a turn
    raw, _ = _chunked(_stream_body(b"\n"), list(range(0, 2000, 40)))
    head = raw.index(b"\r\n\r\n") + 4
    conns = [Connection() for _ in range(10)]
    resps = [Response(new_record(0, i, 0), get_adapter("llamacpp")) for i in range(10)]

    async def together() -> None:
        loop = asyncio.get_running_loop()
        waiters: list[asyncio.Future[None]] = []
        for conn, resp in zip(conns, resps, strict=True):
            conn.response, conn.waiter = resp, loop.create_future()
            waiters.append(conn.waiter)
            conn.check_at = 1
            conn.data_received(raw[:head])
        for conn in conns:
            conn.data_received(raw[head:])  # every response's body and end at once
        await asyncio.sleep(0)
        parsed = sum(r.complete for r in resps)
        assert 1 <= parsed < 10, parsed  # the loop turned after the first, not after all
        await asyncio.wait_for(asyncio.gather(*waiters), 5)
        assert all(r.complete and r.events.chunks == len(TOKENS) + 1 for r in resps)

    asyncio.run(together())


def test_a_long_stream_is_parsed_in_bulk_not_held_whole() -> None:
    events = b"".join(event({"choices": [{"delta": {"content": "x" * 100}}]}) for _ in range(600))
    raw, _ = _chunked(events, list(range(0, len(events), 140)))
    conn = Connection()
    resp = Response(new_record(0, 0, 0), get_adapter("llamacpp"))

    async def stream() -> int:
        conn.response, conn.waiter = resp, asyncio.get_running_loop().create_future()
        conn.check_at = 1
        most = 0
        for i in range(0, len(raw) - 10, 100):
            conn.data_received(raw[i:i + 100])
            most = max(most, sum(map(len, conn.reads)))
            await asyncio.sleep(0)  # a read a loop turn, as they come from the network
        return most

    most = asyncio.run(stream())
    assert most <= BULK + 200 and resp.events.chunks > 500  # parsed as it came, in bulk


class KeepAlive:
    """Streams GOOD, chunked, on connections it keeps (fault injection, as a real server cannot be
    made to close on cue here): or, with ``drop``, closes each one right after its stream without
    saying so (what llama-server does); or, with ``refuse``, reads the second request on each
    connection and closes it unanswered (a server's idle timeout meeting the next request)."""

    def __init__(self, fault: str) -> None:
        self.fault = fault
        self.requests = self.refused = 0

    async def __call__(self, req: Request, reply: Reply) -> None:
        if self.fault == "refuse" and req.n == 1:
            self.refused += 1
            reply.close()
            return
        self.requests += 1
        raw, _ = _chunked(GOOD, [30, 90])
        reply.write(raw)
        if self.fault == "drop":
            reply.close()


class _KeepAlive(LlamaCppAdapter):
    keep_alive = True


@pytest.mark.parametrize("fault", ["none", "drop", "refuse"])
def test_keep_alive_where_the_server_keeps_and_closed_kept_connections_cost_no_request(
        fault: str) -> None:
    kept = KeepAlive(fault)
    server = SseServer(kept).start()
    try:
        res = measure_pass(PassPlan(server.url, _KeepAlive(),
                                    [plain_item("a"), plain_item("b")], 3, 12, 8, {"temperature": 0}, {},
                                    10.0))
        assert [r["index"] for r in res.records] == list(range(12))
        assert [r["error"] for r in res.records] == [None] * 12
        assert [r["completion_tokens"] for r in res.records] == [2] * 12
        assert all((t := r["first_token"]) is not None and r["start"] <= t <= r["end"] for r in res.records)
        # Kept: one connection per worker. Closed after each stream: one per request. Closed with
        # the next request unread: each worker's first request answered on its first connection,
        # every later one refused once and answered on a fresh connection; none lost, none twice.
        assert server.connections == {"none": 3, "drop": 12, "refuse": 12}[fault]
        assert kept.refused == {"none": 0, "drop": 0, "refuse": 9}[fault]
        assert kept.requests == 12
        # llama-server's adapter never asks to keep one.
        before, refused = server.connections, kept.refused
        closing = measure_pass(PassPlan(server.url, get_adapter("llamacpp"),
                                        [plain_item("a")], 2, 4, 8, {"temperature": 0}, {}, 10.0))
        assert [r["error"] for r in closing.records] == [None] * 4
        assert server.connections == before + 4 and kept.refused == refused
    finally:
        server.stop()


# -- shards ---------------------------------------------------------------------------------------


def test_shard_count_follows_concurrency_rate_and_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert shard_count(64, 256, 20_000, None) == 1
    assert shard_count(512, 256, 20_000, None) == min(2, cores)
    assert shard_count(8, 256, 20_000, 50_000) == min(3, cores)  # 50k chunks/s: three loops
    assert shard_count(1, 256, 20_000, 10**9) == 1  # never more shards than workers
    assert shard_count(4096, 1, 1.0, 10**9) == min(4096, cores)


def test_a_sharded_pass_merges_into_the_same_records(faulty: SseServer) -> None:
    """Two shard processes, three workers, seven requests: every request once, by index, the
    figures of each shard in the summary. The shards draw from one counter, so a shard that a busy
    host starts late may find the seven taken: no worker is promised a request."""
    prompts = ["good", "http500", "good"]
    url = faulty.url
    plan = PassPlan(url, get_adapter("llamacpp"), [plain_item(p) for p in prompts], 3, 7, 8,
                    {"temperature": 0}, {}, 5.0)
    one, two = measure_pass(plan), measure_pass(plan, shards=2)
    assert [r["index"] for r in two.records] == list(range(7))
    assert {r["worker"] for r in two.records} <= {0, 1, 2}
    fields = ("index", "prompt_index", "error", "completion_tokens", "chunks", "text_chars",
              "finish_reason")
    assert ([{k: r.get(k) for k in fields} for r in two.records]
            == [{k: r.get(k) for k in fields} for r in one.records])
    summary = two.summary()
    assert summary["shards"] == 2 and len(summary["shard_lag_p99_ms"]) == 2
    assert summary["shard_client_bound"] == [s.client_bound for s in two.shards]
    assert summary["lag_p99_ms"] == round(max(s.lag_p99_ms for s in two.shards), 3)
    assert two.client_cpu_s == pytest.approx(sum(s.client_cpu_s for s in two.shards))
    assert all(s.records == [] for s in two.shards)  # merged, not kept twice
    assert one.summary()["shards"] == 1 and one.summary()["shard_lag_p99_ms"] == [one.summary()["lag_p99_ms"]]


def test_client_bound_is_judged_per_shard() -> None:
    idle = PassResult([], 1.0, 0.1, 10.0, 1.0)
    busy = PassResult([], 1.0, 9.5, 10.0, 1.0)  # one loop at 95 % CPU: bound, whatever the other
    assert not idle.client_bound and busy.client_bound
    both = PassResult([], 1.0, 9.6, 10.0, 2.0, shards=[idle, busy])
    assert both.client_bound and both.summary()["shard_client_bound"] == [False, True]
    # Summed, 9.6 CPU s over 10 s of wall would pass as one loop at 96 %: not the test.
    assert not PassResult([], 1.0, 9.6, 10.0, 2.0, shards=[idle, idle]).client_bound


def test_a_loop_that_stopped_for_seconds_is_client_bound() -> None:
    """Issue 39's, still open in 49: the engine stopped about 6 s mid-rep (a SIGSTOP: no CPU spent,
    the lag's p99 over thousands of ticks unmoved) timed the client: its rep says so."""
    stopped = PassResult([], 1.0, 0.1, 20.0, 1.0, stall_s=6.0)
    assert stopped.stalled and stopped.client_bound and stopped.summary()["client_bound"] is True
    one_of_two = PassResult([], 1.0, 0.2, 20.0, 2.0, stall_s=6.0,
                            shards=[PassResult([], 1.0, 0.1, 20.0, 1.0),
                                    PassResult([], 1.0, 0.1, 20.0, 1.0, stall_s=6.0)])
    assert one_of_two.client_bound and one_of_two.summary()["shard_client_bound"] == [False, True]


def test_a_stopped_sharded_pass_cancels_every_shard(faulty: SseServer) -> None:
    t0 = time.monotonic()
    res = measure_pass(PassPlan(faulty.url, get_adapter("llamacpp"),
                                [plain_item("hang")], 2, 4, 8, {"temperature": 0}, {}, 30.0), shards=2,
                       stop=lambda: time.monotonic() - t0 > 1.0)
    assert time.monotonic() - t0 < 10
    assert len(res.records) == 2 and all(str(r["error"]).startswith("cancelled") for r in res.records)


def test_shard_processes_serve_pass_after_pass(faulty: SseServer) -> None:
    """The shards of a thread are kept between passes (a fork and a loop per shard per pass
    cost more than a short pass's chunks); a stop that reached a shard after its pass had ended
    does not end the next one."""
    url, adapter = faulty.url, get_adapter("llamacpp")
    t0 = time.monotonic()
    stopped = measure_pass(PassPlan(url, adapter, [plain_item("hang"), plain_item("good")], 2, 4, 8,
                                    {"temperature": 0}, {}, 30.0),
                           shards=2, stop=lambda: time.monotonic() - t0 > 1.0)
    assert any(r["error"] and r["error"].startswith("cancelled") for r in stopped.records)
    pids = [p.pid for p in shards._pools.shards.procs]
    res = measure_pass(PassPlan(url, adapter, [plain_item("good")], 2, 6, 8, {"temperature": 0}, {}, 5.0),
                       shards=2)
    assert [p.pid for p in shards._pools.shards.procs] == pids
    assert all(p.is_alive() for p in shards._pools.shards.procs)
    assert [(r["index"], r["error"], r["completion_tokens"]) for r in res.records] == \
           [(i, None, 2) for i in range(6)]


@pytest.mark.parametrize("shards", [1, 2])
def test_a_rep_sized_by_time_gives_each_worker_the_same_items_every_rep(
        faulty: SseServer, shards: int) -> None:
    """Worker w's k-th request is index k x C + w, whatever the timing: two reps of 0.3 s send each
    worker one sequence of items, and differ only in how far they get."""
    url = faulty.url
    items = [plain_item(p) for p in ("a", "b", "c", "d", "e")]
    plan = PassPlan(url, get_adapter("llamacpp"), items, 3, 100_000, 8, {"temperature": 0}, {}, 5.0,
                    seconds=0.3)
    reps = [measure_pass(plan, shards=shards) for _ in range(2)]
    for res in reps:
        assert res.records and all(r["error"] is None for r in res.records)
        assert all(r["worker"] == r["index"] % 3 and r["prompt_index"] == r["index"] % 5
                   for r in res.records)
    for w in range(3):
        seqs = [[r["prompt_index"] for r in res.records if r["worker"] == w] for res in reps]
        short, long = sorted(seqs, key=len)
        assert short and long[:len(short)] == short


def test_exact_output_sends_every_request_at_max_tokens_with_the_adapters_fields(
        faulty: SseServer, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[int, dict[str, Any]]] = []
    real = request_body

    def spy(messages: Any, max_tokens: int, sampling: dict[str, Any], knobs: dict[str, Any],
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
        sent.append((max_tokens, dict(extra or {})))
        return real(messages, max_tokens, sampling, knobs, extra)

    monkeypatch.setattr(loadgen, "request_body", spy)
    url = faulty.url
    items: list[Item] = [plain_item("a"), {**plain_item("b"), "max_tokens": 5}]
    plan = PassPlan(url, get_adapter("llamacpp"), items, 2, 2, 8, {"temperature": 0}, {}, 5.0)
    measure_pass(plan)
    assert sorted(sent, key=lambda s: s[0]) == [(5, {"ignore_eos": True}), (8, {})]
    sent.clear()
    measure_pass(dataclasses.replace(plan, exact_output=True))
    assert sorted(sent, key=lambda s: s[0]) == [(5, {"ignore_eos": True}), (8, {"ignore_eos": True})]
