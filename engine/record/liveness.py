"""Is a run's engine alive? The run lock says so (a pid file alone can outlive its engine)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from engine import files

LOCK = "engine.lock"  # held (flock) by the engine process for its whole life
PID = "engine.pid"  # written by the engine at start, removed at its end


def read_pid(run_dir: Path) -> int | None:
    try:
        return int(files.read_text(run_dir / PID).strip())
    except (OSError, ValueError):
        return None


def lock_state(run_dir: Path) -> tuple[bool | None, str]:
    """(True, why) while some process holds the run lock, (False, why) when none does, and
    (None, why) when this process cannot tell: a lock it may not open or not lock (another user's
    run, a filesystem whose locks it cannot take) says nothing of the engine.

    The lock is opened read-only: a run seen through a read-only view (a bind mount, a snapshot)
    is judged by the same lock as its engine holds, and nothing is created in the directory."""
    path = run_dir / LOCK
    try:
        fd = files.open_fd(path)  # a FIFO put there is said, never waited on
    except files.Unreadable as exc:
        return None, f"its lock {path} is {exc} (move it away: ruler made it a file)"
    except FileNotFoundError:
        # The engine holds its lock by an open file, which outlives the file's name (deleted by a
        # cleanup): the pid it wrote, still running, leaves the question open.
        pid = read_pid(run_dir)
        if pid is not None and pid > 0 and _running(pid):
            return None, (f"its lock {path} is missing while pid {pid} ({run_dir / PID}) runs, "
                          "which may be its engine (remove that file if it is not)")
        return False, f"no engine holds it ({path} does not exist, nor does a process it names)"
    except OSError as e:
        return None, f"cannot open its lock {path} ({e.strerror or e})"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True, f"its engine holds {path}"
    except OSError as e:
        return None, f"cannot lock {path} ({e.strerror or e})"
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False, f"no engine holds {path}"
    finally:
        os.close(fd)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True


def engine_alive(run_dir: Path) -> bool:
    """True while some process holds the run lock (a lock this process cannot read: not known to
    be alive; ``ruler prune`` asks :func:`lock_state`, which tells the two apart)."""
    return lock_state(run_dir)[0] is True
