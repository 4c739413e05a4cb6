"""A server in a fresh Docker container per window, through the docker SDK.

Ruler only ever touches containers of the run at hand: a container name carries the run's token, so
only the same run's earlier attempt at a window can hold it; any other holder is an error, never a
stop, a rename or a removal.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest

from engine.runtime.base import (
    LABEL_CAMPAIGN,
    LABEL_DIR,
    LABEL_DIR_ID,
    LABEL_RUN,
    Host,
    LaunchError,
    LaunchPlan,
)
from engine.runtime.sshdial import DEFAULT_CONNECT_S, SshDial

T = TypeVar("T")
# A daemon no longer reached mid-window (a place's host down, its link given up by ssh).
LOST = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)



def client(docker_host: str | None = None) -> docker.DockerClient:
    """The local daemon (DOCKER_HOST or its socket), or a place's at unix:// or tcp:// (ssh://
    goes through :class:`~engine.runtime.sshdial.SshDial`: see DockerRuntime)."""
    if not docker_host:
        return docker.from_env(timeout=60)
    return docker.DockerClient(base_url=docker_host, timeout=60)


def remote_host(docker_host: str | None) -> str | None:
    """The address a server on that daemon's machine is reached at; None for this machine's."""
    if not docker_host or docker_host.startswith("unix://"):
        return None
    return urlsplit(docker_host).hostname


def daemon_answers() -> bool:
    try:
        client().ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means no usable daemon
        return False


def env_facts(images: list[str]) -> dict[str, Any]:
    """env.json's ``docker``: the daemon's version and each image's id and digests, or why not."""
    try:
        dc = client()
        facts: dict[str, Any] = {"server_version": dc.version().get("Version"), "images": {}}
    except Exception as e:  # noqa: BLE001 - no daemon is a fact worth recording, not an error
        return {"server_version": None, "note": f"no Docker daemon ({type(e).__name__})"}
    for name in images:
        try:
            img = dc.images.get(name)
            facts["images"][name] = {"id": img.id, "digests": img.attrs.get("RepoDigests", [])}
        except Exception as e:  # noqa: BLE001
            facts["images"][name] = {"error": f"{type(e).__name__}: {e}"}
    return facts


def _is_ours(container: Any) -> bool:
    return LABEL_CAMPAIGN in (container.labels or {})


def _device_requests(gpus: str | int | tuple[str | int, ...] | None) -> list[DeviceRequest]:
    if gpus is None:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, int):
        return [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])]


def _clear_name(dc: docker.DockerClient, plan: LaunchPlan) -> None:
    """This run's own container from an attempt a killed engine left (a resume, a rerun counted
    again) holds the name: stop it if a stray still runs it, and keep it under a name made of its
    own id, which no other container can hold."""
    name = plan.name
    try:
        old = dc.containers.get(name)
    except docker.errors.NotFound:
        return
    if not _is_ours(old):
        raise LaunchError(f"a container named {name} exists without ruler's labels; "
                          "ruler will not touch it: rename or remove it yourself")
    run = old.labels.get(LABEL_RUN)
    if run != plan.labels.get(LABEL_RUN):
        raise LaunchError(f"the container named {name} belongs to run {run}; ruler never "
                          "touches another run's container: rename or remove it yourself")
    # The same run id from another directory: a copy of the run is resumed while the run it was
    # copied from still has its containers (that run may be live).
    there, here = old.labels.get(LABEL_DIR_ID), plan.labels.get(LABEL_DIR_ID)
    if there and here and there != here:
        raise LaunchError(f"the container named {name} belongs to run {run} in "
                          f"{old.labels.get(LABEL_DIR, '?')}, of which this run directory is a copy; "
                          "ruler never touches another run directory's container: remove it "
                          "yourself once that run is over (ruler prune)")
    if old.status == "running":
        old.stop(timeout=10)
    old.rename(f"{name}--{old.short_id}")


