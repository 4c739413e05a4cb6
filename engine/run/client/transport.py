"""The load generator's transport: a connection per worker (kept between its requests where the
adapter and the server keep it), the least work per network read, and the parse scheduled in
turns on the loop.

On each read the connection keeps the arrival time and the bytes, nothing else
(:meth:`Connection.data_received`). The HTTP framing, the SSE events, the JSON and the record's
fields are worked out in bulk: once the response has ended, or when a long one has buffered
:data:`BULK` bytes (which bounds both the memory a stream holds and the work done at once on the
loop).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque

from engine.record.request import RequestRecord
from engine.run.client.http import CLOSED, Response, Target, Unreadable
from engine.servers.client import ServerClient

_now = time.monotonic
# The errors a server's death leaves in its requests: its connections closed, reset or refused
# (an HTTP status or a stream's own error comes from a server that is still there).
_LOST = (CLOSED, "ConnectionResetError", "ConnectionRefusedError", "ConnectionAbortedError",
         "BrokenPipeError")


def connection_lost(error: str | None) -> bool:
    """Whether a request's error is its connection lost, as when its server dies."""
    return bool(error) and str(error).startswith(_LOST)


# Parse a stream's buffered bytes in bulk past this size: about a hundred events, a fraction of a
# millisecond of work on the loop (which delays every other stream's timestamps as long), and a
# long stream never holds more than this unparsed.
BULK = 1 << 14
# Parse work is done in turns of at most about this long, the loop polling its sockets and timers
# between them: a batch of equal requests decodes in lockstep, so many streams reach their bulk
# size, or their end, in the same loop iteration; parsed there all at once they held the loop for
# tens of milliseconds (256 paced streams: event-loop lag p99 20 ms on a 16-core host), and every
# other read's arrival time waited as long.
SLICE = 0.001
CONNECT_TIMEOUT = 10.0
_END = b"\r\n\r\n"  # the last bytes of a chunked response (after the last chunk, or the trailers)


class _Parser:
    """A loop's connections with bytes to parse, parsed in turns: one connection's batch at a
    time, yielding to the loop after :data:`SLICE` seconds of them."""

    def __init__(self) -> None:
        self.queue: deque[Connection] = deque()
        self.task: asyncio.Task[None] | None = None  # held: a running task needs a reference

    def add(self, conn: Connection) -> None:
        self.queue.append(conn)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self.queue:
                until = _now() + SLICE
                while True:  # at least one connection a turn
                    conn = self.queue.popleft()
                    conn.queued = False
                    if conn.reads:  # else a timeout, cancel or close parsed them meanwhile
                        conn._advance()
                    if not self.queue or _now() >= until:
                        break
                await asyncio.sleep(0)
        finally:
            self.task = None
            for conn in self.queue:  # the loop is going: they are parsed where they end
                conn.queued = False
            self.queue.clear()


_parsers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Parser] = weakref.WeakKeyDictionary()


def _parser() -> _Parser:
    loop = asyncio.get_running_loop()
    if (p := _parsers.get(loop)) is None:
        p = _parsers[loop] = _Parser()
    return p



