"""Sessions in parallel on places, on real parts: the llama.cpp testbed's llama-server, the Docker
engine (reached once through its socket and once over SSH, through a real sshd on 127.0.0.1 and
ruler's own ``ssh`` children), a host that does not answer (a listener on 127.0.0.1 that never
speaks: ssh waits on its banner), process places pinned to CPU sets. Two sessions at once as Slurm jobs are in
test_slurm_cluster.py, with every other test that submits to the one-node cluster (a module runs on
one worker: jobs of two modules at once would queue behind each other's and change Slurm's reasons).

Campaigns are tiny (one class, C1, two reps of two requests of 8 tokens, no quality phase): what is
under test is where each session runs and when, not the figures. Every campaign and container name
carries a unique suffix (other runs share this Docker engine).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import testbed as tb_mod
from engine.errors import EXIT_OK, EXIT_STOPPED
from engine.record.fold import fold
from engine.record.journal import Event, read_events
from tests.integration.live import journaled_receipts

RULER = [sys.executable, "-m", "engine"]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CONNECT_S = 5  # timeouts.connect of the run with a silent host among its places

CAMPAIGN = """\
name: {name}
server: llamacpp
runtime: {runtime}
docker:
  image: ${{testbed.image}}
  keep: true
process:
  command: ["${{testbed.llama_server}}"]
control:
  model: ${{testbed.models}}/SmolLM2-135M-Instruct.Q4_1.gguf
  args: {{-m: "${{model}}", -c: 1024, -np: 1, -t: 1, -fa: "off", --metrics: true}}
windows:
  - name: ctx
    axis: context 2048
    change:
      args: {{-c: 2048}}
sessions:
{sessions}
places:
{places}
control_position: first
workload:
  classes:
    prose: {{prompts: ["Write one sentence about the sea."]}}
  concurrency: [1]
  reps: 2
  requests_per_rep: 2
  max_tokens: 8
