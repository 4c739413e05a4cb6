"""engine.control, the control socket: owner-only, one JSON reply a line whatever arrives (garbage,
nesting, over-long lines), usable after a bad request, and served under a run directory too deep
for a socket address. The real socket server with a stand-in handler (it answers "did CMD"): the
parsing and the connection are under test; the commands are tests/integration/test_control.py's."""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import control


def test_socket_is_owner_only_and_survives_garbage() -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to run a process as another user")
    seen: list[str] = []

    def handler(cmd: str, args: list[str], who: dict[str, Any]) -> str:
        seen.append(cmd)
        if cmd == "boom":
            raise control.CommandRefused("not now")
        return f"did {cmd}"

    # A directory the other user may enter: then only the socket's own mode keeps them out.
    tmp_path = Path(tempfile.mkdtemp(prefix="ruler-sock-"))
    tmp_path.chmod(0o755)
    server = control.ControlServer(tmp_path, handler)
    try:
        assert (tmp_path / "control.sock").stat().st_mode & 0o777 == 0o600
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(tmp_path / "control.sock"))
            f = s.makefile("rwb")
            for garbage in (b"not json\n", b"[1, 2]\n", b'{"cmd": 5}\n', b"\xff\xfe\n"):
                f.write(garbage)
                f.flush()
                reply = json.loads(f.readline())
                assert reply["ok"] is False and reply["error"].startswith("bad request")
        assert control.send(tmp_path, "boom") == {"ok": False, "error": "not now"}
        assert control.send(tmp_path, "status") == {"ok": True, "reply": "did status"}
        # Another user's process cannot connect.
        probe = ("import socket,sys;s=socket.socket(socket.AF_UNIX)\n"
                 "try:\n s.connect(sys.argv[1]); print('connected')\n"
                 "except PermissionError: print('denied')")
        out = subprocess.run(["/usr/bin/python3", "-c", probe, str(tmp_path / "control.sock")],
                             capture_output=True, text=True, timeout=30, user="nobody")
        assert out.stdout.strip() == "denied", out.stderr
    finally:
        server.close()
        shutil.rmtree(tmp_path)
    assert seen == ["boom", "status"]


def test_a_run_directory_too_deep_for_a_socket_address_still_serves(tmp_path: Path) -> None:
    """A Unix socket address holds 108 bytes; a results tree under a longer path still gets its
    socket (no ``OSError: AF_UNIX path too long`` when the engine binds it)."""
    deep = tmp_path.joinpath(*["a-long-results-directory-name"] * 5)
    deep.mkdir(parents=True)
    assert len(str(deep / control.SOCKET)) > 108
    server = control.ControlServer(deep, _did)
    try:
        assert (deep / control.SOCKET).stat().st_mode & 0o777 == 0o600
        assert control.send(deep, "status") == {"ok": True, "reply": "did status"}
    finally:
        server.close()
    assert not (deep / control.SOCKET).exists()


@contextlib.contextmanager
def _client(run: Path) -> Iterator[Any]:
    """A connection to ``run``'s socket, as a file of lines."""
    with socket.socket(socket.AF_UNIX) as s:
        with control.addressable(run / control.SOCKET) as address:
            s.connect(address)
        s.settimeout(30)
        yield s.makefile("rwb")


def _did(cmd: str, args: list[str], who: dict[str, Any]) -> str:
    return f"did {cmd} {' '.join(args)}".rstrip()