class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, one request at a time. The hot path is :meth:`data_received`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reads: list[bytes] = []
        self.times: list[float] = []
        self.size = 0  # bytes received on this connection
        self.check_at = 0  # parse once ``size`` reaches this (the head, every read of a length, BULK)
        self.response: Response | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.queued = False  # waiting for its turn with the loop's parser

    # The hot path: an arrival time, the bytes, and a test for the end of a chunked response
    # (whose last four bytes are always CRLF CRLF; a read of fewer could be its last piece). The
    # head is read at once (a status decides what follows); the body waits its turn to be parsed.
    def data_received(self, data: bytes) -> None:
        self.times.append(_now())
        self.reads.append(data)
        self.size += len(data)
        if self.size >= self.check_at or data.endswith(_END) or len(data) < 4:
            if self.response is not None and self.response.status and not self.queued:
                self.queued = True
                _parser().add(self)
            elif not self.queued:
                self._advance()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream connection: a Transport

    def eof_received(self) -> bool:
        self._advance(eof=True)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._advance(eof=True)

    def _advance(self, eof: bool = False) -> None:
        resp, waiter = self.response, self.waiter
        if eof:
            self.closed = True
        if resp is None or waiter is None or waiter.done():
            self.reads, self.times = [], []
            if not eof:  # bytes no request asked for: this connection is done
                self.close()
            return
        self.flush()
        if eof:
            resp.eof()
        if resp.complete or resp.events.ended and resp.events.record.get("error") or eof:
            waiter.set_result(None)
        elif not resp.status or resp.mode == "length":
            # Until the head is complete, then for a body of a length (an error's answer, not a
            # stream's), read by read: its end is where llhttp finds it.
            self.check_at = self.size + 1
        else:
            self.check_at = self.size + BULK

    def flush(self) -> None:
        """Parse what has arrived into the response (at its end, or in bulk)."""
        resp = self.response
        if resp is None or not self.reads:
            return
        reads, times = self.reads, self.times
        self.reads, self.times = [], []
        try:
            resp.feed(reads, times)
        except Exception as e:  # noqa: BLE001 - whatever the bytes, the request's error, not the loop's
            why = str(e) if isinstance(e, Unreadable) else f"{type(e).__name__}: {e}"
            resp.events.fail(f"unreadable answer: {why}"[:300])
            self.close()

    async def exchange(self, request: bytes, resp: Response) -> None:
        """Send the request and wait until its response has ended (or failed)."""
        assert self.transport is not None
        self.response = resp
        self.waiter = asyncio.get_running_loop().create_future()
        self.check_at = self.size + 1
        self.transport.write(request)
        await self.waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Client:
    """One load worker's HTTP client: its connection is kept between its requests where the
    server keeps it (``keep_alive``), else every request opens its own."""

    def __init__(self, target: Target, keep_alive: bool, timeout: float) -> None:
        self.target, self.keep_alive, self.timeout = target, keep_alive, timeout
        self.conn: Connection | None = None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, conn = await loop.create_connection(
                    Connection, self.target.host, self.target.port, ssl=self.target.tls)
        except TimeoutError:
            raise ConnectionError(f"no connection within {CONNECT_TIMEOUT:g} s") from None
        return conn

    async def send(self, request: bytes, record: RequestRecord, adapter: ServerClient,
                   limit: int | None) -> None:
        """One request into its record: fields, or the error, never an exception (but a cancel)."""
        record["start"] = _now()
        resp = Response(record, adapter)
        conn = None
        try:
            async with asyncio.timeout(self.timeout):
                conn, reused = self.conn, True
                if conn is None or conn.closed:
                    conn, reused = await self._connect(), False
                self.conn = conn
                await conn.exchange(request, resp)
                if reused and not resp.received and conn.closed:
                    # The server closed the kept-alive connection before reading this request
                    # (an idle timeout, a server that closes after each stream): it never
                    # answered, so the request goes again, once, on a fresh connection, and is
                    # sent when it goes there.
                    record["error"], resp = None, Response(record, adapter)
                    record["start"] = _now()
                    self.conn = conn = await self._connect()
                    await conn.exchange(request, resp)
        except TimeoutError:
            resp.events.fail(f"TimeoutError: no complete answer within {self.timeout:g} s")
        except OSError as e:  # refused, reset, TLS
            resp.events.fail(f"{type(e).__name__}: {e}"[:300])
        except asyncio.CancelledError:
            resp.events.fail("cancelled: the pass was stopped (operator abort or window timeout)")
            raise
        finally:
            if conn is not None:
                conn.flush()  # what arrived before a timeout or a cancel is still the record's
                conn.response = conn.waiter = None
            if (error := resp.error()) is not None:
                resp.events.fail(error)
            done = resp.complete and resp.keep and not record.get("error")
            if conn is not None and not (done and self.keep_alive and not conn.closed):
                conn.close()
                self.conn = None
            resp.events.finish(resp.end if resp.complete else _now(), limit)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
