"""A resume stops the servers a killed engine left running: only those it can prove are its own
run directory's. A copy of a run directory (cp -a) carries the run's id and its journal's server
identities; resumed, it must leave the servers of the directory it was copied from (that run may be
live). Each runtime's servers carry the directory's identity (results.dir_identity): a container
its label, a batch job its comment, a process its environment. The real Docker engine's case is
tests/integration/test_prune.py's.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.runtime import process as process_rt
from engine.runtime.base import LaunchPlan, stray_mark
from engine.runtime.docker import DockerRuntime
from engine.runtime.process import ProcessRuntime
from engine.runtime.slurm import server as slurm_server
from engine.runtime.slurm.commands import JobState

RUN = "2026-01-02-c.abcd1234"
HERE, THERE = "host:1:7", "host:1:8"  # this directory's identity; the one it was copied from


@dataclass
class Container:
    labels: dict[str, str]
    name: str
    status: str = "running"
    id: str = "c0"
    done: list[str] = field(default_factory=list)

    def stop(self, timeout: int) -> None:
        self.done.append("stop")


class Daemon:
    """A stand-in Docker client: lists containers by their ``ruler.run`` label, as Docker does."""

    def __init__(self, *made: Container) -> None:
        self.containers = self
        self.made = made

    def list(self, **query: Any) -> list[Container]:
        key, _, value = query["filters"]["label"].partition("=")
        return [c for c in self.made if c.labels.get(key) == value]


def labels(dir_id: str | None) -> dict[str, str]:
    out = {"ruler.campaign": "c", "ruler.run": RUN, "ruler.window": "s1-control"}
    return out | ({"ruler.dir": "/results/x", "ruler.dir.id": dir_id} if dir_id else {})


def test_docker_stops_only_its_own_directorys_containers(capsys: pytest.CaptureFixture[str]) -> None:
    mine = Container(labels(HERE), "ruler-mine")
    original = Container(labels(THERE), "ruler-original")  # the live run this one was copied from
    unlabelled = Container(labels(None), "ruler-old")  # an earlier ruler's: whose is unprovable
    rt = DockerRuntime()
    rt._dc = Daemon(mine, original, unlabelled)  # type: ignore[assignment]
    stopped = rt.stop_strays(RUN, HERE, [])
    assert [s["name"] for s in stopped] == ["ruler-mine"]
    assert mine.done == ["stop"] and original.done == [] and unlabelled.done == []
    err = capsys.readouterr().err
    assert "left ruler-original running: it belongs to run directory /results/x" in err
    assert "left ruler-old running: it does not name its run directory" in err


def test_docker_without_an_identity_of_its_own_stops_nothing() -> None:
    mine = Container(labels(HERE), "ruler-mine")
    rt = DockerRuntime()
    rt._dc = Daemon(mine)  # type: ignore[assignment]
    assert rt.stop_strays(RUN, "", []) == [] and mine.done == []


def test_slurm_ends_only_its_own_directorys_jobs(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    def job(n: str, comment: str) -> JobState:
        return JobState(job=n, name="ruler-c-s1-control", comment=comment, state="RUNNING",
                        reason="", node="n1")

    jobs = [job("1", stray_mark(RUN, HERE)), job("2", stray_mark(RUN, THERE)),
            job("3", f"ruler-run={RUN}")]  # the last: an earlier ruler's, naming no directory
    ended: list[str] = []
    monkeypatch.setattr(slurm_server, "squeue", lambda: jobs)
    monkeypatch.setattr(slurm_server, "end_job", ended.append)
    stopped = slurm_server.SlurmRuntime().stop_strays(RUN, HERE, [])
    assert ended == ["1"] and [s["job"] for s in stopped] == ["1"]
    err = capsys.readouterr().err
    assert "left batch job 2 (ruler-c-s1-control) running" in err
    assert "left batch job 3 (ruler-c-s1-control) running" in err


@pytest.fixture
def sleeper() -> Iterator[Any]:
    """A process server (sleep) started as a run whose directory is THERE starts it."""
    plan = LaunchPlan(name="ruler-c-s1-control-abcd1234", argv=["sleep", "60"], env={},
                      secret_env={}, host_port=9, labels=labels(THERE))
    server = ProcessRuntime().start(plan)
    # Until the child has exec'd, its /proc environ is the test's: wait for it to be the server's.
    environ = Path(f"/proc/{server.identity['pid']}/environ")
    for _ in range(1000):
        if f"RULER_CONTAINER={plan.name}".encode() in environ.read_bytes():
            break
        time.sleep(0.01)
    yield server
    server.stop()


def test_a_process_of_the_directory_copied_from_is_left(sleeper: Any) -> None:
    ident = dict(sleeper.identity)  # as the copy's journal recorded it
    assert ProcessRuntime().stop_strays(RUN, HERE, [ident]) == []
    assert sleeper.alive()
    assert ProcessRuntime().stop_strays(RUN, THERE, [ident]) == [
        {"name": ident["name"], "pid": ident["pid"]}]
    assert not sleeper.alive()


def test_a_process_check_reads_the_servers_own_environment() -> None:
    """A pid reused by a process that is not ruler's server proves nothing."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert not process_rt.stop_stray(other.pid, "ruler-c-s1-control-abcd1234", THERE)
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