class DockerServer:
    def __init__(self, plan: LaunchPlan, dc: docker.DockerClient | None = None,
                 host: str | None = None) -> None:
        self._dc = dc or client()
        self._plan = plan
        _clear_name(self._dc, plan)
        volumes: dict[str, dict[str, str]] = {p: {"bind": p, "mode": "ro"} for p in plan.mounts}
        for spec in plan.volumes:
            source, _, rest = spec.partition(":")
            bind, _, mode = rest.partition(":")
            volumes[source] = {"bind": bind or source, "mode": mode or "rw"}
        assert plan.image is not None, "plan_launch gives every docker plan its image"
        try:
            self._c = self._dc.containers.create(
                plan.image,
                command=plan.argv or None,
                name=plan.name,
                labels=plan.labels,
                environment={**plan.env, **plan.secret_env, "RULER_CONTAINER": plan.name},
                # On another machine the daemon picks the port there (this machine's free port
                # says nothing of that one's), published where ruler can reach it.
                ports={f"{plan.container_port}/tcp": ("127.0.0.1", plan.host_port) if host is None
                       else ("0.0.0.0", None)},  # type: ignore[dict-item]  # None: any free port
                cpuset_cpus=plan.cpus,
                volumes=volumes,
                device_requests=_device_requests(plan.gpus),
                shm_size=plan.shm_size,
                ipc_mode=plan.ipc,
                detach=True,
            )
            self._c.start()
        except docker.errors.ImageNotFound as e:
            raise LaunchError(f"image {plan.image} not found: {e.explanation}") from e
        except docker.errors.APIError as e:
            raise LaunchError(f"docker could not start {plan.name}: {e.explanation}") from e
        except docker.errors.DockerException as e:  # the place's daemon went away
            raise LaunchError(f"docker could not start {plan.name}: {e}") from e
        self.base_url = f"http://127.0.0.1:{plan.host_port}"
        if host is not None:
            self._c.reload()
            bound = (self._c.ports.get(f"{plan.container_port}/tcp") or [{}])[0].get("HostPort")
            self.base_url = f"http://{host}:{bound}"
        self.identity: dict[str, object] = {
            "runtime": "docker", "name": plan.name, "id": self._c.id,
            "image": plan.image,
            "image_id": self._c.image.id,  # type: ignore[union-attr]  # a created container has an image
        }
        self._stopped = threading.Event()

    def lines(self) -> Iterator[str]:
        # The json-file log holds everything since start, so following from here loses nothing.
        buf = b""
        for chunk in self._c.logs(stream=True, follow=True, stdout=True, stderr=True):
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                yield raw.decode("utf-8", "replace").rstrip("\r")
        if buf:
            yield buf.decode("utf-8", "replace")

    def _state(self) -> dict[str, Any]:
        try:
            self._c.reload()
        except docker.errors.NotFound:
            return {"Status": "removed", "ExitCode": None}
        except LOST:  # the place's host went away (its ssh gave the link up): the window fails
            return {"Status": "unreachable", "ExitCode": None}
        return dict(self._c.attrs.get("State", {}))

    def alive(self) -> bool:
        return self._state().get("Status") in ("created", "running", "restarting")

    def exit_code(self) -> int | None:
        state = self._state()
        return None if state.get("Status") in ("created", "running") else state.get("ExitCode")

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        try:
            self._c.stop(timeout=10)
            if not self._plan.keep:
                self._c.remove()
        except docker.errors.NotFound:
            pass
        except LOST:  # left on a host that went away: a resume's stray search or the name's next
            pass      # start finds it by the run's label


