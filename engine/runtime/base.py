"""What every runtime gives the runner: a server handle with a log stream, liveness and a stop."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, TypedDict, runtime_checkable


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


class Host(TypedDict, total=False):
    """The machine a place's servers run on, as its runtime sees it: what a reader of the report
    needs to tell which box measured which session."""

    name: str  # its host name (a Docker daemon's machine, a Slurm node)
    cpus: int  # CPUs it has (a place's CPU set is in the place itself)
    gpus: list[str]  # one model name per GPU
    driver: str  # the GPU driver's version
    docker: str  # the Docker engine's version
    runtimes: list[str]  # Docker's container runtimes (nvidia: GPUs can be passed in)
    gres: str  # a Slurm node's generic resources (gpu:4)
    os: str


def nvidia_gpus() -> tuple[list[str], str]:
    """This machine's GPU models and driver version from nvidia-smi; nothing when it has none."""
    if not shutil.which("nvidia-smi"):
        return [], ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return [], ""
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if "," in line]
    return [r[0] for r in rows], rows[0][1] if rows else ""


def local_host() -> Host:
    """This machine: the place of a process runtime (a CPU set of it, or all of it)."""
    gpus, driver = nvidia_gpus()
    host = Host(name=socket.gethostname(), cpus=os.cpu_count() or 0)
    if gpus:
        host["gpus"], host["driver"] = gpus, driver
    return host


# How a Slurm job starts its server: the campaign's command, a docker run on the node, or pyxis.
SlurmStart = Literal["process", "docker", "pyxis"]


@dataclass(frozen=True)
class SlurmJob:
    """The batch job a window's server runs in: the campaign's ``slurm:`` section, resolved."""

    start: SlurmStart = "process"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None  # sbatch --time (e.g. 02:00:00)
    gres: str | None = None  # e.g. gpu:4
    exclusive: bool = True  # a fresh box per window, as the method wants
    sbatch: tuple[str, ...] = ()  # extra options, verbatim
    comment: str = ""  # stray_mark(run id, directory identity): how a resumed engine finds its jobs


# A container's labels: whose it is (ruler's, of which campaign, run and window).
LABEL_CAMPAIGN = "ruler.campaign"
LABEL_RUN = "ruler.run"
LABEL_WINDOW = "ruler.window"
# Which run directory a server belongs to. The run id (ruler.run) alone does not say: a copy of the
# directory (cp -a, a backup restored beside it) carries the same id. The directory's identity
# (results.dir_identity: this machine, its device and inode) is one no copy shares; its path is
# there for the operator to read.
LABEL_DIR = "ruler.dir"
LABEL_DIR_ID = "ruler.dir.id"
# The same identity in a process server's environment, where a resume reads it back from /proc.
ENV_DIR_ID = "RULER_DIR_ID"


def stray_mark(run_id: str, dir_id: str) -> str:
    """A batch job's comment: its run and its run directory's identity, which a resume of that
    directory (and of no copy of it) finds again."""
    return f"ruler-run={run_id};ruler-dir={dir_id}" if dir_id else f"ruler-run={run_id}"


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
    gpus: str | int | tuple[str | int, ...] | None = None  # 'all', a count or device ids
    shm_size: str | None = None
    ipc: str | None = None
    volumes: list[str] = field(default_factory=list)
    keep: bool = True
    # Where a runtime keeps its own receipts for the window (a Slurm job script, its record) and the
    # attempt's tag (``-rerun1``): the window directory the runner writes beside them.
    workdir: Path | None = None
    tag: str = ""
    slurm: SlurmJob | None = None
    node: str | None = None  # the node a batch job must run on: its session's (sbatch --nodelist)
    cpus: str | None = None  # the CPU set of the session's place (docker --cpuset-cpus, taskset -c)
    # How many of argv's last arguments are ruler's own (its log verbosity, its listening
    # address): without them, argv is the command as the operator would run it.
    ruler_args: int = 0

    def describe(self) -> dict[str, object]:
        """The invocation as it may be recorded: secrets appear by name only."""
        return {
            "name": self.name,
            "image": self.image,
            "argv": self.argv,
            "ruler_args": self.ruler_args,
            "env": self.env,
            "secret_env": sorted(self.secret_env),
            "host_port": self.host_port,
            "container_port": self.container_port,
            "mounts": self.mounts,
            "volumes": self.volumes,
            "gpus": self.gpus,
            "shm_size": self.shm_size,
            "ipc": self.ipc,
            **({"slurm": {k: v for k, v in vars(self.slurm).items() if v not in (None, ())}}
               if self.slurm else {}),
            **({"place": self.node} if self.node else {}),  # the record's key since format 1
            **({"cpus": self.cpus} if self.cpus else {}),
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


@dataclass(frozen=True)
class Placement:
    """How a batch server's wait in its scheduler's queue ended."""

    placed: bool
    waited_s: float
    reason: str = ""  # why it was not placed (queue timeout, cancelled, ended in the queue)
    facts: dict[str, str] = field(default_factory=dict)  # node, job, cpus, gpus: boot facts


QueueReport = Callable[[str, str], None]  # (scheduler state, its reason), on every change


@runtime_checkable
class BatchServer(Server, Protocol):
    """A server started as a batch job (Slurm): it waits in a queue before it runs somewhere, writes
    its own log on a filesystem ruler shares, and its scheduler keeps a record of how it ended."""

    log_path: Path  # the job writes the server's output here; ruler only reads it

    def wait_placed(self, timeout: float, cancelled: Callable[[], bool],
                    on_queue: QueueReport) -> Placement:
        """Block until the job runs and has said where its server listens (``base_url`` is set
        then), the queue timeout passes, the job ends, or ``cancelled()``."""
        ...

    def record(self) -> dict[str, object]:
        """The scheduler's record of the job (state, reason, exit code, node), as it stands."""
        ...

    def ended_text(self) -> str:
        """One line for a rejection or failure: how the scheduler says the job ended ("" while it runs)."""
        ...


class Runtime(Protocol):
    """One way to run a window's server (docker, process, attach, slurm). Adding a runtime is
    adding one module with a class like this and a factory in ``engine.runtime``'s registry."""

    name: str

    def start(self, plan: LaunchPlan) -> Server:
        """Start the planned server; raise LaunchError saying why it could not start at all."""
        ...

    def preflight(self, run_dir: Path) -> None:
        """Before the first window: raise LaunchError saying what this host lacks for the runtime."""
        ...

    def stop_strays(self, run_id: str, dir_id: str,
                    servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        """A killed engine leaves its server running: stop what this run directory started
        (``dir_id``: its results.dir_identity; ``servers``: the identities its journal recorded),
        never anything else; return the identities stopped. A server that carries the run's id
        but not ``dir_id`` is left, said on stderr: it is a copy's original's, whose run may be
        live, or an earlier ruler's, whose directory cannot be proven; so is every server when
        ``dir_id`` is empty (this directory's identity unreadable)."""
        ...

    def host(self, node: str | None = None) -> Host:
        """The machine this runtime starts servers on (``node``: a Slurm place's); raise LaunchError
        when it does not answer."""
        ...
