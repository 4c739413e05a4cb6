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
import glob
import json
import os
import platform
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from engine import files
from engine.errors import BadInput
from engine.words import FROZEN_ITEMS, FROZEN_PROMPTS, FROZEN_QUALITY

CAMPAIGN = "campaign.yaml"
ENGINE_JSON = "engine.json"  # what ruler run prepared: the run id, the campaign's source, the runtime
ENV = "env.json"
JOURNAL = "journal.jsonl"
THROUGHPUT = "throughput.csv"
PROMPTS = FROZEN_PROMPTS  # the plain classes' prompts, frozen at the run's start
ITEMS = FROZEN_ITEMS  # every other class's items (engine.campaign.sources.item), frozen alike
QUALITY = FROZEN_QUALITY  # the quality checks' prompts read from files, frozen alike
DIR_MODE = 0o700
FILE_MODE = 0o600

Scrub = Callable[[str], str]
# Run directory (its real path) -> the filter every text written under it passes (the run's redactor):
# registered by whoever runs the campaign (:func:`guard`), applied by the writers below, so a
# receipt written by any part of the run (a phase, a rep, a quality check) cannot hold a secret
# a server echoed, whichever writer wrote it.
_GUARDS: dict[str, Scrub] = {}


def guard(run_dir: Path, scrub: Scrub) -> None:
    """Every file :func:`write_atomic`, :func:`write_json` and :func:`write_jsonl` write under
    ``run_dir`` from now on passes through ``scrub`` (so does the detached engine's output,
    engine.commands.launch.Guarded)."""
    _GUARDS[os.path.realpath(run_dir)] = scrub


def scrub_for(path: Path) -> Scrub | None:
    """The filter of the guarded run directory that holds ``path``; None when there is none."""
    if not _GUARDS:
        return None
    p = os.path.realpath(path)  # a writer may name the directory through a link
    while True:
        scrub = _GUARDS.get(p)
        if scrub is not None:
            return scrub
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def scrub_data(value: Any, scrub: Scrub) -> Any:
    """``value`` with every string in it (keys included) passed through ``scrub``: a record is
    filtered before it is serialised, so a secret is matched as the server sent it."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, Mapping):
        return {scrub_data(k, scrub): scrub_data(v, scrub) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_data(v, scrub) for v in value]
    return value


def run_id(run_dir: Path) -> str | None:
    """The id the run's servers carry (its containers' ``ruler.run``, its batch jobs' comment):
    engine.json's (the directory's name and a random part, fixed when the run is prepared), else
    its journal's (run_started's ``run``, the same id); None when neither says one."""
    try:
        rid = json.loads(files.read_text(run_dir / ENGINE_JSON)).get("run_id")
        if isinstance(rid, str) and rid:
            return rid
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with files.open_bounded(run_dir / JOURNAL) as f:  # Unreadable: a ValueError
            first = json.loads(f.readline())
        rid = first.get("run") if first.get("kind") == "run_started" else None
        return rid if isinstance(rid, str) and rid else None
    except (OSError, ValueError, AttributeError):
        return None


def dir_identity(run_dir: Path) -> str | None:
    """What tells this run directory from a copy of it (which carries the same run id): this
    machine's name, the directory's device and inode. A move within its filesystem keeps it; a
    copy, or the directory seen from another machine, has another. None when it cannot be read."""
    try:
        st = os.stat(run_dir)
    except OSError:
        return None
    return f"{platform.node()}:{st.st_dev}:{st.st_ino}"


def writable_dir(path: Path, what: str) -> None:
    """Raise BadInput naming ``path`` unless runs can be recorded under it: checked before anything
    starts (a testbed build can take minutes), by writing a page into the directory that is or
    will hold it and throwing it away; nothing is created."""
    if path.exists() and not path.is_dir():
        raise BadInput(f"{what} {path}: not a directory (it is a file)")
    there = next(p for p in [path, *path.parents] if p.exists())
    if not there.is_dir():
        raise BadInput(f"{what} {path}: {there} is a file, not a directory")
    import tempfile  # here, as in each writer below: `ruler status` reads with this module (3 ms)

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
    files.make_dir(d.parent, DIR_MODE)
    return files.make_dir(d, DIR_MODE)


def open_append(path: Path, text: bool = False) -> IO[Any]:
    """A file appended to (journal, logs, lock), created owner-only like every other receipt;
    as text it is line-buffered, so a follower sees each line as it is written. A FIFO, a device
    or a directory put there in its place is files.Unwritable naming it (files.open_fd), never
    waited on."""
    fd = files.open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    if text:
        return os.fdopen(fd, "a", encoding="utf-8", buffering=1)
    return os.fdopen(fd, "ab")


def temporary_for(path: Path) -> tuple[int, str]:
    """An owner-only temporary beside ``path`` that becomes it by ``os.replace``: named
    ``.<name>.<pid>.<random>``, so that one a killed process left is known (:func:`remove_stale`)."""
    import tempfile

    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.")


def remove_stale(path: Path) -> list[Path]:
    """Remove the temporaries of :func:`temporary_for` for ``path`` whose process is gone (a
    SIGKILL between their creation and their rename); returns those removed. One a live process
    is writing is left alone."""
    removed = []
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.*"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to judge
        return True
    try:  # a zombie nobody reaps (an orphan under a container's init) has ended too
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[:1] != [b"Z"]
    except OSError:
        return True


@contextlib.contextmanager
def after(cleanup: Callable[[], object]) -> Iterator[None]:
    """Run ``cleanup`` when the block ends, as ``finally`` would; but when the block raised, an
    OSError of the cleanup is dropped. A results disk that fails (EIO, EROFS, full) fails every
    write on the way out too, and that second error would hide the first, the one to say."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            cleanup()
        raise
    cleanup()


