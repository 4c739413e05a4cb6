"""Is a run's engine alive? The run lock says so (a pid file alone can outlive its engine)."""

from __future__ import annotations

import fcntl
from pathlib import Path

from engine.record.results import open_append

LOCK = "engine.lock"  # held (flock) by the engine process for its whole life
PID = "engine.pid"  # written by the engine at start, removed at its end


def read_pid(run_dir: Path) -> int | None:
    try:
        return int((run_dir / PID).read_text().strip())
    except (OSError, ValueError):
        return None


def engine_alive(run_dir: Path) -> bool:
    """True while some process holds the run lock."""
    try:
        with open_append(run_dir / LOCK) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
            return False
    except BlockingIOError:
        return True
    except OSError:
        return False
