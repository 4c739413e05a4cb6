"""Listing a run's containers while another run removes its own: Docker lists ids, then the SDK
inspects each one, and a container removed between the two must be left out, not end ``ruler
prune`` (or a resume's stray stop) with "No such container". The Docker SDK runs for real here over
a stand-in API that injects that race: it lists two containers and one is gone when inspected. The
real engine's prune is tests/integration/test_prune.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from engine.runtime import docker as rd


class RacingApi:
    """Lists two containers; the second is removed before it is inspected (fault injected)."""

    def __init__(self) -> None:
        self.filters: list[Any] = []

    def containers(self, **kw: Any) -> list[dict[str, str]]:
        self.filters.append(kw.get("filters"))
        return [{"Id": "kept"}, {"Id": "gone"}]

    def inspect_container(self, cid: str) -> dict[str, Any]:
        if cid == "gone":
            raise docker.errors.NotFound(f"No such container: {cid}")
        return {"Id": cid, "Name": "/ruler-kept", "Config": {"Labels": {}}, "State": {"Status": "exited"}}


def racing_client() -> tuple[docker.DockerClient, RacingApi]:
    dc = docker.DockerClient.__new__(docker.DockerClient)  # no daemon: the stand-in API answers
    dc.api = api = RacingApi()  # type: ignore[assignment]
    return dc, api


def test_a_container_removed_between_list_and_inspect_is_left_out() -> None:
    dc, api = racing_client()
    assert [c.id for c in rd.labelled("ruler.campaign", dc)] == ["kept"]
    assert [c.id for c in rd.containers_of_run("r.1", dc)] == ["kept"]
    assert api.filters == [{"label": "ruler.campaign"}, {"label": "ruler.run=r.1"}]
    with pytest.raises(docker.errors.NotFound):  # the SDK's own default, which ruler must not use
        dc.containers.list(all=True)


def test_prune_goes_on_when_a_listed_container_is_removed_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.commands.prune import cmd_prune

    dc, _ = racing_client()
    monkeypatch.setattr(rd, "client", lambda: dc)
    assert cmd_prune([], None, True, str(tmp_path)) == 0
    out = capsys.readouterr()
    assert "left     ruler-kept (exited, run ?)" in out.out and "No such container" not in out.err
