"""A FAKE OpenAI-style streaming server, for the tests and the benchmarks: HTTP/1.1 on one asyncio
loop, connections kept alive, each request answered by the caller's :data:`Answer`, which writes
what a server would (an SSE stream, chunked or to the connection's close; a JSON reply; an error)
or a fault no real server can be made to show on cue.

Its users: the fake llama-server of the component tier (tests/component/fakes.py), the load
generator's faults (tests/component/test_loadgen.py) and the server under the clients of
bench/client_bench.py, which runs it in a process of its own on uvloop (:meth:`SseServer.serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from engine.runtime.base import free_port

DONE = b"data: [DONE]\n\n"  # the last event of an OpenAI stream
LAST_CHUNK = b"0\r\n\r\n"  # the end of a chunked body


def event(obj: object) -> bytes:
    """One SSE event: ``data: <json>`` and the blank line that ends it."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    head: bytes  # the request line and the headers, as sent
    body: bytes
    n: int  # its place among the requests of its connection, from 0

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


class Reply:
    """What an answer writes to its connection with; ``keep``: the connection takes the next
    request after this one (a stream to the connection's close ends it)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer, self.keep = writer, True

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    async def drain(self) -> None:
        await self.writer.drain()

    def send(self, status: int, body: bytes, content_type: str = "application/json",
             close: bool = False) -> None:
        """A whole reply, its length said."""
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n")
        self.keep = self.keep and not close
        self.write(head.encode() + body)

    def json(self, status: int, body: object) -> None:
        self.send(status, json.dumps(body).encode())

    def stream(self, chunked: bool = False) -> None:
        """The head of a 200 event stream: chunked (the connection kept), or to its close."""
        self.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   + (b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Connection: close\r\n\r\n"))
        self.keep = self.keep and chunked

    def close(self) -> None:
        """The connection ends after this reply (what was written is sent)."""
        self.keep = False


Answer = Callable[[Request, Reply], Awaitable[None]]


class SseServer:
    """The server: on a thread of its own (:meth:`start`, :meth:`stop`), or the body of a process
    (``uvloop.run(server.serve())``). ``connections``: how many it accepted."""

    def __init__(self, answer: Answer, port: int = 0) -> None:
        self.answer = answer
        self.port = port or free_port()
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None  # a connection's callback runs as a task
        self._tasks.add(task)
        try:
            for n in itertools.count():  # keep-alive: one request after the other
                head = await reader.readuntil(b"\r\n\r\n")
                line, *fields = head.split(b"\r\n")
                method, path = line.split(b" ")[:2]
                length, close = 0, False
                for f in fields:
                    low = f.lower()
                    if low.startswith(b"content-length:"):
                        length = int(f.split(b":")[1])
                    elif low.startswith(b"connection:") and b"close" in low:
                        close = True
                body = await reader.readexactly(length)
                reply = Reply(writer)
                await self.answer(Request(method.decode(), path.decode(), head, body, n), reply)
                await writer.drain()
                if close or not reply.keep:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # the client went, or sent what no HTTP client does
        finally:
            self._tasks.discard(task)
            writer.close()

    async def serve(self, ready: Callable[[], object] = lambda: None) -> None:
        """Serve on the running loop until :meth:`stop`; ``ready()`` once it listens."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port, backlog=4096)
        ready()
        async with self._server:
            with contextlib.suppress(asyncio.CancelledError):  # stop() closed it
                await self._server.serve_forever()

    def start(self) -> SseServer:
        """Serving on a thread of its own, once it listens."""
        up = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self.serve(up.set))
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, daemon=True, name=f"fake-sse-{self.port}")
        self._thread.start()
        if not up.wait(10):
            raise RuntimeError(f"the fake server on port {self.port} did not start")
        return self

    def stop(self) -> None:
        """From any thread, its own included: no more connections, and every open one cut, as a
        killed server's are."""
        loop, server = self._loop, self._server
        if loop is None or server is None or loop.is_closed():
            return

        def end() -> None:
            server.close()
            for t in list(self._tasks):
                t.cancel()

        if self._thread is threading.current_thread():
            end()
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
            loop.call_soon_threadsafe(end)
        if self._thread is not None:
            self._thread.join(10)
