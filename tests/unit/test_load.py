"""engine.run.load: SSE framing, and failures recorded per request without crashing the pass.

The failure cases use a fake server: a real llama-server cannot be made to send a malformed chunk,
cut a stream mid-way, answer one request in four with HTTP 500 or send a usage count that is not a
count on cue (fault injection). The happy path is tested against the real testbed server in
test_run.py and test_leak.py; bad server data in a whole campaign in
tests/integration/test_bad_server_campaign.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator

import pytest

from engine.run.load import _events, run_pass
from engine.runtime.base import free_port
from engine.servers import get_adapter
from engine.servers.client import request_body


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


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


GOOD = (_sse({"choices": [{"delta": {"content": "Hello"}}]})
        + _sse({"choices": [{"delta": {"content": " world"}, "finish_reason": "length"}]})
        + _sse({"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 3}}) + b"data: [DONE]\n\n")


class FaultyServer(threading.Thread):
    """Answers each request with the fault its prompt names: good, HTTP 500, malformed chunk, cut
    mid-stream, no usage, hang, a usage count that is a string or 10^12, choices not a list."""

    FAULTS = ["good", "http500", "malformed", "cut", "nousage", "hang", "usagestring", "usagehuge",
              "choicesstring"]

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.port, self.n = free_port(), 0
        self.ready = threading.Event()
        self.loop = asyncio.new_event_loop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n")
                      if h.lower().startswith(b"content-length:"))
        body = json.loads(await reader.readexactly(length))
        fault = body["messages"][0]["content"]
        ok = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        if fault == "http500":
            msg = b'{"error": "boom"}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(msg), msg))
        elif fault == "malformed":
            writer.write(ok + _sse({"choices": [{"delta": {"content": "a"}}]}) + b"data: {not json\n\n")
        elif fault == "cut":
            writer.write(ok + _sse({"choices": [{"delta": {"content": "a"}}]}))
        elif fault == "nousage":
            writer.write(ok + _sse({"choices": [{"delta": {"content": "a"}}]}) + b"data: [DONE]\n\n")
        elif fault in ("usagestring", "usagehuge"):
            tokens = "2" if fault == "usagestring" else 10**12
            usage = _sse({"choices": [], "usage": {"completion_tokens": tokens}})
            writer.write(ok + _sse({"choices": [{"delta": {"content": "a"}}]}) + usage + b"data: [DONE]\n\n")
        elif fault == "choicesstring":
            writer.write(ok + _sse({"choices": "oops"}) + b"data: [DONE]\n\n")
        elif fault == "hang":
            writer.write(ok + _sse({"choices": [{"delta": {"content": "a"}}]}))
            await writer.drain()
            await asyncio.sleep(30)
        else:
            writer.write(ok + GOOD)
        await writer.drain()
        writer.close()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
            self.ready.set()
            async with server:
                await server.serve_forever()

        with contextlib.suppress(RuntimeError, asyncio.CancelledError):  # stopped
            self.loop.run_until_complete(main())


@pytest.fixture
def faulty() -> Iterator[FaultyServer]:
    server = FaultyServer()
    server.start()
    assert server.ready.wait(10)
    yield server
    for task in asyncio.all_tasks(server.loop):
        server.loop.call_soon_threadsafe(task.cancel)


def test_failures_are_recorded_per_request(faulty: FaultyServer) -> None:
    prompts = FaultyServer.FAULTS
    res = asyncio.run(run_pass(f"http://127.0.0.1:{faulty.port}", get_adapter("llamacpp"), prompts,
                               concurrency=3, n_requests=len(prompts), max_tokens=8,
                               sampling={"temperature": 0}, knobs={}, timeout=3.0))
    by = {prompts[r["prompt_index"]]: r for r in res.records}
    assert len(res.records) == len(prompts)
    good = by["good"]
    assert good["error"] is None and good["completion_tokens"] == 2 and good["chunks"] == 3
    assert good["finish_reason"] == "length" and good["text_chars"] == len("Hello world")
    assert good["first_token"] is not None and len(good["gaps_ms"]) == 1
    assert by["http500"]["error"].startswith("HTTP 500") and "boom" in by["http500"]["error"]
    assert by["malformed"]["error"].startswith("malformed stream chunk") and by["malformed"]["chunks"] == 1
    assert by["cut"]["error"] == "no usage in the stream: completion tokens unknown"
    assert by["nousage"]["error"] == "no usage in the stream: completion tokens unknown"
    assert "Timeout" in by["hang"]["error"]
    assert by["usagestring"]["error"] == "bad stream chunk: usage.completion_tokens is '2', not a count"
    assert by["usagehuge"]["error"] == ("usage says 1000000000000 completion tokens, more than the "
                                        "request's limit of 8")
    assert by["choicesstring"]["error"] == "bad stream chunk: choices is 'oops', not a list"
    assert all(r["end"] >= r["start"] for r in res.records)
