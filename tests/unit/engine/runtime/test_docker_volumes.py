"""A Docker window with volumes is still published on this machine's loopback port: the daemon
is handed the create call of a fake client (no Docker engine here) and the URL ruler polls is read."""

from __future__ import annotations

from typing import Any

import docker
import pytest

from engine.runtime.base import LaunchPlan
from engine.runtime.docker import DockerServer


class FakeContainer:
    id = "c0ffee"
    image = type("Image", (), {"id": "sha256:fake"})()

    def start(self) -> None:
        pass


class FakeContainers:
    def __init__(self) -> None:
        self.created: dict[str, Any] = {}

    def get(self, name: str) -> FakeContainer:
        raise docker.errors.NotFound(name)

    def create(self, image: str, **kw: Any) -> FakeContainer:
        self.created = {"image": image, **kw}
        return FakeContainer()


class FakeClient:
    def __init__(self) -> None:
        self.containers = FakeContainers()


@pytest.mark.parametrize("volumes", [[], ["/opt/env:/opt/env:ro"], ["/data:/in"]])
def test_volumes_leave_the_port_on_this_machine(volumes: list[str]) -> None:
    """The vLLM image mounts its environment (live: the window was published on 0.0.0.0 at a
    random port and polled at http://<the volume's path>:<port>, so it never got ready)."""
    dc = FakeClient()
    plan = LaunchPlan("ruler-t-s1-control-x", ["--model", "/m"], {}, {}, 40123, 8000,
                      image="img:1", mounts=["/models"], volumes=volumes)
    server = DockerServer(plan, dc)  # type: ignore[arg-type]  # the fake has what create needs
    assert dc.containers.created["ports"] == {"8000/tcp": ("127.0.0.1", 40123)}
    assert server.base_url == "http://127.0.0.1:40123"
    binds = dc.containers.created["volumes"]
    assert binds["/models"] == {"bind": "/models", "mode": "ro"}
    for spec in volumes:
        source, bind, *mode = spec.split(":")
        assert binds[source] == {"bind": bind, "mode": mode[0] if mode else "rw"}
