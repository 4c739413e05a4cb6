"""Every answer ruler reads from a server outside the load generator (health, /metrics, a cache
flush, the quality and parity requests) comes through one client, bounded in bytes and in time: a
/metrics that never ends, a /tokenize of millions of ids, a body trickled a byte at a time is an
error naming the request and the bound, never memory without end or a wait without one. (The
load generator's streams have their own bounds: engine.run.client.)

httpx bounds the wait for each read and not the whole: its ``timeout`` here is each answer's
whole time as well, from the connection to the body's last byte. Each read from the socket (the
status line and headers as much as the body) waits at most what is left of that time, so a server
that sends its head a byte at a time, each within the read timeout, holds ruler no longer than one
slow to send its body. Answers are asked uncompressed (a body's bytes are what is counted) and one
sent compressed anyway is refused: a few kilobytes of gzip can stand for gigabytes.

httpx takes no network backend of its own (httpcore's pool does): :data:`RELIES_ON` names the
private members used to hand it one, :func:`missing` checks them on the installed httpx
(tests/unit/engine/servers/test_bounded.py fails naming the one gone).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import httpcore
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


# When the answer being read must end (time.monotonic()), set by the transport around each step
# that reads from the socket: the pool's connections outlive a request, so the deadline cannot be
# theirs, and the read happens in the caller's thread, so its context carries it.
_DEADLINE: ContextVar[float | None] = ContextVar("answer_deadline", default=None)


@contextlib.contextmanager
def _until(deadline: float) -> Iterator[None]:
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, past: type[httpcore.TimeoutException]) -> float | None:
    """``timeout`` cut to what is left of the answer's time; ``past`` raised once none is left
    (a socket given no time would still hand over what has already come)."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise past("past the answer's time")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every wait is cut to what is left of the answer's time."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self.inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.inner.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.inner.connect_unix_socket(
            path, _left(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


# (dotted private member of an httpx.HTTPTransport, the type it must be): what _bounded_transport
# relies on to hand httpcore's pool its network backend.
RELIES_ON: tuple[tuple[str, type[Any]], ...] = (
    ("_pool", httpcore.ConnectionPool),
    ("_pool._network_backend", httpcore.NetworkBackend),
)


def missing(transport: httpx.HTTPTransport | None = None) -> list[str]:
    """Each member of :data:`RELIES_ON` an ``httpx.HTTPTransport`` lacks, or has of another type,
    as ``HTTPTransport.member`` and what differs; empty when the head's bound holds."""
    out = []
    transport = transport if transport is not None else httpx.HTTPTransport()
    for member, kind in RELIES_ON:
        obj: Any = transport
        for part in member.split("."):
            obj = getattr(obj, part, None)
        if not isinstance(obj, kind):
            out.append(f"HTTPTransport.{member}: {type(obj).__name__}, not {kind.__name__}")
    return out


def _bounded_transport() -> httpx.HTTPTransport:
    transport = httpx.HTTPTransport(verify=tls_context())
    if not missing(transport):
        pool = transport._pool  # private: RELIES_ON
        pool._network_backend = _DeadlineBackend(pool._network_backend)  # private: RELIES_ON
    return transport


def _past(what: str, seconds: float, so_far: str) -> AnswerUnbounded:
    return AnswerUnbounded(f"{what} was still answering after {seconds:g} s ({so_far}): ruler waits "
                           "no longer")


class _Capped(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, what: str, limit: int, deadline: float,
                 seconds: float) -> None:
        self.inner, self.what, self.limit, self.deadline, self.seconds = inner, what, limit, deadline, seconds

    def __iter__(self) -> Iterator[bytes]:
        got = 0
        chunks = iter(self.inner)
        while True:
            try:
                with _until(self.deadline):
                    chunk = next(chunks)
            except StopIteration:
                return
            except httpx.TimeoutException as e:
                if time.monotonic() < self.deadline:
                    raise
                raise _past(self.what, self.seconds, f"{size_text(got)} so far") from e
            got += len(chunk)
            if got > self.limit:
                raise AnswerUnbounded(f"{self.what} answered more than {size_text(self.limit)}: "
                                      "ruler reads no more of it")
            if time.monotonic() > self.deadline:
                raise _past(self.what, self.seconds, f"{size_text(got)} so far")
            yield chunk

    def close(self) -> None:
        self.inner.close()


class _Bounded(httpx.BaseTransport):
    def __init__(self, limit: int, seconds: float) -> None:
        self.inner = _bounded_transport()
        self.limit, self.seconds = limit, seconds

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        what = f"{request.method} {request.url.path}"
        deadline = time.monotonic() + self.seconds
        try:
            with _until(deadline):
                response = self.inner.handle_request(request)
        except (httpx.ReadTimeout, httpx.WriteTimeout) as e:
            if time.monotonic() < deadline:
                raise
            raise _past(what, self.seconds, "its head not yet whole") from e
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
