"""What every runtime gives the runner: a server handle with a log stream, liveness and a stop."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol


def normalize_base_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/``, ``http://h:p/v1`` all become ``http://h:p``.

    Every request path is then written with its ``/v1`` once, so nothing sends ``/v1/v1``.
    """
    url = url.strip().rstrip("/")
    while url.endswith("/v1"):
        url = url[: -len("/v1")].rstrip("/")
    return url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LaunchError(RuntimeError):
    """A server could not be started at all (no image, no binary, a name clash): says why."""


@dataclass(frozen=True)
class LaunchPlan:
    """A fully resolved server start: nothing in it still needs the campaign file."""

    name: str  # container name or process label: ruler-<campaign>-<session>-<window>-<run token>[-rerunN]
    argv: list[str]  # process: the whole argv; docker: the container command (may be empty)
    env: dict[str, str]  # recorded
    secret_env: dict[str, str]  # passed through, never recorded
    host_port: int
    container_port: int = 0
    image: str | None = None
    mounts: list[str] = field(default_factory=list)  # host paths mounted read-only, same path
    labels: dict[str, str] = field(default_factory=dict)
    gpus: str | int | list[str] | None = None
    shm_size: str | None = None
    ipc: str | None = None
    volumes: list[str] = field(default_factory=list)
    keep: bool = True

    def describe(self) -> dict[str, object]:
        """The invocation as it may be recorded: secrets appear by name only."""
        return {
            "name": self.name,
            "image": self.image,
            "argv": self.argv,
            "env": self.env,
            "secret_env": sorted(self.secret_env),
            "host_port": self.host_port,
            "container_port": self.container_port,
            "mounts": self.mounts,
            "volumes": self.volumes,
            "gpus": self.gpus,
            "shm_size": self.shm_size,
            "ipc": self.ipc,
        }


class Server(Protocol):
    base_url: str
    identity: dict[str, object]  # what the journal records: container id/name, or pid

    def lines(self) -> Iterator[str]:
        """The server's output from its first byte, line by line; ends when the server does."""
        ...

    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def stop(self) -> None:
        """End the server; a container is stopped and kept unless the plan says otherwise."""
        ...


class Runtime(Protocol):
    """One way to run a window's server (docker, process, attach; slurm next). Adding a runtime is
    adding one module with a class like this and a line in ``engine.runtime.RUNTIMES``."""

    name: str

    def start(self, plan: LaunchPlan) -> Server:
        """Start the planned server; raise LaunchError saying why it could not start at all."""
        ...

    def stop_strays(self, run_id: str, servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        """A killed engine leaves its server running: stop what this run started (``servers``: the
        identities its journal recorded), never anything else; return the identities stopped."""
        ...
