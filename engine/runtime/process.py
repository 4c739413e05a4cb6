"""A server as a local subprocess in its own process group; the group ends with the window."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from engine.runtime.base import ENV_DIR_ID, LABEL_DIR_ID, Host, LaunchError, LaunchPlan, local_host


class ProcessServer:
    def __init__(self, plan: LaunchPlan) -> None:
        # Its name and its run directory's identity: a resume proves a stray is its own by them.
        env = {**os.environ, **plan.env, **plan.secret_env, "RULER_CONTAINER": plan.name,
               ENV_DIR_ID: plan.labels.get(LABEL_DIR_ID, "")}
        # A new session: a hangup of ruler's terminal does not reach it, and killpg takes it all.
        # A place's CPU set: the server and every thread it starts stay on those CPUs.
        argv = ["taskset", "-c", plan.cpus, *plan.argv] if plan.cpus else plan.argv
        try:
            self._proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )
        except OSError as e:
            raise LaunchError(f"could not start {plan.argv[0]}: {e}") from e
        self.base_url = f"http://127.0.0.1:{plan.host_port}"
        self.identity: dict[str, object] = {"runtime": "process", "pid": self._proc.pid,
                                            "name": plan.name}

    def lines(self) -> Iterator[str]:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            yield raw.decode("utf-8", "replace").rstrip("\r\n")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def exit_code(self) -> int | None:
        return self._proc.poll()

    def stop(self, grace: float = 10.0) -> None:
        if self._proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self._proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


class ProcessRuntime:
    """A local subprocess per window; a killed engine's servers are found by the pids it journaled."""

    name = "process"

    def start(self, plan: LaunchPlan) -> ProcessServer:
        return ProcessServer(plan)

    def preflight(self, run_dir: Path) -> None:
        """Nothing to check up front: a window that cannot start is rejected with the reason."""

    def stop_strays(self, run_id: str, dir_id: str,
                    servers: Iterable[dict[str, object]]) -> list[dict[str, object]]:
        stopped: list[dict[str, object]] = []
        for ident in servers:
            pid, name = ident.get("pid"), ident.get("name")
            if isinstance(pid, int) and name and stop_stray(pid, str(name), dir_id):
                stopped.append({"name": name, "pid": pid})
        return stopped

    def host(self, node: str | None = None) -> Host:
        return local_host()


def stop_stray(pid: int, name: str, dir_id: str) -> bool:
    """End a server a dead engine left behind, only if its environment proves it is that server
    of this run directory (``dir_id``; empty: nothing is proven)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    if f"RULER_CONTAINER={name}".encode() not in environ:
        return False  # the pid was reused by something that is not ours
    if not dir_id or f"{ENV_DIR_ID}={dir_id}".encode() not in environ:
        print(f"ruler: left process {pid} ({name}) running: it was started for another run "
              "directory (this one is a copy; that run may be live) or by an earlier ruler: end "
              "it yourself once its run is over", file=sys.stderr)
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return True
        for _ in range(50):
            if _gone(pid):
                return True
            time.sleep(0.1)
    return True


def _gone(pid: int) -> bool:
    """Whether the process has ended: no such pid, or a zombie its parent has not reaped yet (it
    runs nothing: waiting for the reap would wait on whoever started it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]
