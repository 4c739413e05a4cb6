"""A place's Docker daemon over ssh, with every wait on its host bounded and every ssh child ruler's.

The docker SDK's own ssh transport runs ``ssh -- host docker system dial-stdio`` with no connect
timeout and no batch mode, and reads that child's pipe with no timeout: a host that does not answer
holds the call, an abort and SIGTERM with it, until the child dies (minutes later, or never; a
password prompt waits for ever). Instead ruler serves the SDK a unix socket of its own (the SDK's
unix transport, with its timeouts) and hands each connection made to it to an ``ssh ... docker
system dial-stdio`` of its own, as that child's stdin and stdout: ssh moves the bytes itself, gives
up on a host silent for ``timeouts.connect`` (ConnectTimeout, ServerAliveInterval x CountMax),
never prompts (BatchMode), and its stderr is kept to say why. A call cut short by an abort (see
:meth:`SshDial.call`) kills the children, so nothing waits on them.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from engine.runtime.base import LaunchError

T = TypeVar("T")
ALIVE_COUNT = 3  # ServerAliveCountMax: unanswered keepalives before ssh gives the link up
DEFAULT_CONNECT_S = 15.0  # timeouts.connect's default (engine.campaign.machines.Timeouts)


class Cut(LaunchError):
    """A call to the place's daemon was cut short (the run was aborted); its ssh children are killed."""


def ssh_argv(docker_host: str, connect_timeout: float) -> list[str]:
    """The ssh command that joins stdin and stdout to the daemon of ``ssh://[user@]host[:port]``.

    ConnectTimeout bounds the TCP connect and the handshake; ServerAlive gives up on a link silent
    for about as long once it is up (a host gone mid-call); BatchMode refuses to prompt for a
    password or a host key (no one answers a detached engine's prompt)."""
    parts = urlsplit(docker_host)
    if parts.scheme != "ssh" or not parts.hostname:
        raise LaunchError(f"docker host {docker_host} is not ssh://[user@]host[:port]")
    try:
        port = parts.port
    except ValueError as e:
        raise LaunchError(f"docker host {docker_host}: {e}") from e
    seconds = max(1, math.ceil(connect_timeout))
    interval = max(1, math.ceil(connect_timeout / ALIVE_COUNT))
    return ["ssh", "-o", f"ConnectTimeout={seconds}", "-o", "BatchMode=yes",
            "-o", f"ServerAliveInterval={interval}", "-o", f"ServerAliveCountMax={ALIVE_COUNT}",
            *(["-l", parts.username] if parts.username else []),
            *(["-p", str(port)] if port else []),
            "--", parts.hostname, "docker", "system", "dial-stdio"]


class SshDial:
    """A unix socket on this machine whose every connection is one ssh child to the place's daemon.

    ``cancelled``: the run's abort, which :meth:`call` watches."""

    def __init__(self, docker_host: str, connect_timeout: float = DEFAULT_CONNECT_S,
                 cancelled: threading.Event | None = None) -> None:
        self.docker_host = docker_host
        self.argv = ssh_argv(docker_host, connect_timeout)
        if not shutil.which("ssh"):
            raise LaunchError(f"docker host {docker_host} needs an ssh client on this machine: "
                              "none on PATH")
        self.cancelled = cancelled or threading.Event()
        self._dir = Path(tempfile.mkdtemp(prefix="ruler-ssh-"))  # 0700: only this user connects
        self.path = self._dir / "docker.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._lock = threading.Lock()
        self._children: list[tuple[subprocess.Popen[bytes], Path]] = []
        self._spawned = 0
        self._closed = False
        atexit.register(self.close)
        threading.Thread(target=self._serve, name=f"ssh-dial {docker_host}", daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"unix://{self.path}"

    @property
    def spawned(self) -> int:
        """How many ssh children have been started: :meth:`error` of those since a count."""
        with self._lock:
            return self._spawned

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            err = self._dir / f"ssh-{self._spawned + 1}.err"
            # Held from before the child starts until it is counted: whoever has seen the child's
            # bytes, or the connection's end (the parent's copy closes only after), and then
            # asks the count or error() finds this child.
            with conn, err.open("wb") as stderr, self._lock:
                try:
                    # The connection is the child's stdin and stdout (the parent's copy is closed
                    # here): the SDK's bytes go to ssh and back with no thread of ruler's between.
                    proc = subprocess.Popen(self.argv, stdin=conn.fileno(), stdout=conn.fileno(),
                                            stderr=stderr, start_new_session=True)  # ^C is ruler's
                except OSError as e:  # ssh left PATH since the check: the SDK's call fails
                    stderr.write(f"cannot run ssh: {e}\n".encode())
                    continue
                if self._closed:
                    proc.kill()
                self._children.append((proc, err))
                self._spawned += 1

    def error(self, since: int = 0) -> str:
        """What ssh said when a child started after the first ``since`` failed (its stderr on one
        line, the latest child's), or "" when none did."""
        with self._lock:
            children = self._children[since:]
        for proc, err in reversed(children):
            try:
                code = proc.wait(timeout=1)  # its socket closed as it exited: the exit is near
            except subprocess.TimeoutExpired:
                continue
            if code != 0:
                text = err.read_text(errors="replace") if err.exists() else ""
                lines = [line.strip() for line in text.splitlines() if line.strip()]
                return "; ".join(dict.fromkeys(lines)) or f"ssh exited {code}"
        return ""

    def kill(self) -> None:
        """Kill every ssh child still running: a call waiting on one returns (with an error)."""
        with self._lock:
            children = list(self._children)
        for proc, _ in children:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def call(self, what: Callable[[], T], doing: str) -> T:
        """``what()`` (calls to the daemon) on a thread of its own, waited on until it returns or the
        run is cancelled: then the ssh children are killed, and :class:`Cut` says so at once (the
        thread, abandoned, ends as its ssh dies)."""
        if self.cancelled.is_set():
            raise Cut(f"{doing} on docker host {self.docker_host}: not begun, the run is aborted")
        out: list[T] = []
        failed: list[BaseException] = []
        done = threading.Event()

        def work() -> None:
            try:
                out.append(what())
            except BaseException as e:  # noqa: BLE001 - raised on the caller's thread below
                failed.append(e)
            finally:
                done.set()

        threading.Thread(target=work, name=f"ssh-call {self.docker_host}", daemon=True).start()
        while not done.wait(0.1):
            if self.cancelled.is_set():
                self.kill()
                raise Cut(f"{doing} on docker host {self.docker_host}: cut short, the run is aborted")
        if failed:
            raise failed[0]
        return out[0]

    def close(self) -> None:
        """Stop serving the socket and kill every ssh child (the engine's end, or a test's)."""
        atexit.unregister(self.close)
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of _serve
        self._listener.close()
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)
