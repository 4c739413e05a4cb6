"""The control socket: ``RUN_DIR/control.sock``, owner-only, JSON lines request/response.

A request is ``{"cmd": "advance", "args": [...]}``; the reply is ``{"ok": true, "reply": "..."}`` or
``{"ok": false, "error": "why not now"}``. Every accepted command is journaled with who and when.
Garbage gets an error reply; the engine never stops for a bad client.

In the bottom layer, beside engine.errors: the console and the commands import the protocol
without loading the run layer.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.sanitize import terminal

SOCKET = "control.sock"
MAX_LINE = 64 * 1024
# A connection is a thread: a client that connects and sends nothing, half a line, or a byte now
# and then would hold one for good. Each request line must arrive whole within this long of the
# connection or of the reply before it (`ruler ctl` and the console send theirs at once), else the
# connection is closed; and no more than MAX_CONNECTIONS are served at once (the console and a few
# `ruler ctl` need a handful).
REQUEST_S = 5.0
MAX_CONNECTIONS = 32

Handler = Callable[[str, list[str], dict[str, Any]], str]  # raises CommandRefused when it does not apply


class CommandRefused(Exception):
    """The command does not apply now; the message says why."""


def peer(sock: socket.socket) -> dict[str, Any]:
    """The connecting process's pid/uid/gid from the kernel (SO_PEERCRED), not from the client."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return {"pid": pid, "uid": uid, "gid": gid}


def replies(rfile: io.BufferedIOBase, dispatch: Callable[[bytes], dict[str, Any]],
            max_line: int = MAX_LINE) -> Iterator[dict[str, Any]]:
    """One reply per request line, whatever the bytes: a line longer than ``max_line`` gets one
    error, and the rest of it is read and dropped rather than taken for more requests."""
    while True:
        raw = rfile.readline(max_line)
        if not raw:
            return
        if len(raw) < max_line or raw.endswith(b"\n"):
            yield dispatch(raw)
            continue
        yield {"ok": False, "error": f"bad request: longer than {max_line} bytes"}
        while raw and not raw.endswith(b"\n"):
            raw = rfile.readline(max_line)


def dispatch(raw: bytes, who: dict[str, Any], handler: Handler) -> dict[str, Any]:
    """One request line to one reply; no exception leaves here (a bad client never stops the
    engine, and its connection stays usable)."""
    try:
        req = json.loads(raw)
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            raise ValueError("expected a JSON object with a string 'cmd'")
        args = req.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise ValueError("'args' must be a list of strings")
        # No row, window or session name holds one: refused, not journaled and echoed to
        # every terminal that prints the journal.
        for i, a in enumerate([req["cmd"], *args]):
            if terminal(a) != str(a):
                what = f"argument {i}" if i else "the command"
                raise ValueError(f"{what} holds a control character: {terminal(a)[:80]}")
    except RecursionError:
        return {"ok": False, "error": "bad request: nested too deeply"}
    except ValueError as e:
        return {"ok": False, "error": f"bad request: {e}"}
    try:
        return {"ok": True, "reply": handler(req["cmd"], [str(a) for a in args], who)}
    except CommandRefused as e:
        return {"ok": False, "error": str(e)}
    except Exception as e:  # noqa: BLE001 - a handler bug must not kill the engine
        return {"ok": False, "error": f"internal error: {type(e).__name__}: {e}"}


class _Deadline(io.RawIOBase):
    """A connection's bytes, read against one deadline a request: each read waits only for what
    is left of it (a per-read timeout would let a byte every few seconds hold the connection for
    good); past it, TimeoutError. :meth:`restart` gives the next request its time."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self.sock, self.seconds = sock, seconds
        self.restart()

    def restart(self) -> None:
        self.by = time.monotonic() + self.seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.by - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Conn(socketserver.StreamRequestHandler):
    server: _Server
    timeout = REQUEST_S  # the deadline of each request line (_Deadline), not of each read

    def setup(self) -> None:
        super().setup()
        self.deadline = _Deadline(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.deadline)

    def handle(self) -> None:
        who = peer(self.request)
        if who["uid"] not in (os.getuid(), 0):
            self._send({"ok": False, "error": "refused: not the engine's owner"})
            return
        try:
            for reply in replies(self.rfile, lambda raw: dispatch(raw, who, self.server.handler)):
                self._send(reply)
                self.deadline.restart()
        except TimeoutError:  # its line not whole in time: its slot goes to the next client
            self._send({"ok": False, "error": f"closed: a request must arrive whole within "
                        f"{self.timeout:g} s of the connection or of the reply before it"})
        except OSError:  # the client went away mid-line
            return

    def _send(self, obj: dict[str, Any]) -> None:
        self.connection.settimeout(self.timeout)  # a client that reads no reply holds no slot
        try:
            self.wfile.write(json.dumps(obj).encode() + b"\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away; nothing to tell it


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, handler: Handler) -> None:
        self.handler = handler
        old = os.umask(0o177)  # the socket is born 0600: no window where others may connect
        try:
            super().__init__(path, _Conn)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        self.slots = threading.BoundedSemaphore(self.max_connections)

    max_connections = MAX_CONNECTIONS

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):  # full: told so, and no thread is started
            with contextlib.suppress(OSError):
                request.sendall(json.dumps({"ok": False, "error": f"busy: {self.max_connections} "
                                            "connections are open; try again"}).encode() + b"\n")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # ThreadingMixIn's, with the slot given back before the client sees its connection end.
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - the stdlib's: reported, the server serves on
            self.handle_error(request, client_address)
        finally:
            self.slots.release()
            self.shutdown_request(request)


# sun_path holds 108 bytes: a results tree deep enough (long tmp dirs, long campaign names) makes the
# socket's path too long to bind or connect. /proc/self/fd/N/ names the same directory in ~20.
_SUN_PATH = 100


@contextlib.contextmanager
def addressable(path: Path) -> Iterator[str]:
    """A name of ``path`` that fits in a Unix socket address, valid inside the ``with``."""
    if len(os.fsencode(path)) <= _SUN_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class ControlServer:
    """Serves the socket on a daemon thread until closed."""

    def __init__(self, run_dir: Path, handler: Handler) -> None:
        self.path = run_dir / SOCKET
        self.path.unlink(missing_ok=True)  # a dead engine's socket; the run lock guards liveness
        with addressable(self.path) as address:
            self._server = _Server(address, handler)
        # close() waits for the loop to see its shutdown: a poll of 0.05 s, not the default
        # 0.5 s, so an engine's or a console's end is not held half a second by its socket.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True, name="control-socket")
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        # On a disk that failed (EIO, EROFS) the stale socket stays: the next engine replaces it
        # (see __init__), and the error the run stopped for is the one to say, not this one.
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


def send(run_dir: Path, cmd: str, args: list[str] | None = None,
         timeout: float = 10.0) -> dict[str, Any]:
    """One command, one reply. Raises OSError when no engine listens."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        with addressable(Path(run_dir) / SOCKET) as address:
            s.connect(address)
        # A server that is busy says so and closes before it reads: its reason is still there to read.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(json.dumps({"cmd": cmd, "args": args or []}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            buf += chunk
    return dict(json.loads(buf)) if buf else {"ok": False, "error": "engine closed the connection"}
