"""A place's Docker daemon over ssh (engine.runtime.sshdial and DockerRuntime over it): the ssh
options that bound every wait on the host, what a host that fails says, and an abort that cuts a
call short. ``ssh`` here is a FAKE on PATH, a shell script that injects the fault (an error and
exit 255, or a hang); real ssh to a silent listener and to a real sshd is in
tests/integration/test_places_live.py."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.campaign.machines import Timeouts
from engine.runtime.base import LaunchError
from engine.runtime.docker import DockerRuntime
from engine.runtime.sshdial import DEFAULT_CONNECT_S, Cut, SshDial, ssh_argv

pytestmark = pytest.mark.timeout(60)


def test_the_ssh_command_bounds_the_connect_and_a_silent_link_and_never_prompts() -> None:
    assert ssh_argv("ssh://ruler@10.0.0.7:2222", 10) == [
        "ssh", "-o", "ConnectTimeout=10", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=4",
        "-o", "ServerAliveCountMax=3", "-l", "ruler", "-p", "2222",
        "--", "10.0.0.7", "docker", "system", "dial-stdio"]
    # No user, no port: ssh's own (its config's) are used; a fraction of a second rounds up.
    argv = ssh_argv("ssh://gpu-box", 0.5)
    assert argv[:3] == ["ssh", "-o", "ConnectTimeout=1"] and "ServerAliveInterval=1" in argv
    assert "-l" not in argv and "-p" not in argv and argv[-5:] == ["--", "gpu-box", "docker", "system",
                                                                   "dial-stdio"]


@pytest.mark.parametrize("url", ["ssh://", "ssh://host:port", "tcp://host:2375"])
def test_a_docker_host_ssh_cannot_reach_is_named(url: str) -> None:
    with pytest.raises(LaunchError, match=f"docker host {url}"):
        ssh_argv(url, 5)


def test_the_runtime_default_is_the_campaign_default() -> None:
    """A runtime asked without a campaign (a test, a command) bounds its probe as a campaign does."""
    assert Timeouts().connect == DEFAULT_CONNECT_S


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory first on PATH; a test writes its fault-injecting ``ssh`` there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    yield bin_dir / "ssh"


def write_ssh(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_a_host_that_refuses_fails_the_call_with_what_ssh_said(fake_ssh: Path) -> None:
    write_ssh(fake_ssh, 'echo "ssh: connect to host 10.0.0.7 port 22: Connection refused" >&2; exit 255')
    rt = DockerRuntime("ssh://ruler@10.0.0.7", 5)
    for call in (rt.host, lambda: rt.stop_strays("run", "host:1:2", [])):
        with pytest.raises(LaunchError) as e:
            call()
        assert str(e.value).startswith("docker host ssh://ruler@10.0.0.7 does not answer (")
        assert str(e.value).endswith("): ssh: connect to host 10.0.0.7 port 22: Connection refused")


def test_an_abort_cuts_a_call_short_and_kills_its_ssh(fake_ssh: Path, tmp_path: Path) -> None:
    """The host holds the call (ssh never answers nor exits): the abort ends it at once, and the
    ssh child is killed, not left waiting."""
    pids = tmp_path / "pids"
    write_ssh(fake_ssh, f'echo $$ >> {pids}; exec sleep 300')
    abort = threading.Event()
    rt = DockerRuntime("ssh://ruler@10.0.0.7", 300, abort)
    timer = threading.Timer(0.5, abort.set)
    timer.start()
    began = time.monotonic()
    with pytest.raises(Cut, match=r"^docker info on docker host ssh://ruler@10\.0\.0\.7: cut short, "
                                  r"the run is aborted$"):
        rt.host()
    took = time.monotonic() - began
    assert took < 10, took  # the abort's 0.5 s and the poll, far from the 300 s ssh would hold it
    (pid,) = pids.read_text().split()
    assert subprocess.run(["kill", "-0", pid], capture_output=True).returncode != 0  # killed
    with pytest.raises(Cut, match="not begun, the run is aborted"):  # an abort already set
        rt.host()


def test_a_dial_serves_each_connection_to_its_own_ssh_and_closes_them(fake_ssh: Path) -> None:
    """The socket's bytes reach ssh's stdin and come back from its stdout (``cat`` stands for
    ``docker system dial-stdio``); close kills the children and removes the socket."""
    write_ssh(fake_ssh, "exec cat")
    dial = SshDial("ssh://ruler@10.0.0.7", 5)
    conns = []
    for word in (b"ping", b"pong"):
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(dial.path))
        c.sendall(word)
        assert c.recv(16) == word
        conns.append(c)
    assert dial.spawned == 2 and dial.error() == ""
    dial.close()
    assert all(c.recv(16) == b"" for c in conns)  # each child's end of its connection closed
    assert not dial.path.exists()


def test_a_server_whose_host_goes_away_is_not_alive_and_stops_without_raising(fake_ssh: Path) -> None:
    """Mid-window the place's host stops answering (ssh exits 255 on every connection): the
    container's state cannot be read, so the server is not alive (its window fails, the run goes
    on), and its stop returns rather than raise out of the window."""
    import docker

    from engine.runtime.base import LaunchPlan
    from engine.runtime.docker import DockerServer

    write_ssh(fake_ssh, 'echo "Connection to 10.0.0.7 closed by remote host." >&2; exit 255')
    dial = SshDial("ssh://ruler@10.0.0.7", 5)
    try:
        # Built as when the host answered: an API version given, so nothing is asked of it yet.
        dc = docker.DockerClient(base_url=dial.base_url, version="1.41", timeout=5)
        server = DockerServer.__new__(DockerServer)  # as its start left it, minus the start
        server._c = dc.containers.prepare_model({"Id": "0" * 64})
        server._plan = LaunchPlan(name="ruler-x", argv=[], env={}, secret_env={}, host_port=1)
        server._stopped = threading.Event()
        assert not server.alive() and server.exit_code() is None
        server.stop()
    finally:
        dial.close()
