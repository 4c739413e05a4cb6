"""The run directory and its fixed file names.

results/<YYYY-MM-DD>-<campaign>[-N]/
  campaign.yaml  env.json  journal.jsonl  throughput.csv  state.snapshot.json (the fold's cache)
  windows/<session>-<window>/boot.log boot-facts.json boot-excerpt.txt rejection.txt reps/...

Owner-only, like the control socket: directories 0700, files 0600 (a boot log or a prompt may
hold what the operator would not show other users of the machine).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from engine import __version__
from engine.errors import BadInput

CAMPAIGN = "campaign.yaml"
ENV = "env.json"
JOURNAL = "journal.jsonl"
THROUGHPUT = "throughput.csv"
DIR_MODE = 0o700
FILE_MODE = 0o600

def writable_dir(path: Path, what: str) -> None:
    """Raise BadInput naming ``path`` unless runs can be recorded under it: checked before anything
    starts (a testbed build can take minutes), by writing a page into the directory that is or
    will hold it and throwing it away; nothing is created."""
    if path.exists() and not path.is_dir():
        raise BadInput(f"{what} {path}: not a directory (it is a file)")
    there = next(p for p in [path, *path.parents] if p.exists())
    if not there.is_dir():
        raise BadInput(f"{what} {path}: {there} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=there) as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise BadInput(f"{what} {path}: cannot write there ({e.strerror or e})") from e


def new_run_dir(results_root: Path, campaign: str, today: dt.date | None = None) -> Path:
    """Claim ``<date>-<campaign>``, or the first free ``-2``, ``-3``...; mkdir makes it atomic."""
    results_root.mkdir(parents=True, exist_ok=True)
    stem = f"{(today or dt.date.today()).isoformat()}-{campaign}"
    n = 1
    while True:
        path = results_root / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir(mode=DIR_MODE)
            return path
        except FileExistsError:
            n += 1


def window_dir(run_dir: Path, session: str, window: str) -> Path:
    d = run_dir / "windows" / f"{session}-{window}"
    d.parent.mkdir(mode=DIR_MODE, exist_ok=True)
    d.mkdir(mode=DIR_MODE, exist_ok=True)
    return d


def open_append(path: Path, text: bool = False) -> IO[Any]:
    """A file appended to (journal, logs, lock), created owner-only like every other receipt;
    as text it is line-buffered, so a follower sees each line as it is written."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    if text:
        return os.fdopen(fd, "a", encoding="utf-8", buffering=1)
    return os.fdopen(fd, "ab")


def write_atomic(path: Path, text: str) -> None:
    """Readers (the console, a crash) see the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # a full disk leaves no half-written temporary behind
            os.unlink(tmp)
        raise


def scrub_file(path: Path, scrub: Callable[[str], str]) -> bool:
    """Rewrite a log another machine wrote (a batch job's boot.log) through ``scrub`` (the
    redactor), atomically and line by line, when a line changes; True when it did."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            if not any(scrub(line) != line for line in f):
                return False
    except FileNotFoundError:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out, \
                path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                out.write(scrub(line))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def _docker_facts(images: list[str]) -> dict[str, Any]:
    try:
        from engine.runtime import docker as rd  # the Docker SDK only for a docker run's env.json

        dc = rd.client()
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


def env_facts(runtime: str, images: list[str], extra: dict[str, Any]) -> dict[str, Any]:
    from engine import gpu  # here: every reader of a run directory imports this module

    return {
        "ruler_version": __version__,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "runtime": runtime,
        "host": {
            "node": platform.node(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "docker": _docker_facts(images) if runtime == "docker" else None,
        # From NVML, per GPU (engine.gpu): or why there is none ("no NVIDIA GPU (...)").
        "gpu": gpu.env_facts(),
        **extra,
    }
