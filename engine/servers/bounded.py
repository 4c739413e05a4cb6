"""Every answer ruler reads from a server outside the load generator (health, /metrics, a cache
flush, the quality and parity requests) comes through one client, bounded in bytes and in time: a
/metrics that never ends, a /tokenize of millions of ids, a body trickled a byte at a time is an
error naming the request and the bound, never memory without end or a wait without one. (The
load generator's streams have their own bounds: engine.run.client.)

httpx bounds the wait for each read and not the whole: its ``timeout`` here is each answer's
whole time as well. Answers are asked uncompressed (a body's bytes are what is counted) and one
sent compressed anyway is refused: a few kilobytes of gzip can stand for gigabytes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx

from engine.files import size_text
from engine.servers.client import tls_context

# The largest answer ruler reads from a server: /metrics of a big vLLM is a few hundred KiB, a
# rendered and tokenized 128k-token prompt about 1 MiB, a greedy reply with top logprobs a few MiB.
MAX_ANSWER_BYTES = 32 << 20


class AnswerUnbounded(httpx.ReadError):
    """An answer past its bound: more bytes than ruler reads, longer than the request's time, or
    compressed though asked not to be. A transport error: the caller says it as it says a server
    that stopped answering, with this message."""


class _Capped(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, what: str, limit: int, deadline: float,
                 seconds: float) -> None:
        self.inner, self.what, self.limit, self.deadline, self.seconds = inner, what, limit, deadline, seconds

    def __iter__(self) -> Iterator[bytes]:
        got = 0
        for chunk in self.inner:
            got += len(chunk)
            if got > self.limit:
                raise AnswerUnbounded(f"{self.what} answered more than {size_text(self.limit)}: "
                                      "ruler reads no more of it")
            if time.monotonic() > self.deadline:
                raise AnswerUnbounded(f"{self.what} was still answering after {self.seconds:g} s "
                                      f"({size_text(got)} so far): ruler waits no longer")
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _Bounded(httpx.BaseTransport):
    def __init__(self, limit: int, seconds: float) -> None:
        self.inner = httpx.HTTPTransport(verify=tls_context())
        self.limit, self.seconds = limit, seconds

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        what = f"{request.method} {request.url.path}"
        deadline = time.monotonic() + self.seconds
        response = self.inner.handle_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.close()
            raise AnswerUnbounded(f"{what} answered {encoding}-compressed, though asked for no "
                                  "compression: its size cannot be bounded as it is read")
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers, request=request,
                              stream=_Capped(response.stream, what, self.limit, deadline, self.seconds),
                              extensions=response.extensions)

    def close(self) -> None:
        self.inner.close()


def server_client(base_url: str = "", timeout: float = 10.0, connect: float = 10.0,
                  limit: int = MAX_ANSWER_BYTES) -> httpx.Client:
    """A client for a server's answers: each at most ``limit`` bytes and ``timeout`` seconds
    (each read, and the whole), the connection within ``connect``."""
    return httpx.Client(base_url=base_url, timeout=httpx.Timeout(timeout, connect=connect),
                        transport=_Bounded(limit, timeout), headers={"Accept-Encoding": "identity"})
