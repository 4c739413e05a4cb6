"""Issue 49 (H6): every file and directory of a run, as a real run leaves it, replaced by what a
person (or a script gone wrong) may put in its place: a directory, a FIFO nobody writes to, a
symbolic link that loops and one to /dev/zero; then every command that reads or writes a run
directory, given it. Each says what it can (exit 0) or refuses by the path's name (exit 2); never a
traceback, never a hang, never another exit code.

The paths are listed from a run the real engine made (on the fake runtime, tests/component/fakes.py)
while its engine ran and after its report and exports were written, never by hand: a file a later
change adds to a run directory is swept at once. Each command runs in a forked child
(tests.component.children); a child still running after HANG_S is a hang."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.commands import launch
from engine.commands.cli import main
from engine.record import results
from engine.run import runner as runner_mod
from engine.runtime import docker as runtime_docker
from engine.runtime.base import LABEL_CAMPAIGN, LABEL_DIR, LABEL_DIR_ID, LABEL_RUN
from tests.component.children import cli_in_child, fifo, link_to_zero
from tests.component.fakes import Behaviour, FakeRuntime
from tests.component.helpers import run_with

EXPORTS = ("json", "csv", "guidellm", "vllm-bench")
HANG_S = 60  # each command takes well under a second on this run: past this, it waits on something


def _dir(path: Path) -> Path:
    path.mkdir()
    return path


def _loop(path: Path) -> Path:
    path.symlink_to(path.name)  # resolves to itself: ELOOP for whoever follows it
    return path


SHAPES: dict[str, Callable[[Path], Path]] = {"dir": _dir, "fifo": fifo, "loop": _loop, "zero": link_to_zero}


def _commands(run: Path, good: Path) -> dict[str, list[str]]:
    """Every command on a run directory, as an operator types it; compare has a good copy on one
    side."""
    r = str(run)
    return {"status": ["status", r], "report": ["report", r], "report-html": ["report", r, "--html"],
            **{f"export-{f}": ["export", "--format", f, r] for f in EXPORTS},
            "compare": ["compare", str(good), r], "prune": ["prune", "--dry-run", r],
            "resume": ["run", "--resume", r, "--headless"]}  # last: it may write the most


class _Daemon:
    """A FAKE Docker daemon for `ruler prune`: it holds one exited container, labelled as the
    runner labels a server of the run directory ``run`` (so prune reads that run's lock and pid to
    judge it), and needs no Docker engine."""

    def __init__(self) -> None:
        self.run = Path()
        self.containers = self

    def list(self, **_: Any) -> list[SimpleNamespace]:
        labels = {LABEL_CAMPAIGN: "failing", LABEL_RUN: results.run_id(self.run) or "",
                  LABEL_DIR: str(self.run), LABEL_DIR_ID: results.dir_identity(self.run) or ""}
        return [SimpleNamespace(labels=labels, name="ruler-sweep", status="exited",
                                attrs={"Created": "2026-01-01T00:00:00Z"})]


DAEMON = _Daemon()


class _Listing:
    """The run's printer: lists the run directory while its engine runs (control.sock, engine.pid
    are there only then)."""

    def __init__(self) -> None:
        self.run: Path | None = None
        self.seen: set[str] = set()

    def __call__(self, event: dict[str, Any]) -> None:
        if event["kind"] == "rep_done" and self.run is not None:
            self.seen |= _paths(self.run)


def _paths(run: Path) -> set[str]:
    return {str(p.relative_to(run)) for p in run.rglob("*")}


def _one_window(paths: set[str]) -> list[str]:
    """One path of each kind: every window directory holds the same names, so each name under
    ``windows/`` is swept in the first window that has it."""
    kinds: dict[str, str] = {}
    for p in sorted(paths):
        kinds.setdefault(re.sub(r"^windows/[^/]+", "windows/*", p), p)
    return sorted(kinds.values())


@pytest.fixture(scope="module")
def finished() -> Iterator[tuple[Path, list[str]]]:
    """A finished run with its report (markdown and HTML) and every export written; the paths
    it held at any point; and, while the module runs, the fake runtime in place of the process
    one, for the resumes."""
    listing = _Listing()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # the journal fsyncs each event
    with tempfile.TemporaryDirectory(dir=shm, prefix="ruler-sweep-") as d, \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "printer", lambda: listing)
        real_prepare = launch.prepare

        def prepare(*args: Any, **kwargs: Any) -> Path:
            listing.run = real_prepare(*args, **kwargs)
            return listing.run
        mp.setattr(launch, "prepare", prepare)
        run, code = run_with(Path(d), Behaviour(), mp, echo=True,
                             quality={"greedy": {"n": 2, "max_tokens": 8}})
        assert code == 0
        mp.undo()
        for argv in (["report", "--html"], *(["export", "--format", f] for f in EXPORTS)):
            assert main([*argv, str(run)]) == 0, argv
        paths = _one_window(listing.seen | _paths(run))
        for must in ("control.sock", "engine.pid", "report.html", "export/summary.csv",
                     "windows/s1-control/reps", "windows/s1-control/greedy.json"):
            assert must in paths, (must, paths)  # seen as its engine and its report leave it
        mp.setattr(runner_mod, "runtime_for", lambda *a, **k: FakeRuntime())
        mp.setattr(runtime_docker, "client", lambda *a: DAEMON)
        yield run, paths


def test_every_command_is_whole_on_the_run_as_made(finished: tuple[Path, list[str]], tmp: Path) -> None:
    """The sweep's baseline: on an untouched copy every command exits 0, so an exit 2 below is the
    replaced path's doing."""
    run = DAEMON.run = tmp / "run"
    shutil.copytree(finished[0], run, symlinks=True)
    for name, argv in _commands(run, finished[0]).items():
        code, said = cli_in_child(argv, {}, tmp / "out.txt", HANG_S)
        assert code == 0, (name, said[-3000:])
        if name == "prune":  # the fake daemon's container judged by this run's lock: it is over
            assert "would remove 1 container(s), left 0" in said, said


@pytest.mark.parametrize("command", list(_commands(Path("run"), Path("good"))))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_run_path_replaced_is_read_or_refused_by_name(
        finished: tuple[Path, list[str]], shape: str, command: str, tmp: Path) -> None:
    made, paths = finished
    failures = []
    run = DAEMON.run = tmp / "run"
    for rel in paths:
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(made, run, symlinks=True)
        target = run / rel
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink(missing_ok=True)
        SHAPES[shape](target)
        code, said = cli_in_child(_commands(run, made)[command], {}, tmp / "out.txt", HANG_S)
        if code is None:
            failures.append(f"{rel} as {shape}: hung")
        elif "Traceback" in said or code not in (0, 2) or (code == 2 and rel not in said):
            failures.append(f"{rel} as {shape}: exit {code}: {said.strip().splitlines()[-1:]}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures)