def test_a_nested_or_over_long_request_gets_one_error_and_the_connection_stays_usable(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The real socket server with a stand-in handler (it answers "did CMD"): the parsing and
    the connection are under test, not the commands."""
    server = control.ControlServer(tmp_path, _did)
    try:
        with _client(tmp_path) as f:
            f.write(b"[" * 60_000 + b"\n" + b'{"cmd": "status"}\n')
            f.flush()
            assert json.loads(f.readline()) == {"ok": False,
                                                 "error": "bad request: nested too deeply"}
            assert json.loads(f.readline()) == {"ok": True, "reply": "did status"}
            f.write(b"x" * (10 * 1024 * 1024) + b"\n" + b'{"cmd": "status", "args": ["2"]}\n')
            f.flush()
            assert json.loads(f.readline()) == {
                "ok": False, "error": f"bad request: longer than {control.MAX_LINE} bytes"}
            assert json.loads(f.readline()) == {"ok": True, "reply": "did status 2"}
    finally:
        server.close()
    assert "Traceback" not in capfd.readouterr().err


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400) | st.lists(
    st.sampled_from([b'{"cmd": "status"}', b'{"cmd": "rerun", "args": ["a", 1, 2.5]}',
                     b'{"cmd": "x", "args": [[1]]}', b'{"cmd": 1}', b"[]", b"{", b"\xff",
                     b"[" * 3000, b'{"args": {}}', b"x" * 40, b""]),
    max_size=8).map(b"\n".join))
def test_whatever_arrives_each_line_gets_one_json_reply(data: bytes) -> None:
    """``replies`` and ``dispatch`` as the socket uses them, on any bytes (long lines at 32)."""
    who = {"pid": 1, "uid": os.getuid(), "gid": 0}
    out = list(control.replies(io.BytesIO(data), lambda raw: control.dispatch(raw, who, _did),
                               max_line=32))
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline ends the last line; it does not start another
    assert len(out) == len(lines)
    for line, reply in zip(lines, out, strict=True):
        assert set(reply) in ({"ok", "reply"}, {"ok", "error"})
        json.dumps(reply)
        if len(line) >= 32:
            assert reply == {"ok": False, "error": "bad request: longer than 32 bytes"}
        elif line.strip().startswith(b'{"cmd": "status"}'):
            assert reply == {"ok": True, "reply": "did status"}


def test_a_handler_that_refuses_or_fails_is_an_error_reply_never_an_exception() -> None:
    """``dispatch`` on well-formed requests: the handler's reply, its refusal, or its bug named."""
    who = {"pid": 1, "uid": 0, "gid": 0}

    def handler(cmd: str, args: list[str], who: dict[str, Any]) -> str:
        if cmd == "no":
            raise control.CommandRefused("not now")
        if cmd == "bug":
            raise KeyError("x")
        return f"{cmd} {args} {who['pid']}"

    assert control.dispatch(b'{"cmd": "rerun", "args": ["a", 1, 2.5]}', who, handler) == {
        "ok": True, "reply": "rerun ['a', '1', '2.5'] 1"}
    assert control.dispatch(b'{"cmd": "no"}', who, handler) == {"ok": False, "error": "not now"}
    assert control.dispatch(b'{"cmd": "bug"}', who, handler) == {
        "ok": False, "error": "internal error: KeyError: 'x'"}
    assert control.dispatch(b'{"cmd": "x", "args": {}}', who, handler) == {
        "ok": False, "error": "bad request: 'args' must be a list of strings"}


def test_send_with_no_engine_listening_raises_and_a_closed_socket_is_replaced(tmp_path: Path) -> None:
    """No socket: OSError for the caller to say so. A socket file a dead engine left is replaced
    when the next engine serves, and removed when it closes."""
    with pytest.raises(OSError):
        control.send(tmp_path, "status")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(tmp_path / control.SOCKET))
    stale.close()  # the file stays, nobody listens
    with pytest.raises(OSError):
        control.send(tmp_path, "status")
    server = control.ControlServer(tmp_path, _did)
    try:
        assert control.send(tmp_path, "advance", ["s2"]) == {"ok": True, "reply": "did advance s2"}
    finally:
        server.close()
    assert not (tmp_path / control.SOCKET).exists()


@pytest.mark.parametrize("args", [["s1-w/prose/c2\x1b]0;TITLE\x07"], ["a\r\nrerun forged"], ["\x9b2J"]])
def test_a_command_or_argument_with_a_control_character_is_refused_before_the_handler(
        args: list[str]) -> None:
    """No row, window or session name holds one: journaled, it would reach every terminal that
    prints the journal (headless lines, ``ruler ctl``, the console) as an escape or a forged line."""
    seen: list[str] = []

    def handler(cmd: str, args: list[str], who: dict[str, Any]) -> str:
        seen.append(cmd)
        return "queued"

    for req in ({"cmd": "rerun", "args": args}, {"cmd": args[0]}):
        reply = control.dispatch(json.dumps(req).encode(), {"pid": 1, "uid": 0, "gid": 0}, handler)
        assert reply["ok"] is False and "control character" in reply["error"]
        assert "\x1b" not in reply["error"] and "\r" not in reply["error"] and "\x9b" not in reply["error"]
    assert not seen