@contextlib.contextmanager
def atomic_file(path: Path, fsync: bool = True) -> Iterator[IO[bytes]]:
    """A binary file that becomes ``path`` when the block ends, owner-only; readers (the console,
    a crash, the next report) see the old file or the new one, never half of one. What is at
    ``path`` is looked at first: a directory, a FIFO, a device or a link that loops there is
    files.Unwritable naming it, before anything is written. The stale temporaries for ``path``
    (of processes that are gone) are removed first."""
    files.check_file(path)
    remove_stale(path)
    try:
        fd, tmp = temporary_for(path)
    except OSError as e:  # said of the file it was for, not of a temporary's random name
        e.filename = str(path)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):  # a full disk leaves no half-written temporary behind
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a write's error names no file
            e.filename = str(path)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Readers (the console, a crash) see the old file or the new one, never half of one. Under
    a guarded run directory the text passes its filter first."""
    scrub = scrub_for(path)
    if scrub is not None:
        text = scrub(text)
    with atomic_file(path) as f:
        f.write(text.encode("utf-8"))


def scrub_file(path: Path, scrub: Callable[[str], str]) -> bool:
    """Rewrite a log another machine wrote (a batch job's boot.log) through ``scrub`` (the
    redactor), atomically and line by line, when a line changes; True when it did."""
    try:
        with files.open_text(path, errors="replace") as f:  # a FIFO there: Unreadable, never waited on
            if not any(scrub(line) != line for line in f):
                return False
    except (FileNotFoundError, files.Unreadable):  # gone, or no file a node wrote: nothing to filter
        return False
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out, \
                files.open_text(path, errors="replace") as f:
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


def write_jsonl(path: Path, rows: Iterable[Any], compact: bool = False) -> None:
    """One JSON value a line, atomically; filtered as :func:`write_json` is, and strict JSON (a
    non-finite figure is None before it gets here)."""
    scrub = scrub_for(path)
    separators = (",", ":") if compact else None
    write_atomic(path, "".join(
        json.dumps(scrub_data(r, scrub) if scrub else r, separators=separators, allow_nan=False)
        + "\n" for r in rows))


def write_json(path: Path, data: Any) -> None:
    scrub = scrub_for(path)
    if scrub is not None:
        data = scrub_data(data, scrub)
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str, allow_nan=False) + "\n")


def read_frozen(path: Path, holds: Callable[[Any], bool] = lambda _: True) -> Any:
    """A JSON file ruler froze into the run directory at its start (engine.json, prompts.json,
    items.json), read back to resume: one damaged since, or not the shape ``holds`` asks, is
    BadInput naming it, never a traceback. A file that cannot be read is the OSError itself."""
    try:
        text = files.read_text(path, errors="replace")
    except files.Unreadable as exc:
        raise BadInput(f"{path}: {exc}: ruler wrote it at the run's start and reads it to resume; "
                       "restore it from a copy") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"{path}: not JSON ({exc}): ruler wrote it at the run's start and reads it to "
                       "resume; restore it from a copy") from None
    if not holds(data):
        raise BadInput(f"{path}: not what ruler froze there (edited or damaged); restore it from a "
                       "copy") from None
    return data