leak: {{min_concurrency: 8, spread: 0.5, max_reruns: 0}}
timeouts: {{boot: 120, request: 60, queue: 300, connect: {connect}}}
quality: {{enabled: false}}
"""


def write_campaign(tmp_path: Path, runtime: str, places: list[dict[str, str]],
                   sessions: int = 2, connect: float = 10) -> tuple[Path, str]:
    name = f"places-{runtime}-{uuid.uuid4().hex[:6]}"
    text = CAMPAIGN.format(
        name=name, runtime=runtime, connect=connect,
        sessions="\n".join(f"  s{i}: [ctx]" for i in range(1, sessions + 1)),
        places="\n".join("  - {" + ", ".join(f"{k}: {v!r}" for k, v in p.items()) + "}"
                         for p in places))
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path, name


def only_run(results: Path) -> Path:
    (run,) = [p for p in results.iterdir() if (p / "journal.jsonl").exists()]
    return run


def journal(run: Path) -> list[Event]:
    return list(read_events(run / "journal.jsonl"))


def spans(run: Path, start: str = "window_started") -> dict[str, tuple[float, float]]:
    """Each window's time up: from ``start`` (window_started, or window_placed for a batch job
    that runs) to its window_finished or window_rejected."""
    began: dict[str, float] = {}
    out: dict[str, tuple[float, float]] = {}
    for e in journal(run):
        key = f"{e.get('session')}-{e.get('window')}"
        if e["kind"] == start:
            began[key] = e["ts"]
        elif e["kind"] in ("window_finished", "window_rejected") and key in began:
            out[key] = (began.pop(key), e["ts"])
    return out


def overlap(run: Path, a: str, b: str, start: str = "window_started") -> float:
    """Seconds during which a window of session ``a`` and one of session ``b`` were both up."""
    s = spans(run, start)
    return max((min(x[1], y[1]) - max(x[0], y[0]) for kx, x in s.items() for ky, y in s.items()
                if kx.startswith(f"{a}-") and ky.startswith(f"{b}-")), default=0.0)


def session_places(run: Path) -> dict[str, str]:
    return {e["session"]: e["place"] for e in journal(run) if e["kind"] == "session_started"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_port() -> int:
    """A port nothing listens on (bound, then closed at once)."""
    return free_port()


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI and is missing")
    pytest.skip(f"{what} is not available here")


# ---------------------------------------------------------------- an SSH daemon on 127.0.0.1


def _apt_install(package: str) -> None:
    if os.geteuid() != 0:
        _missing(f"{package} (not installed, and installing it needs root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
        if done.returncode != 0:
            _missing(f"{package} ({' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]})")


@pytest.fixture(scope="module")
def ssh_docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The local Docker engine as another machine's: ``ssh://root@127.0.0.1:PORT`` through an sshd
    of this test's own (its own config, host key and authorized key, on a free port) and the
    ``ssh`` client pointed at them by a config file; the user's ~/.ssh is not read or written.
    Yields the docker_host and a directory to put first on the engine's PATH (an ``ssh`` that
    uses that config: the docker SDK runs ``ssh`` from PATH)."""
    if not shutil.which("sshd") and not Path("/usr/sbin/sshd").exists():
        _apt_install("openssh-server")
    if not shutil.which("ssh"):
        _apt_install("openssh-client")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\n"
        # The pytest temp directory is under /tmp (world-writable): sshd's ownership checks of
        # the key file's directories would refuse it.
        "StrictModes no\n")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    sshd = subprocess.Popen([shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f",
                             str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=(d / "sshd.log").open("w"))
    host_pub = (d / "host_key.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (d / "ssh_config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {d / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n  LogLevel ERROR\n")
    bin_dir = d / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nexec {shutil.which('ssh')} -F {d / 'ssh_config'} \"$@\"\n")
    (bin_dir / "ssh").chmod(0o755)
    try:
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run([str(bin_dir / "ssh"), "-p", str(port), "root@127.0.0.1",
                                    "docker version --format '{{.Server.Version}}'"],
                                   capture_output=True, text=True, timeout=30, check=False)
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline or sshd.poll() is not None:
                pytest.fail(f"sshd on 127.0.0.1:{port} does not let this test's key run docker: "
                            f"{probe.stderr.strip()}\n{(d / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield f"ssh://root@127.0.0.1:{port}", bin_dir
    finally:
        sshd.terminate()
        sshd.wait(10)


def remove_containers(docker_client: Any, name: str) -> None:
    for c in docker_client.containers.list(all=True, filters={"label": f"ruler.campaign={name}"}):
        c.remove(force=True)


class SilentHost:
    """A host that does not answer: a TCP listener on 127.0.0.1 that accepts each connection and
    never sends a byte (ssh waits on its banner), holding what it accepted."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.held: list[socket.socket] = []
        self.accepted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def docker_host(self) -> str:
        return f"ssh://root@127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(conn)
            self.accepted.set()

    def all_hung_up(self, timeout: float) -> bool:
        """Every connection it accepted was closed by its client (the ssh child is gone): read
        past what the client sent (ssh's own banner) to the end."""
        for conn in self.held:
            conn.settimeout(timeout)
            try:
                while conn.recv(4096):
                    pass
            except TimeoutError:
                return False
        return bool(self.held)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent_host() -> Iterator[SilentHost]:
    host = SilentHost()
    yield host
    host.close()


# ---------------------------------------------------------------- Docker places


@pytest.fixture(scope="module")
def docker_run(testbed_image: str, docker_client: Any, ssh_docker_host: tuple[str, Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One run of four sessions on four Docker places: the local engine on CPU 0, the same engine
    over SSH on CPU 1, a daemon nobody runs (a closed TCP port) and a host that does not answer
    (ssh waits on its banner: timeouts.connect bounds the wait)."""
    tmp = tmp_path_factory.mktemp("docker-places")
    docker_host, bin_dir = ssh_docker_host
    down = f"tcp://127.0.0.1:{closed_port()}"
    silent = SilentHost()
    spec, name = write_campaign(tmp, "docker", [
        {"name": "local", "cpus": "0"}, {"name": "over_ssh", "docker_host": docker_host, "cpus": "1"},
        {"name": "down", "docker_host": down}, {"name": "silent", "docker_host": silent.docker_host}],
        sessions=4, connect=CONNECT_S)
    results = tmp / "results"
    started = time.monotonic()
    proc = subprocess.run([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    print(proc.stdout[-6000:], proc.stderr[-3000:])
    try:
        yield {"run": only_run(results), "proc": proc, "name": name, "down": down,
               "silent": silent.docker_host, "seconds": time.monotonic() - started}
    finally:
        silent.close()
        remove_containers(docker_client, name)


@pytest.mark.slow
def test_two_docker_places_one_over_ssh_run_their_sessions_at_once_each_on_its_cpus(
        docker_run: dict[str, Any], docker_client: Any) -> None:
    run, proc = docker_run["run"], docker_run["proc"]
    assert proc.returncode == EXIT_OK, proc.stderr
    where = session_places(run)
    assert sorted(where.values()) == ["down", "local", "over_ssh", "silent"]
    on = {place: session for session, place in where.items()}
    a, b = on["local"], on["over_ssh"]
    st = fold(journal(run))
    for s in (a, b):
        assert st.windows[f"{s}-control"].status == st.windows[f"{s}-ctx"].status == "done"
    # The two sessions' windows were up at the same time (the journal's own timestamps).
    assert overlap(run, a, b) > 1.0, spans(run)
    # Every window's container ran on its place's CPU set; the one over SSH was reached at the
    # port its daemon published, read back from it.
    cpus = {a: "0", b: "1"}
    for e in journal(run):
        if e["kind"] == "server_started" and e["session"] in cpus:
            c = docker_client.containers.get(e["id"])
            assert c.attrs["HostConfig"]["CpusetCpus"] == cpus[e["session"]], e["name"]
            assert c.labels["ruler.window"] == f"{e['session']}-{e['window']}"
    # session_started names each place, and its machine as the daemon described it (over SSH too).
    info = docker_client.info()
    for e in journal(run):
        if e["kind"] == "session_started" and e["session"] in cpus:
            assert e["where"]["cpus"] == cpus[e["session"]]
            assert (e["host"]["name"], e["host"]["cpus"], e["host"]["docker"]) == (
                info["Name"], info["NCPU"], info["ServerVersion"])


def test_an_unreachable_place_fails_its_session_only(docker_run: dict[str, Any]) -> None:
    """A daemon that refuses (a closed port) and a host that does not answer (silent past its
    banner) each cost one session: its windows are rejected naming the place, the host and what
    ssh said, within timeouts.connect; the other places' sessions run to the end."""
    run, proc = docker_run["run"], docker_run["proc"]
    assert proc.returncode == EXIT_OK, proc.stderr  # rejected windows are results
    st = fold(journal(run))
    answers = {"down": f"docker host {docker_run['down']} does not answer (docker info): ",
               "silent": f"docker host {docker_run['silent']} does not answer (docker info): "
                         "Connection timed out during banner exchange"}
    env = json.loads((run / "env.json").read_text())
    began = journal(run)[0]["ts"]
    lost = []
    for place, answer in answers.items():
        (session,) = [s for s, p in st.session_places.items() if p == place]
        lost.append(session)
        for w in ("control", "ctx"):
            ws = st.windows[f"{session}-{w}"]
            assert ws.status == "rejected"
            assert ws.reason.startswith(f"place {place} did not answer as its session began: {answer}"), \
                ws.reason
            assert (run / "windows" / f"{session}-{w}" / "rejection.txt").is_file()
        assert env["places"][place]["host"]["error"].startswith(answer)
        assert env["places"][place]["sessions"] == [session]
        (started,) = [e for e in journal(run) if e["kind"] == "session_started" and e["place"] == place]
        waited = started["ts"] - began
        print(f"place {place}: answered after {waited:.1f} s ({started['host']['error']})")
        assert waited < CONNECT_S + 60, waited  # the connect timeout and a loaded machine, not minutes
    others = [s for s in st.session_places if s not in lost]
    assert all(st.windows[f"{s}-{w}"].status == "done" for s in others for w in ("control", "ctx"))
    print(f"four Docker places, one run: {docker_run['seconds']:.1f} s")


# ---------------------------------------------------------------- abort and SIGTERM during a probe


def start_engine(spec: Path, results: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)


def ended_within(engine: subprocess.Popen[str], seconds: float) -> tuple[int, float, str]:
    """The engine's exit code, the seconds it took to exit from now, and what it printed."""
    began = time.monotonic()
    try:
        out, _ = engine.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.kill(engine.pid, signal.SIGKILL)
        out, _ = engine.communicate()
        pytest.fail(f"the engine did not end within {seconds} s:\n{out[-3000:]}")
    return engine.returncode, time.monotonic() - began, out


def test_ctl_abort_during_the_probe_of_a_host_that_does_not_answer_ends_the_run_at_once(
        testbed_image: str, silent_host: SilentHost, tmp_path: Path) -> None:
    """One place, its host silent, timeouts.connect 600 s: `ruler ctl abort` while ssh waits on its
    banner ends the run (the ssh child killed), not after the connect timeout."""
    spec, _ = write_campaign(tmp_path, "docker", [{"name": "silent", "docker_host": silent_host.docker_host}],
                             sessions=1, connect=600)
    results = tmp_path / "results"
    engine = start_engine(spec, results)
    try:
        assert silent_host.accepted.wait(60), "the engine never dialled the place's host"
        ctl = subprocess.run([*RULER, "ctl", str(only_run(results)), "abort"], capture_output=True,
                             text=True, timeout=60)
        assert ctl.returncode == 0, ctl.stderr
        code, took, out = ended_within(engine, 120)
    finally:
        if engine.poll() is None:
            os.kill(engine.pid, signal.SIGKILL)
    print(f"ctl abort during the probe: the engine ended {took:.2f} s after the abort was answered")
    assert code == EXIT_STOPPED, out[-3000:]
    assert silent_host.all_hung_up(10)  # the ssh child was killed, not left waiting
    st = fold(journal(only_run(results)))
    assert st.status == "aborted"
    (started,) = [e for e in journal(only_run(results)) if e["kind"] == "session_started"]
    assert "cut short, the run is aborted" in started["host"]["error"]


@pytest.mark.slow
def test_sigterm_while_one_place_waits_on_its_host_ends_the_run_and_status_names_no_finished_window(
        testbed_image: str, docker_client: Any, silent_host: SilentHost, tmp_path: Path) -> None:
    """Two places: the local engine runs its session to the end while the other's host stays
    silent (timeouts.connect 600 s). Meanwhile `ruler status` has no current window (the last one
    started is over); SIGTERM then ends the run at once."""
    spec, name = write_campaign(tmp_path, "docker", [
        {"name": "local", "cpus": "0"}, {"name": "silent", "docker_host": silent_host.docker_host}],
        sessions=2, connect=600)
    results = tmp_path / "results"
    engine = start_engine(spec, results)
    try:
        assert silent_host.accepted.wait(60), "the engine never dialled the place's host"
        deadline = time.monotonic() + 300
        while True:  # until the local place's session is over (its two windows done)
            run = only_run(results)
            st = fold(journal(run))
            local = [s for s, p in st.session_places.items() if p == "local"]
            if local and all(st.windows[f"{local[0]}-{w}"].status == "done" for w in ("control", "ctx")):
                break
            assert engine.poll() is None, engine.communicate()[0][-3000:]
            assert time.monotonic() < deadline, st.windows
            time.sleep(0.2)
        status = subprocess.run([*RULER, "status", str(run), "--json"], capture_output=True, text=True,
                                timeout=60)
        now = json.loads(status.stdout)
        assert now["status"] == "running" and now["current"]["window"] is None, now
        assert now["sessions"] == [], now
        os.kill(engine.pid, signal.SIGTERM)
        code, took, out = ended_within(engine, 120)
    finally:
        if engine.poll() is None:
            os.kill(engine.pid, signal.SIGKILL)
        remove_containers(docker_client, name)
    print(f"SIGTERM while a place waits on its host: the engine ended {took:.2f} s after it")
    assert code == EXIT_STOPPED, out[-3000:]
    assert silent_host.all_hung_up(10)
    events = journal(run)
    assert [e["signal"] for e in events if e["kind"] == "signal"] == ["SIGTERM"]
    assert fold(events).status == "aborted"


# ---------------------------------------------------------------- kill -9 and resume


@pytest.mark.slow
def test_kill_9_with_two_sessions_in_flight_then_resume_loses_no_finished_rep(
        testbed: tb_mod.Testbed, tmp_path: Path) -> None:
    spec, _ = write_campaign(tmp_path, "process", [{"name": "a", "cpus": "0"}, {"name": "b", "cpus": "1"}])
    results = tmp_path / "results"
    engine = subprocess.Popen([*RULER, "run", str(spec), "--headless", "--results-dir", str(results)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            runs = [p for p in results.glob("*") if (p / "journal.jsonl").exists()]
            events = journal(runs[0]) if runs else []
            done_in = {e["session"] for e in events if e["kind"] == "rep_done"}
            if done_in >= {"s1", "s2"}:
                break
            assert engine.poll() is None, engine.stderr.read() if engine.stderr else ""
            assert time.monotonic() < deadline, "both sessions never had a rep done"
            time.sleep(0.05)
        os.kill(engine.pid, signal.SIGKILL)
        engine.wait(10)
    finally:
        if engine.poll() is None:
            os.kill(engine.pid, signal.SIGKILL)
    run = runs[0]
    before = journal(run)
    placed = session_places(run)
    assert sorted(placed) == ["s1", "s2"] and sorted(placed.values()) == ["a", "b"]
    assert not any(e["kind"] == "run_finished" for e in before)
    reps_before = journaled_receipts(run, before)
    assert len(reps_before) >= 4, reps_before.keys()  # both sessions' warm passes and first reps
    done_before = [e for e in before if e["kind"] == "rep_done"]
    assert {e["session"] for e in done_before} == {"s1", "s2"}
    stopped = {(e["session"], e["window"]) for e in before if e["kind"] == "server_stopped"}
    # A server whose stop had begun (server_stopping journaled, the kill before server_stopped)
    # had its SIGTERM and may be gone by the resume: seen, a window done a moment before the kill.
    going = {(e["session"], e["window"]) for e in before if e["kind"] == "server_stopping"}
    started = [e for e in before if e["kind"] == "server_started"
               and (e["session"], e["window"]) not in stopped]
    live = {e["pid"] for e in started if (e["session"], e["window"]) not in going}
    ending = {e["pid"] for e in started if (e["session"], e["window"]) in going}
    assert live | ending, "no server was up at the kill"
    for pid in live:  # the servers outlived their engine
        os.kill(pid, 0)

    out = subprocess.run([*RULER, "run", "--resume", str(run), "--headless"], capture_output=True,
                         text=True, timeout=600)
    print(out.stdout[-4000:], out.stderr[-2000:])
    assert out.returncode == EXIT_OK, out.stderr
    after = journal(run)
    assert after[:len(before)] == before  # the journal was only appended to
    resumed = after[next(i for i, e in enumerate(after) if e["kind"] == "run_resumed"):]
    # The killed engine's servers were found and stopped (one already stopping, if still there).
    strays = {e["pid"] for e in resumed if e["kind"] == "stray_stopped"}
    assert live <= strays <= live | ending, (strays, live, ending)
    for pid in live | ending:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # Each session went on on its own place, with that place's CPU set.
    assert {e["session"]: e["place"] for e in resumed if e["kind"] == "session_started"} == placed
    cpus = {"a": "0", "b": "1"}
    for e in resumed:
        if e["kind"] == "window_started":
            assert e["plan"]["cpus"] == cpus[placed[e["session"]]], e
    # Every rep finished before the kill is still there, byte for byte, and still in the journal.
    for path, data in reps_before.items():
        assert path.read_bytes() == data, path
    assert all(e in after for e in done_before)
    st = fold(after)
    assert st.status == "finished"
    assert {w.status for w in st.windows.values()} == {"done"}
    for e in done_before:  # a row finished before the kill kept its reps: not measured again
        row = st.rows[f"{e['session']}-{e['window']}/{e['class']}/c{e['concurrency']}"]
        if row.attempt == e["attempt"]:
            assert row.files[e["attempt"]][e["rep"]] == e["file"]