def _until_closed(s: socket.socket) -> bytes:
    """What the server sends on ``s`` until it closes it."""
    s.settimeout(30)
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(1000):
            received += chunk
    return received


def test_idle_half_line_connections_are_bounded_and_timed_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Clients that connect and send half a line each held a thread for good (3000 of them, 3000
    threads): at most ``max_connections`` are served at once (one more is told it is busy, and
    no thread starts for it), and each idle one is closed at its request's deadline."""
    monkeypatch.setattr(control._Conn, "timeout", 0.5)
    monkeypatch.setattr(control._Server, "max_connections", 4)
    server = control.ControlServer(tmp_path, _did)
    idle: list[socket.socket] = []
    try:
        with control.addressable(tmp_path / control.SOCKET) as address:
            for _ in range(4):
                s = socket.socket(socket.AF_UNIX)
                s.connect(address)
                s.sendall(b'{"cmd": "sta')  # half a line, then nothing
                idle.append(s)
            with socket.socket(socket.AF_UNIX) as extra:
                extra.connect(address)
                extra.settimeout(30)
                assert json.loads(extra.makefile("rb").readline())["error"].startswith("busy: 4 ")
            for _ in range(20):  # `ruler ctl` and the console are told so too (its write may fail first)
                assert control.send(tmp_path, "status")["error"].startswith("busy: 4 ")
            for s in idle:  # the server closes each once its deadline has passed, saying so
                assert _until_closed(s).startswith(b'{"ok": false, "error": "closed: a request must')
            with socket.socket(socket.AF_UNIX) as again:
                again.connect(address)
                again.settimeout(30)
                f = again.makefile("rwb")
                f.write(b'{"cmd": "status"}\n')
                f.flush()
                assert json.loads(f.readline()) == {"ok": True, "reply": "did status"}
    finally:
        for s in idle:
            s.close()
        server.close()
    assert "Traceback" not in capfd.readouterr().err


def test_clients_trickling_a_byte_at_a_time_are_closed_at_the_request_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49 (class 7): a timeout per read let a client that sends one byte a little faster than
    it hold its connection for good, and ``max_connections`` of them locked the console out
    ("busy"). The FAULT injected: clients that each send a byte of a request (never its end) every
    0.02 s, a hundred times faster than the (shortened) timeout, for as long as they are let. Each
    is closed once its request has not arrived whole in time, told why, and a new client is
    answered."""
    monkeypatch.setattr(control._Conn, "timeout", 2.0)
    monkeypatch.setattr(control._Server, "max_connections", 4)
    server = control.ControlServer(tmp_path, _did)
    stop = threading.Event()
    said: list[bytes] = []

    def trickle(s: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the server closes it: EPIPE or a reset
            while not stop.is_set() and not select.select([s], [], [], 0)[0]:  # it has said nothing
                s.sendall(b"{")
                stop.wait(0.02)  # the pace of the trickle, not a wait on the server
        said.append(_until_closed(s))

    clients = [socket.socket(socket.AF_UNIX) for _ in range(4)]
    try:
        with control.addressable(tmp_path / control.SOCKET) as address:
            for s in clients:
                s.connect(address)
            threads = [threading.Thread(target=trickle, args=(s,), daemon=True) for s in clients]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)  # the server ends each: a hang bound, far past the deadline
            assert not any(t.is_alive() for t in threads), "a trickling client still holds its slot"
            for reply in said:
                assert json.loads(reply.decode().splitlines()[0])["error"] == (
                    "closed: a request must arrive whole within 2 s of the connection or of the "
                    "reply before it"), reply
            assert control.send(tmp_path, "status") == {"ok": True, "reply": "did status"}
    finally:
        stop.set()
        for s in clients:
            s.close()
        server.close()


def test_lines_sent_in_time_on_one_connection_are_each_answered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline is a request's, not the connection's: a client that sends each line whole,
    one after another's reply, is served for as long as it does."""
    monkeypatch.setattr(control._Conn, "timeout", 0.5)
    server = control.ControlServer(tmp_path, _did)
    try:
        with _client(tmp_path) as f:
            for n in range(20):
                f.write(json.dumps({"cmd": "status", "args": [str(n)]}).encode() + b"\n")
                f.flush()
                assert json.loads(f.readline()) == {"ok": True, "reply": f"did status {n}"}
    finally:
        server.close()
