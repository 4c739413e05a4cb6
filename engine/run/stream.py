"""One streamed chat request on a raw HTTP/1.1 connection, with the least work per network read.

On each read the connection keeps the arrival time and the bytes, nothing else
(:meth:`Connection.data_received`). The HTTP framing, the SSE events, the JSON and the record's
fields (tokens, gaps, finish reason, acceptance) are worked out in bulk: once the response has
ended, or when a long one has buffered :data:`BULK` bytes (which bounds both the memory a stream
holds and the work done at once on the loop). Each SSE event keeps the arrival time of the read
that completed it, so a timestamp is when the bytes arrived, not when the parser reached them.

Why not aiohttp: its StreamReader runs Python code for every HTTP chunk (feed, wake the reader,
slice), and servers send one chunk per token; that alone cost more per chunk than the whole of this
client (bench/client_bench.py). uvloop calls :meth:`Connection.data_received` from C once per read,
however many chunks the read holds.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
import weakref
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

import orjson

from engine.servers.client import ServerClient, cached_tokens, tls_context
from engine.servers.data import (
    PARSE_ERRORS,
    BadServerData,
    bad_data,
    mapping,
    optional_count,
    show,
    text,
)

_now = time.monotonic
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
MAX_HEAD = 1 << 16  # a response head longer than this is not an answer
CONNECT_TIMEOUT = 10.0
# A server may batch tokens into one chunk (speculative steps, a stream interval), but not
# thousands: a count beyond this per chunk is not a count the stream carried.
MAX_TOKENS_PER_CHUNK = 1024
_CR = re.compile(rb"\r\n?")
_END = b"\r\n\r\n"  # the last bytes of a chunked response (after the last chunk, or the trailers)


class Unreadable(Exception):
    """The bytes are not an HTTP/1.1 response: the request is an error, the connection dropped."""


@dataclass(frozen=True)
class Target:
    """Where the load requests go: one URL, its connection parameters and its request head."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    head: bytes  # request line and headers up to Content-Length's value

    @classmethod
    def of(cls, url: str, keep_alive: bool) -> Target:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{url!r} is not an http(s) URL")
        tls = tls_context() if u.scheme == "https" else None
        port = u.port or (443 if tls else 80)
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        # No Accept-Encoding: a compressed stream would arrive in bursts the server did not send.
        head = (f"POST {path} HTTP/1.1\r\nHost: {u.netloc}\r\nUser-Agent: ruler\r\n"
                f"Accept: text/event-stream\r\nContent-Type: application/json\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\nContent-Length: ").encode()
        return cls(u.hostname, port, tls, head)

    def request(self, body: dict[str, Any]) -> bytes:
        """The whole request, head and body, written at once (one write, one segment on loopback)."""
        data = json.dumps(body, separators=(",", ":")).encode()
        return self.head + b"%d\r\n\r\n" % len(data) + data


# -- the stream's events: SSE, JSON and the record ----------------------------------------------