class DockerRuntime:
    """A fresh container per window; a killed engine's containers are found by the run's label.
    ``docker_host``: a place's daemon (another machine's, over SSH or TCP); None for the local one.
    Over SSH every call that may wait on the host as a window or a session begins is bounded by
    ``connect_timeout`` and cut short when ``cancelled`` (the run's abort) is set."""

    name = "docker"

    def __init__(self, docker_host: str | None = None, connect_timeout: float = DEFAULT_CONNECT_S,
                 cancelled: threading.Event | None = None) -> None:
        self.docker_host = docker_host
        self.connect_timeout = connect_timeout
        self.cancelled = cancelled
        self._dial: SshDial | None = None
        self._dc: docker.DockerClient | None = None

    def _call(self, what: Callable[[], T], doing: str) -> T:
        """``what()`` against the daemon; LaunchError naming the host, and what ssh said, when the
        daemon cannot be reached (or the call is cut short by an abort)."""
        where = self.docker_host or "local"
        if self.docker_host and self.docker_host.startswith("ssh://") and self._dial is None:
            self._dial = SshDial(self.docker_host, self.connect_timeout, self.cancelled)
        dial = self._dial
        since = dial.spawned if dial else 0
        try:
            return dial.call(what, doing) if dial else what()
        except docker.errors.APIError as e:
            raise LaunchError(f"docker host {where}: {doing}: {e.explanation or e}") from e
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            said = dial.error(since) if dial else ""
            raise LaunchError(f"docker host {where} does not answer ({doing}): {said or e}") from e

    def _client(self) -> docker.DockerClient:
        if self._dc is None:
            url = self._dial.base_url if self._dial else self.docker_host
            self._dc = client(url)
        return self._dc

    def start(self, plan: LaunchPlan) -> DockerServer:
        return self._call(lambda: DockerServer(plan, self._client(), remote_host(self.docker_host)),
                          f"starting {plan.name}")

    def preflight(self, run_dir: Path) -> None:
        """Nothing to check up front: a window that cannot start is rejected with the reason."""

    def host(self, node: str | None = None) -> Host:
        """The daemon's machine as ``docker info`` describes it (over SSH for another machine's)."""
        info = self._call(lambda: self._client().info(), "docker info")
        host = Host(name=str(info.get("Name", "")), cpus=int(info.get("NCPU") or 0),
                    docker=str(info.get("ServerVersion", "")), os=str(info.get("OperatingSystem", "")),
                    runtimes=sorted(info.get("Runtimes") or {}))
        gpus = [str(r) for r in info.get("GenericResources") or [] if "gpu" in str(r).lower()]
        if gpus:
            host["gpus"] = gpus
        return host

    def stop_strays(self, run_id: str, dir_id: str,
                    servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        def stop() -> list[dict[str, object]]:
            stopped: list[dict[str, object]] = []
            for container in containers_of_run(run_id, self._client()):
                if container.status != "running":
                    continue
                there = (container.labels or {}).get(LABEL_DIR_ID)
                if not dir_id or there != dir_id:
                    print(f"ruler: left {container.name} running: " + (
                        f"it belongs to run directory {container.labels.get(LABEL_DIR, '?')}, of "
                        "which this one is a copy (that run may be live)" if there else
                        "it does not name its run directory (an earlier ruler's), so that it is "
                        "this one's cannot be proven") + "; stop it yourself once its run is over",
                        file=sys.stderr)
                    continue
                container.stop(timeout=10)
                stopped.append({"name": container.name, "id": container.id})
            return stopped
        return self._call(stop, "stopping the run's strays")


def labelled(label: str, dc: docker.DockerClient | None = None) -> list[Any]:
    """Every container carrying this label (``key`` or ``key=value``), running or not. One removed
    between Docker's list and its inspect (another run's cleanup) is left out, not an error: the
    SDK's default raises NotFound for it."""
    return list((dc or client()).containers.list(all=True, filters={"label": label}, ignore_removed=True))


def containers_of_run(run_id: str, dc: docker.DockerClient | None = None) -> list[Any]:
    """Every container carrying this run's label, running or not (resume finds the dead engine's)."""
    return labelled(f"{LABEL_RUN}={run_id}", dc)
