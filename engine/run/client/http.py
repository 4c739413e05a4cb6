"""HTTP/1.1 on the load generator's side: the request (:class:`Target`) and the response's
framing (:class:`Response`: the head; chunked, a length, or until the connection closes), parsed
in bulk, the body of a 200 going to the stream's events."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

from engine.record.request import RequestRecord
from engine.run.client.record import Events
from engine.servers.client import ServerClient, tls_context
from engine.servers.data import show

MAX_HEAD = 1 << 16  # a response head longer than this is not an answer


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


class Response:
    """One HTTP/1.1 response, parsed in bulk: the head, the framing (chunked, a length, or until
    the connection closes) and, for a 200, the SSE events into the record.

    A batch of reads is joined and de-chunked at once; the body keeps, per piece, where it lies
    in the joined reads, so each event still gets the arrival time of the read that completed it.
    """

    def __init__(self, record: RequestRecord, adapter: ServerClient) -> None:
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
    def record(self) -> RequestRecord:
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
