"""Issue 49: every read from a server is bounded in bytes and time, with an error that says so. A
FAKE server on a socket of the test's own answers /metrics without end, a body past the bound, a
body a byte at a time, a status line or headers a little at a time, a compressed one, and /tokenize
with more ids than its text has bytes."""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from engine.quality.parity import Stack, render_all
from engine.run import counters
from engine.run.counters import scrape
from engine.servers import bounded, get_adapter
from engine.servers.bounded import MAX_ANSWER_BYTES, AnswerUnbounded, server_client

pytestmark = pytest.mark.timeout(120)  # an unbounded read runs until memory or this runs out

Answer = Callable[[socket.socket, str], None]


def endless(conn: socket.socket, _: str) -> None:
    """A FAULT: a 200 whose chunked body never ends (counters, forever)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n")
    line = b"vllm:spec_decode_num_drafts_total 1\n" * 2000
    while True:
        conn.sendall(b"%x\r\n%s\r\n" % (len(line), line))


def trickle(conn: socket.socket, _: str) -> None:
    """A FAULT: a 200 whose body comes a byte at a time, each well within the read timeout."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
    while True:
        conn.sendall(b"a")
        threading.Event().wait(0.05)


class Drip:
    """A FAULT: an answer whose head comes a piece every 0.3 s, each well within the read timeout,
    30 s in all before its body; ``hung_up`` is set once a piece finds the client gone, ``done``
    once the whole answer was sent."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.hung_up, self.done = threading.Event(), threading.Event()

    def __call__(self, conn: socket.socket, _: str) -> None:
        try:
            for piece in self.pieces:
                conn.sendall(piece)
                if self.hung_up.wait(0.3):
                    return
            conn.sendall(b"Connection: close\r\nContent-Length: 2\r\n\r\nok")
            self.done.set()
        except OSError:
            self.hung_up.set()
            raise


def status_line_drip() -> Drip:
    """The status line a byte at a time: its reason phrase is 100 bytes long."""
    line = b"HTTP/1.1 200 " + b"O" * 100 + b"\r\n"
    return Drip([line[i:i + 1] for i in range(len(line))])


def header_drip() -> Drip:
    """The status line at once, then one header line at a time, 100 of them."""
    return Drip([b"HTTP/1.1 200 OK\r\n", *(b"X-Drip-%d: %d\r\n" % (i, i) for i in range(100))])


def compressed(conn: socket.socket, _: str) -> None:
    """A FAULT: a gzip body though none was asked for (a few KiB standing for a GiB)."""
    body = gzip.compress(b"0" * (1 << 20))
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def many_ids(conn: socket.socket, path: str) -> None:
    """A FAULT: /tokenize answers three million ids; the template renders as llama-server does."""
    body = (json.dumps({"prompt": "<|user|> hi <|assistant|>"}) if path == "/apply-template"
            else json.dumps({"tokens": [7] * 3_000_000})).encode()
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(body) + body)


@contextmanager
def serving(answer: Answer) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:  # one request a connection, each answer saying so (Connection: close)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                length = next((int(x.split(b":")[1]) for x in head.split(b"\r\n")
                               if x.lower().startswith(b"content-length")), 0)
                rest = head.split(b"\r\n\r\n", 1)[1]
                while len(rest) < length:
                    rest += conn.recv(65536)
                with contextlib.suppress(OSError):  # the client hung up: what a bound does
                    answer(conn, head.split(b" ")[1].decode())

    threading.Thread(target=loop, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_a_metrics_answer_that_never_ends_is_no_figure_saying_so() -> None:
    with serving(endless) as url:
        got = scrape(url, get_adapter("vllm"))
    assert got.counters is None and got.rejected
    assert got.why == (f"GET /metrics answered more than {MAX_ANSWER_BYTES >> 20} MiB: ruler reads no "
                       "more of it")


def test_a_body_a_byte_at_a_time_is_given_up_at_the_requests_time() -> None:
    with (serving(trickle) as url, server_client(url, timeout=1.0) as client,
          pytest.raises(AnswerUnbounded, match=r"GET /x was still answering after 1 s")):
        client.get("/x")


@pytest.mark.parametrize("drip", [status_line_drip, header_drip])
def test_a_head_a_little_at_a_time_is_given_up_at_the_requests_time(drip: Callable[[], Drip]) -> None:
    # Each piece comes well within the read timeout: only the whole answer's bound ends the wait,
    # and it does so long before the 30 s the server would take to finish its head.
    fake = drip()
    with serving(fake) as url, server_client(url, timeout=1.0) as client:
        with pytest.raises(AnswerUnbounded, match=r"^GET /x was still answering after 1 s \(its head "
                           r"not yet whole\): ruler waits no longer$"):
            client.get("/x")
        assert fake.hung_up.wait(10), "the server never saw the client hang up"
    assert not fake.done.is_set()


def test_a_metrics_head_a_little_at_a_time_is_no_figure_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(counters, "METRICS_S", 1.0)
    fake = header_drip()
    with serving(fake) as url:
        got = scrape(url, get_adapter("vllm"))
    assert got.counters is None and got.rejected
    assert got.why == ("GET /metrics was still answering after 1 s (its head not yet whole): ruler "
                       "waits no longer")
    assert not fake.done.is_set()


def test_a_compressed_answer_is_refused_before_it_is_read() -> None:
    with (serving(compressed) as url, server_client(url) as client,
          pytest.raises(AnswerUnbounded, match="gzip-compressed, though asked for no compression")):
        client.get("/x")


def test_a_tokenize_of_millions_of_ids_is_no_rendering_kept() -> None:
    with serving(many_ids) as url, server_client(url, timeout=30) as client:
        adapter = get_adapter("llamacpp")
        rendered = render_all({"prose": [[{"role": "user", "content": "hi"}]]}, {},
                              Stack("llamacpp", adapter, client))
    [said] = rendered.classes["prose"]
    assert isinstance(said, str) and "3,000,000 ids for a text of" in said, said


def test_an_answer_within_its_bounds_is_read_whole() -> None:
    def fine(conn: socket.socket, _: str) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    with serving(fine) as url, server_client(url) as client:
        assert client.get("/x").text == "ok"
    assert issubclass(AnswerUnbounded, httpx.TransportError)


def test_the_private_httpx_members_the_heads_bound_relies_on_are_there() -> None:
    # The canary: an httpx that moved them would leave the head unbounded (the drip tests above
    # say so too, more slowly); this names the member gone.
    assert bounded.missing() == []


def test_a_private_member_gone_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "RELIES_ON", (*bounded.RELIES_ON, ("_pool._no_such", int)))
    assert bounded.missing() == ["HTTPTransport._pool._no_such: NoneType, not int"]
