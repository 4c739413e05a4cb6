"""``ruler prune``: bad input is exit 2, saying so; which containers it may remove (judge), on
stand-in containers. Pruning real containers is tests/integration/test_prune.py's."""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.commands.prune import judge
from engine.record import results
from engine.record.liveness import LOCK, PID, lock_state
from tests.cli import ruler
from tests.paths import FIXTURES

NOW = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)


def test_prune_bad_input(tmp_path: Path) -> None:
    out = ruler("prune", str(tmp_path), timeout=120)
    assert out.returncode == 2 and "is not a ruler run directory" in out.stderr
    out = ruler("prune", "--older-than", "soon", timeout=120)
    assert out.returncode == 2 and "--older-than 'soon': expected a duration" in out.stderr


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_older_than_is_refused_not_read_as_no_limit(tmp_path: Path, value: str) -> None:
    out = ruler("prune", "--older-than", value, "--results-dir", str(tmp_path), timeout=120)
    assert out.returncode == 2, out.stdout
    assert f"--older-than {value!r}: empty" in out.stderr and "Traceback" not in out.stderr


@dataclass
class Container:
    """What judge reads of a Docker container."""

    labels: dict[str, str]
    name: str = "ruler-c"
    status: str = "exited"
    attrs: dict[str, Any] = field(default_factory=lambda: {"Created": "2026-01-01T00:00:00Z"})


def run_dir(parent: Path, name: str = "run") -> Path:
    d = parent / name
    d.mkdir()
    (d / results.ENGINE_JSON).write_text(json.dumps({"run_id": "run.abcd1234"}))
    (d / LOCK).touch()
    return d


def container_of(d: Path, **over: str) -> Container:
    """Labelled as the runner labels a run's servers (engine.campaign.launch)."""
    labels = {"ruler.campaign": "c", "ruler.run": "run.abcd1234", "ruler.dir": str(d.resolve()),
              "ruler.dir.id": results.dir_identity(d) or ""}
    return Container({**labels, **over})


def verdict(c: Container, *dirs: Path) -> tuple[bool, str]:
    [v] = judge([c], {"run.abcd1234": list(dirs)}, False, None, NOW)
    return v.remove, v.why


def test_a_copy_of_a_live_run_does_not_prove_its_containers_over(tmp_path: Path) -> None:
    live = run_dir(tmp_path)
    c = container_of(live)
    with (live / LOCK).open("a") as lock:  # the live run's engine holds its lock
        fcntl.flock(lock, fcntl.LOCK_EX)
        copy = tmp_path / "copy"
        shutil.copytree(live, copy, symlinks=True)  # as cp -a: its lock is a free one
        assert lock_state(copy)[0] is False
        remove, why = verdict(c, copy)
        assert not remove and f"belongs to the run directory {live.resolve()}" in why
        remove, why = verdict(c, copy, live)  # both found: its own directory decides
        assert not remove and why == f"its run is live ({live})"
    assert verdict(c, copy, live) == (True, f"its run is over ({live})")


def test_a_lock_that_cannot_be_read_leaves_the_container(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    (d / LOCK).unlink()
    (d / LOCK).symlink_to(LOCK)  # a lock no process can open (a loop)
    remove, why = verdict(container_of(d), d)
    assert not remove and why.startswith("whether its run is live is unknown: its lock")
    assert "a symbolic link that loops" in why


def test_a_container_that_does_not_name_its_directory_is_left(tmp_path: Path) -> None:
    d = run_dir(tmp_path)
    remove, why = verdict(Container({"ruler.campaign": "c", "ruler.run": "run.abcd1234"}), d)
    assert not remove and "does not name its run directory" in why


def test_a_lock_file_deleted_under_a_live_engine_does_not_prove_its_run_over(tmp_path: Path) -> None:
    """The engine holds its lock by an open file: the file deleted (a cleanup, an rsync --delete)
    leaves the engine running, its pid in engine.pid. A missing lock proves the run over only when
    no live process is named there."""
    d = run_dir(tmp_path)
    (d / LOCK).unlink()
    (d / PID).write_text(f"{os.getpid()}\n")  # this process stands for the engine, alive
    remove, why = verdict(container_of(d), d)
    assert not remove and why.startswith("whether its run is live is unknown: ")
    assert f"pid {os.getpid()}" in why
    (d / PID).write_text(f"{dead_pid()}\n")  # a pid that has exited: its engine is gone
    assert verdict(container_of(d), d)[0] is True
    (d / PID).unlink()  # no pid either: no engine left a trace of running
    assert verdict(container_of(d), d)[0] is True


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_resume_refuses_a_run_whose_engine_may_be_live(tmp_path: Path) -> None:
    """The same proof as prune's: a resume starts a second engine only on a run proven over; its
    lock deleted while the pid in engine.pid runs (this process stands for that engine) is not."""
    d = run_dir(tmp_path)
    (d / LOCK).unlink()
    (d / PID).write_text(f"{os.getpid()}\n")
    out = ruler("run", "--resume", str(d), "--headless", timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"whether an engine still runs {d} is unknown: its lock" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.timeout(300)
def test_a_lock_that_is_a_fifo_is_said_by_status_resume_and_prune_never_waited_on(tmp_path: Path) -> None:
    """engine.lock replaced by a FIFO: opened the plain way, it blocks (no writer) and each of
    these commands hangs. Each says what the lock is, and nothing is started or removed."""
    d = tmp_path / "run"
    shutil.copytree(FIXTURES / "journals" / "measuring", d)
    (d / results.ENGINE_JSON).write_text(json.dumps({"run_id": "run.abcd1234"}))
    (d / LOCK).unlink()
    os.mkfifo(d / LOCK)
    status = ruler("status", str(d), timeout=60)
    assert "not a regular file (a FIFO)" in status.stdout + status.stderr, status
    assert "Traceback" not in status.stderr
    resume = ruler("run", "--resume", str(d), "--headless", timeout=60)
    assert resume.returncode == 2 and "its lock" in resume.stderr and "a FIFO" in resume.stderr, resume
    pruned = ruler("prune", str(d), timeout=60)  # no container of this run on the daemon: none judged
    assert pruned.returncode in (0, 1) and "Traceback" not in pruned.stderr, pruned
    remove, why = verdict(container_of(d), d)  # one of its containers, judged: left, saying why
    assert not remove and "a FIFO" in why