def sse_events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events' data payloads in ``buf`` and the unfinished rest.

    Events end at a blank line; a payload of several ``data:`` lines is joined with newlines.
    Lines end in CRLF, LF or CR (the SSE spec); the rest comes back with its line ends already
    LF, so the events are the same wherever the network cut the stream.
    """
    if b"\r" in buf:
        held = b"\r" if buf.endswith(b"\r") else b""  # may be the first half of a CRLF
        buf = _CR.sub(b"\n", buf[:len(buf) - len(held)]) + held
    *events, rest = buf.split(b"\n\n")
    return [p for p in map(_payload, events) if p is not None], rest


def _payload(event: bytes) -> bytes | None:
    """The data of one SSE event (LF line ends), or None for an event without data."""
    if b"\n" not in event:  # the common event: one line
        return event[5:].lstrip(b" ") if event.startswith(b"data:") else None
    data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return (data[0] if len(data) == 1 else b"\n".join(data)) if data else None


def new_record(worker: int, index: int, prompt_index: int) -> dict[str, Any]:
    return {"worker": worker, "index": index, "prompt_index": prompt_index, "first_token": None,
            "completion_tokens": None, "chunks": 0, "error": None}


class Events:
    """A stream's SSE events into its record, fed body bytes with their reads' arrival times.

    Whatever the bytes, the outcome is the record's fields or its error, never an exception. The
    stream ends at ``[DONE]`` or at its first error; later events are not read. This runs once
    per chunk, in bulk: fast type checks on the shapes servers send, and the checkers of
    engine.servers.data to name the field of any other.
    """

    def __init__(self, record: dict[str, Any], adapter: ServerClient) -> None:
        self.record, self.adapter = record, adapter
        self.acceptance_fields = adapter.acceptance_fields
        self.rest = b""  # an unfinished event
        self.ended = False
        self.chunks = 0
        self.first: float | None = None  # when the first token arrived
        self.last = 0.0  # when the previous one did
        self.gaps: list[float] = []
        self.chars = 0

    def feed(self, data: bytes, pieces: list[tuple[int, int]], times: list[float],
             ends: list[int] | None) -> None:
        """The events completed by the body ``pieces`` of ``data`` (the joined reads; ``ends``:
        where each read ends in it, None for one read), each at the arrival time of the read its
        last byte came in."""
        if self.ended:
            return
        before = self.rest
        if len(pieces) == 1:
            a, b = pieces[0]
            body = data if a == 0 and b == len(data) else data[a:b]
        else:
            body = b"".join([data[a:b] for a, b in pieces])
        blob = before + body if before else body
        if b"\r" in blob:  # CR line ends: normalised read by read, as a CRLF may straddle two
            self._feed_cr(data, pieces, times, ends)
            return
        *events, self.rest = blob.split(b"\n\n")
        if not events:
            return
        # The usual stream: every event one "data:" line. Counted in C: no newline but the
        # separators', and a "data:" at every event's start; then no Python per event but a slice.
        n = len(events)
        if (blob.count(b"\n") == 2 * n + self.rest.count(b"\n")
                and blob.startswith(b"data:") + blob.count(b"\n\ndata:")
                - (self.rest.startswith(b"data:")) == n):
            payloads = [e[5:].lstrip(b" ") for e in events]
            if ends is None:
                self._read(payloads, [times[0]] * n)
                return
            offs = list(accumulate(len(e) + 2 for e in events))
        else:
            offs, payloads, off = [], [], 0
            for event in events:
                off += len(event) + 2
                if (p := _payload(event)) is not None:
                    payloads.append(p)
                    offs.append(off)
            if ends is None:
                self._read(payloads, [times[0]] * len(payloads))
                return
        # Each event's time: the read its last byte came in, through the piece that byte is in.
        body_ends = list(accumulate((b - a for a, b in pieces), initial=len(before)))
        stamps = []
        for off in offs:
            k = bisect_left(body_ends, off, 1)
            stamps.append(times[bisect_left(ends, pieces[k - 1][1] - (body_ends[k] - off))])
        self._read(payloads, stamps)

    def _feed_cr(self, data: bytes, pieces: list[tuple[int, int]], times: list[float],
                 ends: list[int] | None) -> None:
        starts = [0, *ends[:-1]] if ends else [0]
        payloads: list[bytes] = []
        stamps: list[float] = []
        for r0, r1, t in zip(starts, ends or [len(data)], times, strict=True):
            body = b"".join([data[max(a, r0):min(b, r1)] for a, b in pieces if a < r1 and b > r0])
            got, self.rest = sse_events(self.rest + body)
            payloads += got
            stamps += [t] * len(got)
        self._read(payloads, stamps)

    def _read(self, payloads: list[bytes], stamps: list[float]) -> None:
        """SSE data payloads into the record, until ``[DONE]`` or the stream's first error.

        One loop for a whole batch, its state in locals: this runs once per chunk."""
        record, loads, fields = self.record, orjson.loads, self.acceptance_fields
        chunks, chars, first, last, gap = self.chunks, self.chars, self.first, self.last, self.gaps.append
        try:
            for payload, now in zip(payloads, stamps, strict=True):
                if payload == b"[DONE]":
                    self.ended = True
                    return
                try:
                    chunk = loads(payload)
                except orjson.JSONDecodeError:
                    self.fail(f"malformed stream chunk: {payload[:200]!r}")
                    return
                if type(chunk) is not dict:
                    self.fail(f"malformed stream chunk (not an object): {payload[:200]!r}")
                    return
                if "error" in chunk:
                    self.fail(f"stream error: {json.dumps(chunk['error'])[:300]}")
                    return
                chunks += 1
                try:
                    choices = chunk.get("choices")
                    if choices:
                        if type(choices) is not list:
                            raise BadServerData(f"choices is {show(choices)}, not a list")
                        for i, choice in enumerate(choices):
                            if type(choice) is not dict:
                                choice = mapping(choice, f"choices[{i}]")
                            delta = choice.get("delta")
                            n = 0
                            if delta:
                                if type(delta) is not dict:
                                    delta = mapping(delta, f"choices[{i}].delta")
                                content = delta.get("content")
                                n = (len(content) if type(content) is str
                                     else len(text(content, "delta.content")))
                                reasoning = delta.get("reasoning_content")
                                if reasoning is not None:
                                    n += len(text(reasoning, "delta.reasoning_content"))
                            elif delta is not None:
                                mapping(delta, f"choices[{i}].delta")  # raises: not an object
                            if n:
                                chars += n
                                if first is None:
                                    first = now
                                else:
                                    gap(now - last)
                                last = now
                            if finish := choice.get("finish_reason"):
                                record["finish_reason"] = text(finish, "finish_reason")
                    elif choices is not None and type(choices) is not list:
                        raise BadServerData(f"choices is {show(choices)}, not a list")
                    if (usage := chunk.get("usage")) is not None:
                        self._usage(usage)
                    if fields and not fields.isdisjoint(chunk):
                        self._acceptance(chunk)
                except BadServerData as e:
                    self.fail(f"bad stream chunk: {e}"[:300])
                    return
        finally:
            self.chunks, self.chars, self.first, self.last = chunks, chars, first, last

    def _acceptance(self, chunk: dict[str, Any]) -> None:
        try:
            acc = self.adapter.request_acceptance(chunk)
        except PARSE_ERRORS as e:  # as engine.servers.data.reading, without a context per chunk
            raise bad_data(f"{self.adapter.name} acceptance fields", e) from e
        if acc:
            self.record["acceptance"] = acc

    def _usage(self, usage: Any) -> None:
        usage = mapping(usage, "usage")
        if usage:
            tokens = optional_count(usage.get("completion_tokens"), "usage.completion_tokens")
            if tokens is not None:
                self.record["completion_tokens"] = tokens
            self.record["prompt_tokens"] = optional_count(usage.get("prompt_tokens"), "usage.prompt_tokens")
            self.record["cached_tokens"] = cached_tokens(usage)

    def fail(self, error: str) -> None:
        if not self.record.get("error"):
            self.record["error"] = error
        self.ended = True

    def finish(self, end: float, limit: int | None) -> None:
        """The record once its stream ended: no usage or an implausible one is its error."""
        record = self.record
        record["end"] = end
        record["chunks"] = self.chunks
        record["first_token"] = self.first
        record["text_chars"] = self.chars
        record["gaps_ms"] = [round(g * 1000, 2) for g in self.gaps]
        if not record.get("error"):
            if record.get("completion_tokens") is None:
                record["error"] = "no usage in the stream: completion tokens unknown"
            else:
                record["error"] = implausible(record, limit)


def token_limit(body: dict[str, Any]) -> int | None:
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


# -- the HTTP response --------------------------------------------------------------------------


class Response:
    """One HTTP/1.1 response, parsed in bulk: the head, the framing (chunked, a length, or until
    the connection closes) and, for a 200, the SSE events into the record.

    A batch of reads is joined and de-chunked at once; the body keeps, per piece, where it lies
    in the joined reads, so each event still gets the arrival time of the read that completed it.
    """

    def __init__(self, record: dict[str, Any], adapter: ServerClient) -> None:
        self.events = Events(record, adapter)
        self.head = b""
        self.status = 0  # 0 until the head is complete
        self.mode = ""  # "chunked", "length" or "close"
        self.keep = False  # the connection may carry another request after this one
        self.left = 0  # chunked: data bytes left in the current chunk; length: body bytes left
        self.skip = 0  # chunked: bytes of the CRLF after a chunk's data still to come
        self.partial = b""  # chunked: an unfinished chunk-size line
        self.trailers = False  # chunked: past the last chunk, reading the trailer section
        self.complete = False  # the framing says the response has ended
        self.received = 0  # bytes of this response so far
        self.end = 0.0  # when its last byte arrived
        self.answer: list[bytes] = []  # a non-200 answer's body, for its error message

    @property
    def record(self) -> dict[str, Any]:
        return self.events.record

    def feed(self, reads: list[bytes], times: list[float]) -> None:
        """Reads in arrival order, with their arrival times; raises :class:`Unreadable`."""
        data = reads[0] if len(reads) == 1 else b"".join(reads)
        self.received += len(data)
        self.end = times[-1]
        i = 0
        if not self.status:
            i = self._head(data)
            if not self.status:
                return
        if self.complete:
            self.keep = self.keep and i == len(data)  # bytes past the end: not reusable
            return
        if self.mode == "chunked":
            pieces = self._dechunk(data, i)
        elif self.mode == "length":
            take = min(self.left, len(data) - i)
            pieces, self.left = [(i, i + take)], self.left - take
            self.complete = not self.left
            self.keep = self.keep and i + take == len(data)
        else:
            pieces = [(i, len(data))]
        if not pieces:
            return
        if self.status == 200:
            ends = list(accumulate(map(len, reads))) if len(reads) > 1 else None
            self.events.feed(data, pieces, times, ends)
        elif sum(map(len, self.answer)) < 4096:
            self.answer += [data[a:b] for a, b in pieces]

    def eof(self) -> None:
        """The connection closed: the end of a response framed by it, else the response is cut."""
        if self.complete:
            return
        if self.status and self.mode == "close":
            self.complete = True
            return
        self.events.fail("the server closed the connection before its answer ended"
                         if self.received else "the server closed the connection without answering")

    def error(self) -> str | None:
        """The error a finished exchange leaves in the record, beyond the stream's own."""
        if self.status and self.status != 200:
            return f"HTTP {self.status}: {b''.join(self.answer).decode('utf-8', 'replace')[:300]}"
        return None

    def _head(self, data: bytes) -> int:
        """Where the body starts in ``data`` once the head is complete (its bytes are kept until)."""
        before = len(self.head)
        self.head += data
        cut = self.head.find(b"\r\n\r\n")
        if cut < 0:
            if len(self.head) > MAX_HEAD:
                raise Unreadable(f"no end of the response head in {len(self.head)} bytes")
            return len(data)
        self._read_head(self.head[:cut])
        self.head = b""
        return cut + 4 - before

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        status = lines[0].split(" ", 2)
        if len(status) < 2 or not status[0].startswith("HTTP/1.") or not status[1].isdigit():
            raise Unreadable(f"not an HTTP/1.x status line: {show(lines[0])}")
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise Unreadable(f"not a header line: {show(line)}")
            name = name.strip().lower()
            fields[name] = f"{fields[name]}, {value.strip()}" if name in fields else value.strip()
        self.status = int(status[1])
        conn = fields.get("connection", "").lower()
        self.keep = "close" not in conn and (status[0] != "HTTP/1.0" or "keep-alive" in conn)
        if fields.get("transfer-encoding", "").lower().rsplit(",", 1)[-1].strip() == "chunked":
            self.mode = "chunked"
        elif "content-length" in fields:
            length = fields["content-length"]
            if not length.isdigit():
                raise Unreadable(f"Content-Length is {show(length)}")
            self.mode, self.left = "length", int(length)
            self.complete = not self.left
        else:
            self.mode, self.keep = "close", False

    def _dechunk(self, data: bytes, i: int) -> list[tuple[int, int]]:
        """The chunks' data in ``data[i:]``, as (start, end) pieces of it."""
        out = []
        n = len(data)
        left, skip = self.left, self.skip  # locals: this loop runs once per HTTP chunk
        while i < n:
            if left:  # inside a chunk's data
                j = min(n, i + left)
                out.append((i, j))
                left, i = left - (j - i), j
                if not left:
                    skip = 2
            elif skip:  # the CRLF after a chunk's data
                if skip == 2 and data.startswith(b"\r\n", i):
                    skip, i = 0, i + 2
                elif data[i:i + 1] == b"\r\n"[2 - skip:3 - skip]:
                    skip, i = skip - 1, i + 1
                else:
                    raise Unreadable(f"chunk data not followed by CRLF: {show(data[i:i + 8])}")
            elif self.complete:
                self.keep = False  # bytes past the end
                break
            else:
                if self.partial:  # a size line cut by the previous batch
                    held = len(self.partial)
                    line, j = self._line(self.partial + data[i:i + 1024])
                    if line is None:
                        break
                    i, self.partial = i + j - held, b""
                else:
                    e = data.find(b"\r\n", i)
                    if e < 0:
                        line, i = self._line(data[i:])
                        break
                    line, i = data[i:e], e + 2
                if self.trailers:
                    self.complete = not line  # the blank line that ends the trailer section
                    continue
                size = line.split(b";", 1)[0].strip() if b";" in line else line
                if not size.isalnum():
                    raise Unreadable(f"not a chunk size: {show(line[:40])}")
                try:
                    left = int(size, 16)
                except ValueError:
                    raise Unreadable(f"not a chunk size: {show(line[:40])}") from None
                if not left:
                    self.trailers = True
                elif data.startswith(b"\r\n", i + left):  # the whole chunk is here: the usual
                    out.append((i, i + left))
                    left, i = 0, i + left + 2
        self.left, self.skip = left, skip
        return out

    def _line(self, buf: bytes) -> tuple[bytes | None, int]:
        """A size or trailer line at the start of ``buf`` and the offset after its CRLF; or None,
        keeping ``buf`` for the next batch."""
        e = buf.find(b"\r\n")
        if e < 0:
            if len(buf) > 1024:
                raise Unreadable(f"no end of a chunk-size line: {show(buf[:40])}")
            self.partial = buf
            return None, 0
        return buf[:e], e + 2


# -- the connection -----------------------------------------------------------------------------


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
        self.check_at = 0  # parse once ``size`` reaches this (the head, a length's end, BULK)
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
        self.transport = transport  # type: ignore[assignment]

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
        elif not resp.status:
            self.check_at = self.size + 1  # until the head is complete
        else:
            self.check_at = self.size + (min(BULK, resp.left) if resp.mode == "length" else BULK)

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

    async def send(self, request: bytes, record: dict[str, Any], adapter: ServerClient,
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
                    # answered, so the request goes again, once, on a fresh connection.
                    record["error"], resp = None, Response(record, adapter)
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
