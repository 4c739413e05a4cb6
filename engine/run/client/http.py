"""HTTP/1.1 on the load generator's side: the request (:class:`Target`) and the response
(:class:`Response`), framed by llhttp, the body of a 200 going to the stream's events."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

from engine.record.request import RequestRecord
from engine.run.client.record import Events
from engine.servers.client import ServerClient, tls_context

CLOSED = "the server closed the connection"  # a request error that a dying server leaves too

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


class _PastTheEnd(Exception):
    """Bytes after the end of the response: llhttp is stopped at the next message's start."""


class Response:
    """One HTTP/1.1 response, framed by llhttp (httptools: the parser uvicorn and aiohttp use),
    fed in bulk: a batch of reads at once, read by read, so that the body of each read keeps that
    read's arrival time; for a 200 the bodies go to the SSE events, into the record.

    llhttp hands each piece of the body to ``on_body``: a list's append, run in C with no Python
    frame (servers send one HTTP chunk per token).
    """

    def __init__(self, record: RequestRecord, adapter: ServerClient) -> None:
        self.events = Events(record, adapter)
        self.body: list[bytes] = []  # the body pieces of the read being parsed
        self.on_body = self.body.append  # read once, when the parser is made
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0  # 0 until the head is complete
        self.mode = ""  # how the head frames the body: "chunked", "length" or "close"
        self.keep = False  # the connection may carry another request after this one
        self.complete = False  # the framing says the response has ended
        self.received = 0  # bytes of this response so far
        self.end = 0.0  # when its last byte arrived
        self.answer: list[bytes] = []  # a non-200 answer's body, for its error message

    @property
    def record(self) -> RequestRecord:
        return self.events.record

    # llhttp's callbacks: once per header, once per message; none per chunk but on_body's append.
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"transfer-encoding":  # llhttp reads it before a length (RFC 9112 6.3)
            self.mode = "chunked" if value.lower().rstrip().endswith(b"chunked") else "close"
        elif name == b"content-length" and not self.mode:
            self.mode = "length"

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.mode = self.mode or "close"

    def on_message_begin(self) -> None:
        if self.complete:
            raise _PastTheEnd

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep = self.parser.should_keep_alive()

    def feed(self, reads: list[bytes], times: list[float]) -> None:
        """Reads in arrival order, with their arrival times; raises :class:`Unreadable`."""
        self.received += sum(map(len, reads)) if len(reads) > 1 else len(reads[0])
        self.end = times[-1]
        parser, body = self.parser, self.body
        bodies: list[bytes] = []  # per read with body bytes: those bytes
        stamps: list[float] = []  # and that read's arrival time
        t = times[0]
        try:
            for data, t in zip(reads, times, strict=True):
                parser.feed_data(data)
                if body:
                    bodies.append(body[0] if len(body) == 1 else b"".join(body))
                    stamps.append(t)
                    body.clear()
        except httptools.HttpParserError as e:
            if not self.complete:
                raise Unreadable(str(e) or type(e).__name__) from None
            self.keep = False  # bytes past the end: the connection is not reusable
            if body:
                bodies.append(b"".join(body))
                stamps.append(t)
                body.clear()
        if not self.status and self.received > MAX_HEAD:
            raise Unreadable(f"no end of the response head in {self.received} bytes")
        if not bodies:
            return
        if self.status == 200:
            self.events.feed(bodies, stamps)
        elif sum(map(len, self.answer)) < 4096:
            self.answer += bodies

    def eof(self) -> None:
        """The connection closed: the end of a response framed by it, else the response is cut."""
        if self.complete:
            return
        if self.status and self.mode == "close":
            self.complete = True
            return
        self.events.fail(f"{CLOSED} before its answer ended" if self.received
                         else f"{CLOSED} without answering")

    def error(self) -> str | None:
        """The error a finished exchange leaves in the record, beyond the stream's own."""
        if self.status and self.status != 200:
            return f"HTTP {self.status}: {b''.join(self.answer).decode('utf-8', 'replace')[:300]}"
        return None
